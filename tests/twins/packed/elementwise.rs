//! Twins of `kernels::elementwise` under bf16: unpack, the f32 twin, pack. Slices of `n`-element
//! ops hold exactly `⌈n/2⌉` words (an odd `n` leaves the high half of the last output word 0);
//! fill / copy / add work on all `2·len` halves of their words.

use crate::twins::{self as cpu, pack_bf16, unpack_bf16};

/// `out[n]` = gelu(inp)
pub fn gelu_forward_bf16(out: &mut [u32], inp: &[u32], n: usize) {
    let mut o = vec![0.0; n];
    cpu::gelu_forward(&mut o, &unpack_bf16(inp, n));
    out.copy_from_slice(&pack_bf16(&o));
}

/// `dinp[n]` = gelu'(inp) · dout (assigned).
pub fn gelu_backward_bf16(dinp: &mut [u32], inp: &[u32], dout: &[u32], n: usize) {
    let mut di = vec![0.0; n];
    cpu::gelu_backward(&mut di, &unpack_bf16(inp, n), &unpack_bf16(dout, n));
    dinp.copy_from_slice(&pack_bf16(&di));
}

/// `out[n]` = a + b
pub fn residual_forward_bf16(out: &mut [u32], a: &[u32], b: &[u32], n: usize) {
    let mut o = vec![0.0; n];
    cpu::residual_forward(&mut o, &unpack_bf16(a, n), &unpack_bf16(b, n));
    out.copy_from_slice(&pack_bf16(&o));
}

/// Every half of `out` = `value` rounded to bf16.
pub fn fill_bf16(out: &mut [u32], value: f32) {
    let mut o = vec![0.0; 2 * out.len()];
    cpu::fill(&mut o, value);
    out.copy_from_slice(&pack_bf16(&o));
}

/// `out` = `a`, word for word (no conversion: NaN payloads are kept).
pub fn copy_bf16(out: &mut [u32], a: &[u32]) {
    out.copy_from_slice(&a[..out.len()]);
}

/// `out` += `a` over all halves.
pub fn add_bf16(out: &mut [u32], a: &[u32]) {
    let n = 2 * out.len();
    let mut o = unpack_bf16(out, n);
    cpu::add(&mut o, &unpack_bf16(&a[..out.len()], n));
    out.copy_from_slice(&pack_bf16(&o));
}
