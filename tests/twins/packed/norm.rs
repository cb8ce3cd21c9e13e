//! Twins of `kernels::norm` under bf16: unpack, the f32 twin, pack. bf16 `[n,c]` slices hold
//! `n·c/2` words, `[c]` ones `c/2`; mean and rstd are f32 `[n]`. `c` must be even.

use crate::twins::{self as cpu, pack_bf16, unpack_bf16};

/// out bf16 `[n,c]` = (inp − mean)·rstd·weight + bias; stores f32 `mean[n]`, `rstd[n]`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward_bf16(
    out: &mut [u32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[u32],
    weight: &[u32],
    bias: &[u32],
    n: usize,
    c: usize,
) {
    assert!(c.is_multiple_of(2), "layernorm bf16: c = {c} must be even");
    let mut o = vec![0.0; n * c];
    cpu::layernorm_forward(
        &mut o,
        mean,
        rstd,
        &unpack_bf16(inp, n * c),
        &unpack_bf16(weight, c),
        &unpack_bf16(bias, c),
        n,
        c,
    );
    out.copy_from_slice(&pack_bf16(&o));
}

/// dinp bf16 `[n,c]` +=, dweight, dbias bf16 `[c]` += (each widened, accumulated in f32 by the
/// f32 twin, rounded once).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_bf16(
    dinp: &mut [u32],
    dweight: &mut [u32],
    dbias: &mut [u32],
    dout: &[u32],
    inp: &[u32],
    weight: &[u32],
    mean: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    assert!(c.is_multiple_of(2), "layernorm bf16: c = {c} must be even");
    let (mut di, mut dw, mut db) = (
        unpack_bf16(dinp, n * c),
        unpack_bf16(dweight, c),
        unpack_bf16(dbias, c),
    );
    cpu::layernorm_backward(
        &mut di,
        &mut dw,
        &mut db,
        &unpack_bf16(dout, n * c),
        &unpack_bf16(inp, n * c),
        &unpack_bf16(weight, c),
        mean,
        rstd,
        n,
        c,
    );
    dinp.copy_from_slice(&pack_bf16(&di));
    dweight.copy_from_slice(&pack_bf16(&dw));
    dbias.copy_from_slice(&pack_bf16(&db));
}
