//! Twins of the packed-bf16 matmul kernels (`kernels::matmul` with `Linear::new(Precision::Bf16)`): unpack, run
//! [`matmul_forward`] / [`matmul_backward`], pack. Packed arguments are `&[u32]` of `⌈len/2⌉`
//! words for `len` elements (`out[n,oc]` takes `⌈n·oc/2⌉` words, and so on).

use crate::twins::{matmul_backward, matmul_forward, pack_bf16, unpack_bf16};

/// The `len` elements packed in `words` (which holds at least `⌈len/2⌉`).
fn unpack(words: &[u32], len: usize) -> Vec<f32> {
    unpack_bf16(&words[..len.div_ceil(2)], len)
}

/// Packs `x` into the first `⌈x.len()/2⌉` words of `dst`.
fn store(dst: &mut [u32], x: &[f32]) {
    dst[..x.len().div_ceil(2)].copy_from_slice(&pack_bf16(x));
}

/// `out[n,oc]` = `inp[n,c]` · `weight[oc,c]ᵀ` + `bias[oc]`, all packed bf16.
pub fn matmul_forward_bf16(
    out: &mut [u32],
    inp: &[u32],
    weight: &[u32],
    bias: Option<&[u32]>,
    n: usize,
    c: usize,
    oc: usize,
) {
    let mut y = vec![0.0; n * oc];
    matmul_forward_bf16_f32out(&mut y, inp, weight, bias, n, c, oc);
    store(out, &y);
}

/// [`matmul_forward_bf16`] with `out[n,oc]` f32 (the LM head's logits).
pub fn matmul_forward_bf16_f32out(
    out: &mut [f32],
    inp: &[u32],
    weight: &[u32],
    bias: Option<&[u32]>,
    n: usize,
    c: usize,
    oc: usize,
) {
    let (x, w) = (unpack(inp, n * c), unpack(weight, oc * c));
    let b = bias.map(|b| unpack(b, oc));
    matmul_forward(out, &x, &w, b.as_deref(), n, c, oc);
}

/// `dinp[n,c]` = `dout[n,oc]` · `weight[oc,c]` (assigned); `dweight[oc,c]` += doutᵀ · inp;
/// `dbias[oc]` += Σ_rows dout; all packed bf16.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_bf16(
    dinp: &mut [u32],
    dweight: &mut [u32],
    dbias: Option<&mut [u32]>,
    dout: &[u32],
    inp: &[u32],
    weight: &[u32],
    n: usize,
    c: usize,
    oc: usize,
) {
    let dy = unpack(dout, n * oc);
    matmul_backward_bf16_f32dout(dinp, dweight, dbias, &dy, inp, weight, n, c, oc);
}

/// [`matmul_backward_bf16`] with `dout[n,oc]` f32 (the LM head's dlogits).
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_bf16_f32dout(
    dinp: &mut [u32],
    dweight: &mut [u32],
    dbias: Option<&mut [u32]>,
    dout: &[f32],
    inp: &[u32],
    weight: &[u32],
    n: usize,
    c: usize,
    oc: usize,
) {
    let (x, w) = (unpack(inp, n * c), unpack(weight, oc * c));
    let mut dx = vec![0.0; n * c];
    let mut dw = unpack(dweight, oc * c);
    let mut db = dbias.as_ref().map(|b| unpack(b, oc));
    matmul_backward(
        &mut dx,
        &mut dw,
        db.as_deref_mut(),
        &dout[..n * oc],
        &x,
        &w,
        n,
        c,
        oc,
    );
    store(dinp, &dx);
    store(dweight, &dw);
    if let (Some(dst), Some(db)) = (dbias, db) {
        store(dst, &db);
    }
}
