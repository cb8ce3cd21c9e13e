//! Twins of `kernels::encoder` under bf16: unpack, the f32 twin, pack. bf16 slices hold `rows·c/2`
//! words (out/dout `[B·T,C]`, wte/dwte `[V,C]`, wpe/dwpe `[maxT,C]`); `c` must be even.

use crate::twins::{self as cpu, pack_bf16, unpack_bf16};

/// Elements of a packed `[rows, c]` slice of `words` words.
fn elems(words: &[u32], c: usize) -> usize {
    assert!(c.is_multiple_of(2), "encoder bf16: c = {c} must be even");
    words.len() / (c / 2) * c
}

/// `out[b,t,:]` = `wte[tokens[b,t],:]` + `wpe[t,:]`
pub fn encoder_forward_bf16(
    out: &mut [u32],
    tokens: &[u32],
    wte: &[u32],
    wpe: &[u32],
    b: usize,
    t: usize,
    c: usize,
) {
    let mut o = vec![0.0; b * t * c];
    let (vc, tc) = (elems(wte, c), elems(wpe, c));
    cpu::encoder_forward(
        &mut o,
        tokens,
        &unpack_bf16(&wte[..vc / 2], vc),
        &unpack_bf16(&wpe[..tc / 2], tc),
        b,
        t,
        c,
    );
    out.copy_from_slice(&pack_bf16(&o));
}

/// `dwte[tok]` += `dout[b,t]`, `dwpe[t]` += `dout[b,t]` (f32 sums from the widened old values,
/// rounded once).
pub fn encoder_backward_bf16(
    dwte: &mut [u32],
    dwpe: &mut [u32],
    dout: &[u32],
    tokens: &[u32],
    b: usize,
    t: usize,
    c: usize,
) {
    let (vc, tc) = (elems(dwte, c), elems(dwpe, c));
    assert_eq!(2 * dwte.len(), vc, "encoder bf16: dwte holds whole rows");
    assert_eq!(2 * dwpe.len(), tc, "encoder bf16: dwpe holds whole rows");
    let (mut dte, mut dpe) = (unpack_bf16(dwte, vc), unpack_bf16(dwpe, tc));
    cpu::encoder_backward(
        &mut dte,
        &mut dpe,
        &unpack_bf16(dout, b * t * c),
        tokens,
        b,
        t,
        c,
    );
    dwte.copy_from_slice(&pack_bf16(&dte));
    dwpe.copy_from_slice(&pack_bf16(&dpe));
}
