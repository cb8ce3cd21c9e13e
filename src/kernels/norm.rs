//! LayerNorm (shaders/norm.wgsl, one source for both precisions behind a storage prelude).
//! Twins: `twins::{layernorm_forward, layernorm_backward}` in f32, `twins::packed::norm` in bf16.
//!
//! out, inp, weight, bias, dinp, dout, dweight and dbias are words of precision `p` (f32
//! elements, or bf16 pairs: `c` must then be even); mean and rstd stay f32 `[n]`. Forward: one
//! dispatch, one thread per row, optionally storing the residual add before it first
//! ([`residual_layernorm_forward`]). Backward: a per-row pass that adds into the residual gradient
//! `dinp`, then the column sums for `dweight`/`dbias` in a fixed order: one pass walking all
//! rows when `n ≤ DIRECT_ROWS`, else f32 per-chunk partials (64 rows each, into a scratch buffer
//! the returned ops own) and a pass adding the chunks in order, which keeps the rows in cache and
//! gives the software adapter enough threads. So the backward is 2 or 3 dispatches, with no
//! atomics: results repeat bit for bit.
//!
//! Under f32 with `c % 4 == 0` the row passes sum in four vec4 lanes (vector loads); otherwise,
//! and always under bf16, they sum in element order, the twin's (under bf16 with `c % 4 == 0`
//! reading Quads: four elements a load, the same sums). The partials use Quads
//! whenever `c % 4 == 0` in either precision: a column's sum runs over the rows in the same
//! order however the columns are spread over threads.
//!
//! ```text
//!  rows ─┬─ chunk 0 (64 rows) ─► part[0, i] ─┐
//!        ├─ chunk 1            ─► part[1, i] ─┼─► dweight[i] += part[0,i] + part[1,i] + …
//!        └─ …                                 ┘
//! ```

use super::texels::{self, Bind};
use super::{even_rows, groups_1d, need, need_in, op, shader, Arg, Dispatch};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

/// Rows per partial column sum (`CHUNK` in the shader).
const CHUNK: usize = 64;
/// Up to this many rows the column sums walk all rows in one pass.
const DIRECT_ROWS: usize = 256;

/// `"layernorm"`, or `"layernorm bf16"`: how errors name the kernel.
fn family(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "layernorm",
        Precision::Bf16 => "layernorm bf16",
    }
}

/// Checks `n`, `c` (even under bf16) and returns `n·c`, which must fit the shader's u32
/// indices.
fn shape(p: Precision, n: usize, c: usize) -> Result<usize> {
    if c == 0 {
        return Err(Error::Config(format!(
            "{}: c must be at least 1",
            family(p)
        )));
    }
    if p == Precision::Bf16 {
        even_rows("layernorm", "c", c)?;
    }
    n.checked_mul(c)
        .filter(|&nc| u32::try_from(nc).is_ok())
        .ok_or_else(|| Error::Config(format!("{}: n·c = {n}·{c} exceeds u32", family(p))))
}

/// The first `len` elements of `v` in precision `p`, after checking there are that many.
fn first(p: Precision, arg: &str, v: &View, len: usize) -> Result<View> {
    need_in(p, &format!("{} {arg}", family(p)), v, p.words(len))?;
    Ok(v.slice(0, p.words(len)))
}

/// The first `len` f32 elements of `v` (mean, rstd).
fn first_f32(p: Precision, arg: &str, v: &View, len: usize) -> Result<View> {
    need(&format!("{} {arg}", family(p)), v, len)?;
    Ok(v.slice(0, len))
}

/// The row passes' entry: vec4 lanes for f32 rows of whole vec4s, element order over Quads for
/// bf16 rows of whole Quads (the plain entry's bits in half the loads), element order over words
/// otherwise.
fn row_entry(p: Precision, c: usize, [plain, lanes4, ordered]: [&'static str; 3]) -> &'static str {
    match (p, c.is_multiple_of(4)) {
        (Precision::F32, true) => lanes4,
        (Precision::Bf16, true) => ordered,
        (_, false) => plain,
    }
}

/// out `[n,c]` = (inp − mean)·rstd·weight + bias; mean `[n]`, rstd `[n]` (f32) saved for the
/// backward. inp `[n,c]`, weight and bias `[c]`, all in precision `p`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    g: &Gpu,
    p: Precision,
    out: &View,
    mean: &View,
    rstd: &View,
    inp: &View,
    weight: &View,
    bias: &View,
    n: usize,
    c: usize,
) -> Result<Vec<Dispatch>> {
    forward(g, p, [out, mean, rstd, inp, weight, bias], None, n, c)
}

/// The residual add and the layernorm after it in one dispatch: `sum = a + b` (stored, as
/// `elementwise::residual_forward` stores it), then [`layernorm_forward`] of `sum`; the same
/// bits as the two ops. a, b, sum `[n,c]` in precision `p`.
#[allow(clippy::too_many_arguments)]
pub fn residual_layernorm_forward(
    g: &Gpu,
    p: Precision,
    sum: &View,
    out: &View,
    mean: &View,
    rstd: &View,
    (a, b): (&View, &View),
    weight: &View,
    bias: &View,
    n: usize,
    c: usize,
) -> Result<Vec<Dispatch>> {
    forward(
        g,
        p,
        [out, mean, rstd, sum, weight, bias],
        Some((a, b)),
        n,
        c,
    )
}

/// [`layernorm_forward`] of `inp`, which the residual operands sum into first when given.
fn forward(
    g: &Gpu,
    p: Precision,
    [out, mean, rstd, inp, weight, bias]: [&View; 6],
    residual: Option<(&View, &View)>,
    n: usize,
    c: usize,
) -> Result<Vec<Dispatch>> {
    let nc = shape(p, n, c)?;
    let out = first(p, "out", out, nc)?;
    let mean = first_f32(p, "mean", mean, n)?;
    let rstd = first_f32(p, "rstd", rstd, n)?;
    let inp = first(p, "inp", inp, nc)?;
    let weight = first(p, "weight", weight, c)?;
    let bias = first(p, "bias", bias, c)?;
    let residual = match residual {
        Some((a, b)) => Some((first(p, "a", a, nc)?, first(p, "b", b, nc)?)),
        None => None,
    };
    if n == 0 {
        return Ok(Vec::new());
    }
    if let Some(ops) = forward_texels(
        g,
        p,
        [&out, &mean, &rstd, &inp, &weight, &bias],
        &residual,
        n,
        c,
    )? {
        return Ok(ops);
    }
    let mut args = vec![
        Arg::W(&out),
        Arg::W(&mean),
        Arg::W(&rstd),
        Arg::W(&inp),
        Arg::R(&weight),
        Arg::R(&bias),
    ];
    let entry = match &residual {
        Some((a, b)) => {
            args.extend([Arg::R(a), Arg::R(b)]);
            row_entry(
                p,
                c,
                [
                    "residual_layernorm_forward",
                    "residual_layernorm_forward4",
                    "residual_layernorm_forward_q",
                ],
            )
        }
        None => row_entry(
            p,
            c,
            [
                "layernorm_forward",
                "layernorm_forward4",
                "layernorm_forward_q",
            ],
        ),
    };
    Ok(vec![op(
        g,
        shader("norm", p),
        entry,
        &[n as u32, c as u32],
        &args,
        groups_1d(n),
    )?])
}

/// The forward reading its input (or the residual operands), weight and bias from flat copies
/// ([`texels`]), where they can be made and `c % 4 == 0`: the copies and one dispatch.
fn forward_texels(
    g: &Gpu,
    p: Precision,
    [out, mean, rstd, inp, weight, bias]: [&View; 6],
    residual: &Option<(View, View)>,
    n: usize,
    c: usize,
) -> Result<Option<Vec<Dispatch>>> {
    if !c.is_multiple_of(4) {
        return Ok(None);
    }
    let mut ops = Vec::new();
    // weight, bias, then the input or the two residual operands
    let mut list = vec![(p, weight, c), (p, bias, c)];
    match residual {
        Some((a, b)) => list.extend([(p, a, n * c), (p, b, n * c)]),
        None => list.push((p, inp, n * c)),
    }
    let Some(t) = texels::flats(g, &mut ops, &list) else {
        return Ok(None);
    };
    let mut binds = vec![Bind::Buffer(out), Bind::Buffer(mean), Bind::Buffer(rstd)];
    let entry = match &t[..] {
        [tw, tb, tx] => {
            binds.extend([Bind::Texture(tx), Bind::Texture(tw), Bind::Texture(tb)]);
            "layernorm_forward_t"
        }
        [tw, tb, ta, tb2] => {
            binds.extend([Bind::Buffer(inp), Bind::Texture(tw), Bind::Texture(tb)]);
            binds.extend([Bind::Texture(ta), Bind::Texture(tb2)]);
            "residual_layernorm_forward_t"
        }
        _ => return Ok(None),
    };
    ops.push(texels::op(
        g,
        (shader("norm", p), entry),
        &[n as u32, c as u32],
        &binds,
        groups_1d(n),
    )?);
    Ok(Some(ops))
}

/// dinp `[n,c]` += ∂/∂inp (the residual gradient, accumulated); dweight `[c]` +=, dbias `[c]` +=
/// (column sums over the rows in a fixed order, in f32, each stored element rounded once under
/// bf16). dout, inp `[n,c]`, weight `[c]` in precision `p`; mean and rstd f32 `[n]`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    g: &Gpu,
    p: Precision,
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
) -> Result<Vec<Dispatch>> {
    let nc = shape(p, n, c)?;
    let dinp = first(p, "dinp", dinp, nc)?;
    let dweight = first(p, "dweight", dweight, c)?;
    let dbias = first(p, "dbias", dbias, c)?;
    let dout = first(p, "dout", dout, nc)?;
    let inp = first(p, "inp", inp, nc)?;
    let weight = first(p, "weight", weight, c)?;
    let mean = first_f32(p, "mean", mean, n)?;
    let rstd = first_f32(p, "rstd", rstd, n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let cw = p.words(c);
    let mut ops = Vec::new();
    // dout, inp, weight, mean, rstd and dinp's old value as flat copies, where all can be made
    let t = match c.is_multiple_of(4) {
        true => texels::flats(
            g,
            &mut ops,
            &[
                (p, &dout, nc),
                (p, &inp, nc),
                (p, &weight, c),
                (Precision::F32, &mean, n),
                (Precision::F32, &rstd, n),
                (p, &dinp, nc),
            ],
        ),
        false => None,
    };
    let rows = [n as u32, c as u32];
    ops.push(match &t {
        Some(t) => {
            let mut binds = vec![Bind::Buffer(&dinp)];
            binds.extend(t.iter().map(Bind::Texture));
            let entry = "layernorm_backward_dinp_t";
            texels::op(g, (shader("norm", p), entry), &rows, &binds, groups_1d(n))?
        }
        None => op(
            g,
            shader("norm", p),
            row_entry(
                p,
                c,
                [
                    "layernorm_backward_dinp",
                    "layernorm_backward_dinp4",
                    "layernorm_backward_dinp_q",
                ],
            ),
            &rows,
            &[
                Arg::W(&dinp),
                Arg::R(&dout),
                Arg::R(&inp),
                Arg::R(&weight),
                Arg::R(&mean),
                Arg::R(&rstd),
            ],
            groups_1d(n),
        )?,
    });
    if n <= DIRECT_ROWS {
        ops.push(op(
            g,
            shader("norm", p),
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
            "{}: {part_len} partial sums exceed u32",
            family(p)
        )));
    }
    // f32 [2, chunks, c]: Σ norm·dout, then Σ dout, per chunk and column
    let part = g.scratch("layernorm partials", part_len);
    let dims = [n as u32, c as u32, chunks as u32];
    let (entry, threads) = if c.is_multiple_of(4) {
        ("layernorm_dparams_partial4", chunks * c / 4)
    } else {
        ("layernorm_dparams_partial", chunks * cw)
    };
    if let Some([t_dout, t_inp, _, t_mean, t_rstd, _]) = t.as_deref() {
        let mut binds = vec![Bind::Buffer(&part)];
        binds.extend([t_dout, t_inp, t_mean, t_rstd].map(Bind::Texture));
        let entry = "layernorm_dparams_partial_t";
        ops.push(texels::op(
            g,
            (shader("norm", p), entry),
            &dims,
            &binds,
            groups_1d(threads),
        )?);
    } else {
        ops.push(op(
            g,
            shader("norm", p),
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
    }
    ops.push(op(
        g,
        shader("norm", p),
        "layernorm_dparams_final",
        &dims,
        &[Arg::W(&dweight), Arg::W(&dbias), Arg::R(&part)],
        groups_1d(cw),
    )?);
    Ok(ops)
}
