//! Twins of `kernels::attention` under bf16: the f32 twins [`attention_forward`] and
//! [`attention_backward`] on the unpacked bf16 inputs, outputs packed (the specification, see
//! [`super`]). The forward's `out` comes from the f32 probabilities before `att` is rounded, as
//! in the GPU kernel. Slices are packed bf16 words: out `[B,T,C]`, att `[B,NH,T,T]` (an odd
//! element count leaves the last word's high half 0), qkv and dqkv `[B,T,3C]`, dout `[B,T,C]`.

use crate::twins::{attention_backward, attention_forward, pack_bf16, unpack_bf16};

/// out, att (assigned) = pack(attention_forward(unpack(qkv))).
#[allow(clippy::too_many_arguments)]
pub fn attention_forward_bf16(
    out: &mut [u32],
    att: &mut [u32],
    qkv: &[u32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) {
    let qkv = unpack_bf16(qkv, b * t * 3 * c);
    let mut o = vec![0.0; b * t * c];
    let mut a = vec![0.0; b * nh * t * t];
    attention_forward(&mut o, &mut a, &qkv, b, t, c, nh);
    out.copy_from_slice(&pack_bf16(&o));
    att.copy_from_slice(&pack_bf16(&a));
}

/// dqkv (assigned) = pack(attention_backward(unpack(dout, qkv, att))).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_bf16(
    dqkv: &mut [u32],
    dout: &[u32],
    qkv: &[u32],
    att: &[u32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) {
    let dout = unpack_bf16(dout, b * t * c);
    let qkv = unpack_bf16(qkv, b * t * 3 * c);
    let att = unpack_bf16(att, b * nh * t * t);
    let mut d = vec![0.0; b * t * 3 * c];
    attention_backward(&mut d, &dout, &qkv, &att, b, t, c, nh);
    dqkv.copy_from_slice(&pack_bf16(&d));
}
