//! Token + position embedding (shaders/encoder.wgsl, one source for both precisions behind a
//! storage prelude), twins `twins::{encoder_forward, encoder_backward}` in f32 and
//! `twins::packed::encoder` in bf16.
//!
//! out, wte, wpe, dout, dwte, dwpe are views in u32 words (f32 elements, or bf16 pairs: then
//! `c` must be even, so every row is whole words); tokens are u32. Forward: one dispatch, one
//! thread per output word. Backward: two dispatches and no atomics. `encoder_links` (one
//! workgroup, a walk over the positions from last to first) chains the positions of each token
//! in order, into scratch buffers of `B·T` and `V` u32 that the returned ops own; then
//! `encoder_backward` lets each chain head add its chain's `dout` rows into `dwte` in position
//! order, and each position `t < T` add its `B` rows into `dwpe`, per word in f32 (bf16: from
//! the widened old values, rounding once). Both sums run in the CPU twin's order, so the GPU
//! result equals the twin bit for bit.

use super::{groups_1d, op, shader, Arg, Dispatch};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

/// "encoder", "encoder bf16": how messages name the family in `p`.
fn family(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "encoder",
        Precision::Bf16 => "encoder bf16",
    }
}

/// Checks the shape (bf16: c even) and returns (`B·T`, `B·T·C` in words); `B·T·C` must fit the
/// shader's u32 indices.
fn shape(p: Precision, b: usize, t: usize, c: usize) -> Result<(usize, usize)> {
    let f = family(p);
    if t == 0 || c == 0 {
        return Err(Error::Config(format!(
            "{f}: t = {t} and c = {c} must be at least 1"
        )));
    }
    if p == Precision::Bf16 {
        super::even_rows("encoder", "c", c)?;
    }
    let n = b.checked_mul(t);
    let nc = n.and_then(|n| n.checked_mul(c));
    match (n, nc) {
        (Some(n), Some(nc)) if u32::try_from(nc).is_ok() => Ok((n, p.words(nc))),
        _ => Err(Error::Config(format!(
            "{f}: B·T·C = {b}·{t}·{c} exceeds u32"
        ))),
    }
}

/// The first `words` words of operand `arg`, after checking there are that many.
fn first(p: Precision, arg: &str, v: &View, words: usize) -> Result<View> {
    super::need_in(p, &format!("{} {arg}", family(p)), v, words)?;
    Ok(v.slice(0, words))
}

/// The first `n` u32 tokens of `v`.
fn first_tokens(p: Precision, v: &View, n: usize) -> Result<View> {
    super::need(&format!("{} tokens", family(p)), v, n)?;
    Ok(v.slice(0, n))
}

/// out [B·T,C] = `wte[tokens]` + `wpe[position]`; wte `[V,C]` (V = the rows wte holds), wpe
/// [maxT ≥ t, C]. A token ≥ V yields a NaN row (it would be out of bounds on the CPU).
#[allow(clippy::too_many_arguments)]
pub fn encoder_forward(
    g: &Gpu,
    p: Precision,
    out: &View,
    tokens: &View,
    wte: &View,
    wpe: &View,
    b: usize,
    t: usize,
    c: usize,
) -> Result<Vec<Dispatch>> {
    let (n, nw) = shape(p, b, t, c)?;
    let cw = p.words(c);
    let v = wte.len / cw;
    if v == 0 {
        return Err(Error::Config(format!(
            "{}: wte has {} u32 words, fewer than one row of c = {c}",
            family(p),
            wte.len
        )));
    }
    let out = first(p, "out", out, nw)?;
    let tokens = first_tokens(p, tokens, n)?;
    let wte = first(p, "wte", wte, v * cw)?;
    let wpe = first(p, "wpe", wpe, t * cw)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let dims = [
        n as u32,
        cw as u32,
        t as u32,
        v.min(u32::MAX as usize) as u32,
    ];
    Ok(vec![op(
        g,
        shader("encoder", p),
        "encoder_forward",
        &dims,
        &[Arg::W(&out), Arg::R(&tokens), Arg::R(&wte), Arg::R(&wpe)],
        groups_1d(nw),
    )?])
}

/// dwte `[V,C]` +=, dwpe `[maxT,C]` += (accumulated) from dout [B·T,C]; tokens ≥ `v` are skipped.
#[allow(clippy::too_many_arguments)]
pub fn encoder_backward(
    g: &Gpu,
    p: Precision,
    dwte: &View,
    dwpe: &View,
    dout: &View,
    tokens: &View,
    b: usize,
    t: usize,
    c: usize,
    v: usize,
) -> Result<Vec<Dispatch>> {
    let (n, nw) = shape(p, b, t, c)?;
    let cw = p.words(c);
    let vc = v
        .checked_mul(c)
        .filter(|&vc| v > 0 && u32::try_from(vc).is_ok())
        .ok_or_else(|| Error::Config(format!("{}: V·C = {v}·{c} must be in 1..2³²", family(p))))?;
    let dwte = first(p, "dwte", dwte, p.words(vc))?;
    let dwpe = first(p, "dwpe", dwpe, t * cw)?;
    let dout = first(p, "dout", dout, nw)?;
    let tokens = first_tokens(p, tokens, n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let links = g.scratch("encoder links", n);
    let firsts = g.scratch("encoder first positions", v);
    let dims = [n as u32, cw as u32, t as u32, v as u32];
    Ok(vec![
        op(
            g,
            shader("encoder", p),
            "encoder_links",
            &dims,
            &[Arg::W(&links), Arg::W(&firsts), Arg::R(&tokens)],
            [1, 1, 1],
        )?,
        op(
            g,
            shader("encoder", p),
            "encoder_backward",
            &dims,
            &[
                Arg::W(&dwte),
                Arg::W(&dwpe),
                Arg::R(&dout),
                Arg::R(&tokens),
                Arg::R(&links),
                Arg::R(&firsts),
            ],
            groups_1d(nw),
        )?,
    ])
}
