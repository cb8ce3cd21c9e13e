//! LayerNorm (shaders/norm.wgsl), twins `cpu::{layernorm_forward, layernorm_backward}`.
//!
//! Forward: one dispatch, one thread per row. Backward: a per-row pass that adds into the
//! residual gradient `dinp`, then the column sums for `dweight`/`dbias` in a fixed order: one
//! pass walking all rows when `n ≤ DIRECT_ROWS`, else per-chunk partials (64 rows each, into a
//! scratch buffer the returned ops own) and a pass adding the chunks in order, which keeps the
//! rows in cache and gives the software adapter enough threads. So the backward is 2 or 3
//! dispatches, with no atomics: results repeat bit for bit. When `c % 4 == 0` the row passes use
//! vec4 loads.
//!
//! ```text
//!  rows ─┬─ chunk 0 (64 rows) ─► part[0, i] ─┐
//!        ├─ chunk 1            ─► part[1, i] ─┼─► dweight[i] += part[0,i] + part[1,i] + …
//!        └─ …                                 ┘
//! ```

use super::{groups_1d, need, op, Arg, Op};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "norm";
/// Rows per partial column sum (`CHUNK` in the shader).
const CHUNK: usize = 64;
/// Up to this many rows the column sums walk all rows in one pass.
const DIRECT_ROWS: usize = 256;

/// Checks `n`, `c` and returns `n·c`, which must fit the shader's u32 indices.
fn shape(n: usize, c: usize) -> Result<usize> {
    if c == 0 {
        return Err(Error::Config("layernorm: c must be at least 1".into()));
    }
    n.checked_mul(c)
        .filter(|&nc| u32::try_from(nc).is_ok())
        .ok_or_else(|| Error::Config(format!("layernorm: n·c = {n}·{c} exceeds u32")))
}

/// The first `len` elements of `v`, after checking there are that many.
fn first(name: &str, v: &View, len: usize) -> Result<View> {
    need(name, v, len)?;
    Ok(v.slice(0, len))
}

/// out `[n,c]` = (inp − mean)·rstd·weight + bias; mean `[n]`, rstd `[n]` saved for the backward.
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
    let out = first("layernorm out", out, nc)?;
    let mean = first("layernorm mean", mean, n)?;
    let rstd = first("layernorm rstd", rstd, n)?;
    let inp = first("layernorm inp", inp, nc)?;
    let weight = first("layernorm weight", weight, c)?;
    let bias = first("layernorm bias", bias, c)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let entry = if c.is_multiple_of(4) {
        "layernorm_forward4"
    } else {
        "layernorm_forward"
    };
    Ok(vec![op(
        g,
        S,
        entry,
        &[n as u32, c as u32],
        &[
            Arg::W(&out),
            Arg::W(&mean),
            Arg::W(&rstd),
            Arg::R(&inp),
            Arg::R(&weight),
            Arg::R(&bias),
        ],
        groups_1d(n),
    )?])
}

/// dinp `[n,c]` += ∂/∂inp (the residual gradient, accumulated); dweight `[c]` +=, dbias `[c]` +=
/// (column sums over the rows in a fixed order).
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
    let dinp = first("layernorm dinp", dinp, nc)?;
    let dweight = first("layernorm dweight", dweight, c)?;
    let dbias = first("layernorm dbias", dbias, c)?;
    let dout = first("layernorm dout", dout, nc)?;
    let inp = first("layernorm inp", inp, nc)?;
    let weight = first("layernorm weight", weight, c)?;
    let mean = first("layernorm mean", mean, n)?;
    let rstd = first("layernorm rstd", rstd, n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let v4 = c.is_multiple_of(4);
    let mut ops = vec![op(
        g,
        S,
        if v4 {
            "layernorm_backward_dinp4"
        } else {
            "layernorm_backward_dinp"
        },
        &[n as u32, c as u32],
        &[
            Arg::W(&dinp),
            Arg::R(&dout),
            Arg::R(&inp),
            Arg::R(&weight),
            Arg::R(&mean),
            Arg::R(&rstd),
        ],
        groups_1d(n),
    )?];
    if n <= DIRECT_ROWS {
        ops.push(op(
            g,
            S,
            "layernorm_backward_dparams",
            &[n as u32, c as u32],
            &[
                Arg::W(&dweight),
                Arg::W(&dbias),
                Arg::R(&dout),
                Arg::R(&inp),
                Arg::R(&mean),
                Arg::R(&rstd),
            ],
            groups_1d(c),
        )?);
        return Ok(ops);
    }
    let chunks = n.div_ceil(CHUNK);
    let part_len = 2 * chunks * c;
    if u32::try_from(part_len).is_err() {
        return Err(Error::Config(format!(
            "layernorm: {part_len} partial sums exceed u32"
        )));
    }
    let part = g.scratch("layernorm partials", part_len);
    let dims = [n as u32, c as u32, chunks as u32];
    let (entry, threads) = if v4 {
        ("layernorm_dparams_partial4", chunks * c / 4)
    } else {
        ("layernorm_dparams_partial", chunks * c)
    };
    ops.push(op(
        g,
        S,
        entry,
        &dims,
        &[
            Arg::W(&part),
            Arg::R(&dout),
            Arg::R(&inp),
            Arg::R(&mean),
            Arg::R(&rstd),
        ],
        groups_1d(threads),
    )?);
    ops.push(op(
        g,
        S,
        "layernorm_dparams_final",
        &dims,
        &[Arg::W(&dweight), Arg::W(&dbias), Arg::R(&part)],
        groups_1d(c),
    )?);
    Ok(ops)
}
