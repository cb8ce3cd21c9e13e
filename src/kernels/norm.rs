//! LayerNorm (shaders/norm.wgsl), twins `cpu::{layernorm_forward, layernorm_backward}`.
//!
//! Forward: one dispatch, one thread per row (two passes for mean and variance, one to write).
//! Backward: two dispatches, a per-row pass that adds into the residual gradient `dinp`, and a
//! per-column pass that accumulates `dweight`/`dbias` over the rows in order (fixed summation
//! order, no atomics, so results repeat bit for bit).

use super::{groups_1d, need, op, Arg, Op};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "norm";

/// Checks `n`, `c` and returns `n·c`, which must fit the shader's u32 indices.
fn shape(n: usize, c: usize) -> Result<usize> {
    if c == 0 {
        return Err(Error::Config("layernorm: c must be at least 1".into()));
    }
    n.checked_mul(c)
        .filter(|&nc| u32::try_from(nc).is_ok())
        .ok_or_else(|| Error::Config(format!("layernorm: n·c = {n}·{c} exceeds u32")))
}

/// out [n,c] = (inp − mean)·rstd·weight + bias; mean [n], rstd [n] saved for the backward.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    g: &Gpu,
    out: &View,
    mean: &View,
    rstd: &View,
    inp: &View,
    weight: &View,
    bias: &View,
    n: usize,
    c: usize,
) -> Result<Vec<Op>> {
    let nc = shape(n, c)?;
    need("layernorm out", out, nc)?;
    need("layernorm mean", mean, n)?;
    need("layernorm rstd", rstd, n)?;
    need("layernorm inp", inp, nc)?;
    need("layernorm weight", weight, c)?;
    need("layernorm bias", bias, c)?;
    let dims = [n as u32, c as u32];
    Ok(vec![op(
        g,
        S,
        "layernorm_forward",
        &dims,
        &[
            Arg::W(out),
            Arg::W(mean),
            Arg::W(rstd),
            Arg::R(inp),
            Arg::R(weight),
            Arg::R(bias),
        ],
        groups_1d(n),
    )?])
}

/// dinp [n,c] += ∂/∂inp (the residual gradient, accumulated); dweight [c] +=, dbias [c] +=
/// (column sums over the rows in order).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    g: &Gpu,
    dinp: &View,
    dweight: &View,
    dbias: &View,
    dout: &View,
    inp: &View,
    weight: &View,
    mean: &View,
    rstd: &View,
    n: usize,
    c: usize,
) -> Result<Vec<Op>> {
    let nc = shape(n, c)?;
    need("layernorm dinp", dinp, nc)?;
    need("layernorm dweight", dweight, c)?;
    need("layernorm dbias", dbias, c)?;
    need("layernorm dout", dout, nc)?;
    need("layernorm inp", inp, nc)?;
    need("layernorm weight", weight, c)?;
    need("layernorm mean", mean, n)?;
    need("layernorm rstd", rstd, n)?;
    let dims = [n as u32, c as u32];
    let args = [
        Arg::W(dinp),
        Arg::W(dweight),
        Arg::W(dbias),
        Arg::R(dout),
        Arg::R(inp),
        Arg::R(weight),
        Arg::R(mean),
        Arg::R(rstd),
    ];
    Ok(vec![
        op(g, S, "layernorm_backward_dinp", &dims, &args, groups_1d(n))?,
        op(
            g,
            S,
            "layernorm_backward_dparams",
            &dims,
            &args,
            groups_1d(c),
        )?,
    ])
}
