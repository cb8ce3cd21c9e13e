//! Packed-bf16 LayerNorm (shaders/packed_norm.wgsl), twins
//! `cpu::packed::norm::{layernorm_forward_bf16, layernorm_backward_bf16}`.
//!
//! The f32 kernels' structure with bf16 storage: out, inp, weight, bias, dinp, dweight, dbias
//! and dout are bf16 pairs (views in u32 words); mean and rstd stay f32 `[n]`. Row statistics
//! and every sum are f32; each stored element is rounded once. Forward: one thread per row.
//! Backward: a per-row pass adding into `dinp`, then the column sums for `dweight`/`dbias` in a
//! fixed order, one thread per column pair (one word): directly over all rows when
//! `n ≤ DIRECT_ROWS`, else f32 per-chunk partials (64 rows each, in a `g.scratch` buffer the
//! returned ops own) added in chunk order by a final pass. No atomics: results repeat bit for
//! bit. `c` must be even (rows of whole words).
//!
//! ```text
//!  rows ─┬─ chunk 0 (64 rows) ─► part[0, i] ─┐      (f32)
//!        ├─ chunk 1            ─► part[1, i] ─┼─► dweight[i] = bf16(f32(dweight[i]) + part[0,i] + …)
//!        └─ …                                 ┘
//! ```

use super::{even_rows, first_words};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{groups_1d, need, op, Arg, Op};

const S: &str = "packed_norm";
/// Rows per partial column sum (`CHUNK` in the shader).
const CHUNK: usize = 64;
/// Up to this many rows the column sums walk all rows in one pass.
const DIRECT_ROWS: usize = 256;

/// Checks `n`, `c` (even) and returns `n·c/2`, the words of one `[n,c]` operand; `n·c` must fit
/// the shader's u32 indices.
fn shape(n: usize, c: usize) -> Result<usize> {
    if c == 0 {
        return Err(Error::Config("layernorm bf16: c must be at least 1".into()));
    }
    even_rows("layernorm", "c", c)?;
    n.checked_mul(c)
        .filter(|&nc| u32::try_from(nc).is_ok())
        .map(|nc| nc / 2)
        .ok_or_else(|| Error::Config(format!("layernorm bf16: n·c = {n}·{c} exceeds u32")))
}

/// The first `len` elements of f32 `v`, after checking there are that many.
fn first_f32(name: &str, v: &View, len: usize) -> Result<View> {
    need(name, v, len)?;
    Ok(v.slice(0, len))
}

/// out bf16 `[n,c]` = (inp − mean)·rstd·weight + bias; mean f32 `[n]`, rstd f32 `[n]` saved
/// for the backward. inp bf16 `[n,c]`, weight and bias bf16 `[c]`; `c` even.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward_bf16(
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
    let nw = shape(n, c)?;
    let out = first_words("layernorm bf16 out", out, nw)?;
    let mean = first_f32("layernorm bf16 mean", mean, n)?;
    let rstd = first_f32("layernorm bf16 rstd", rstd, n)?;
    let inp = first_words("layernorm bf16 inp", inp, nw)?;
    let weight = first_words("layernorm bf16 weight", weight, c / 2)?;
    let bias = first_words("layernorm bf16 bias", bias, c / 2)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    Ok(vec![op(
        g,
        S,
        "layernorm_forward",
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

/// dinp bf16 `[n,c]` += ∂/∂inp (the residual gradient, accumulated); dweight, dbias bf16 `[c]`
/// += (column sums over the rows in a fixed order, in f32, rounded once). dout, inp bf16
/// `[n,c]`, weight bf16 `[c]`, mean and rstd f32 `[n]`; `c` even.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_bf16(
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
    let nw = shape(n, c)?;
    let cw = c / 2;
    let dinp = first_words("layernorm bf16 dinp", dinp, nw)?;
    let dweight = first_words("layernorm bf16 dweight", dweight, cw)?;
    let dbias = first_words("layernorm bf16 dbias", dbias, cw)?;
    let dout = first_words("layernorm bf16 dout", dout, nw)?;
    let inp = first_words("layernorm bf16 inp", inp, nw)?;
    let weight = first_words("layernorm bf16 weight", weight, cw)?;
    let mean = first_f32("layernorm bf16 mean", mean, n)?;
    let rstd = first_f32("layernorm bf16 rstd", rstd, n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut ops = vec![op(
        g,
        S,
        "layernorm_backward_dinp",
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
            groups_1d(cw),
        )?);
        return Ok(ops);
    }
    let chunks = n.div_ceil(CHUNK);
    let part_len = 2 * chunks * c;
    if u32::try_from(part_len).is_err() {
        return Err(Error::Config(format!(
            "layernorm bf16: {part_len} partial sums exceed u32"
        )));
    }
    // f32 [2, chunks, c]: Σ norm·dout, then Σ dout, per chunk and column
    let part = g.scratch("layernorm partials", part_len);
    let dims = [n as u32, c as u32, chunks as u32];
    ops.push(op(
        g,
        S,
        "layernorm_dparams_partial",
        &dims,
        &[
            Arg::W(&part),
            Arg::R(&dout),
            Arg::R(&inp),
            Arg::R(&mean),
            Arg::R(&rstd),
        ],
        groups_1d(chunks * cw),
    )?);
    ops.push(op(
        g,
        S,
        "layernorm_dparams_final",
        &dims,
        &[Arg::W(&dweight), Arg::W(&dbias), Arg::R(&part)],
        groups_1d(cw),
    )?);
    Ok(ops)
}
