//! Packed-bf16 token + position embedding (shaders/packed_encoder.wgsl), twins
//! `cpu::packed::encoder::{encoder_forward_bf16, encoder_backward_bf16}`.
//!
//! The f32 kernels with bf16 storage (out, wte, wpe, dout, dwte, dwpe are bf16 pairs, views in
//! u32 words; tokens stay u32). Forward: one thread per output word (two channels). Backward:
//! the f32 family's deterministic scheme, no atomics: its `encoder_links` pass (u32 only, run
//! from the f32 shader) chains the positions of each token into `g.scratch` buffers of `B·T` and
//! `V` u32 that the returned ops own; then each chain head adds its chain's `dout` rows into
//! `dwte` in position order and each position `t < T` adds its `B` rows into `dwpe`, per word,
//! in f32 from the widened old values, rounding once. Both sums run in the CPU twin's order, so
//! the GPU result equals the twin bit for bit. `c` must be even.

use super::{even_rows, first_words};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{groups_1d, need, op, Arg, Op};

const S: &str = "packed_encoder";

/// Checks the shape (c even) and returns (`B·T`, `B·T·C/2` words); `B·T·C` must fit the
/// shader's u32 indices.
fn shape(b: usize, t: usize, c: usize) -> Result<(usize, usize)> {
    if t == 0 || c == 0 {
        return Err(Error::Config(format!(
            "encoder bf16: t = {t} and c = {c} must be at least 1"
        )));
    }
    even_rows("encoder", "c", c)?;
    let n = b.checked_mul(t);
    let nc = n.and_then(|n| n.checked_mul(c));
    match (n, nc) {
        (Some(n), Some(nc)) if u32::try_from(nc).is_ok() => Ok((n, nc / 2)),
        _ => Err(Error::Config(format!(
            "encoder bf16: B·T·C = {b}·{t}·{c} exceeds u32"
        ))),
    }
}

/// The first `len` u32 tokens of `v`, after checking there are that many.
fn first_tokens(v: &View, len: usize) -> Result<View> {
    need("encoder bf16 tokens", v, len)?;
    Ok(v.slice(0, len))
}

/// out bf16 [B·T,C] = `wte[tokens]` + `wpe[position]` (f32 add, one rounding); tokens u32
/// `[B·T]`, wte bf16 `[V,C]` (V = 2·wte.len / c), wpe bf16 [maxT ≥ t, C]; `c` even.
/// A token ≥ V yields a NaN row (bf16 0x7fc0).
#[allow(clippy::too_many_arguments)]
pub fn encoder_forward_bf16(
    g: &Gpu,
    out: &View,
    tokens: &View,
    wte: &View,
    wpe: &View,
    b: usize,
    t: usize,
    c: usize,
) -> Result<Vec<Op>> {
    let (n, nw) = shape(b, t, c)?;
    let cw = c / 2;
    let v = wte.len / cw;
    if v == 0 {
        return Err(Error::Config(format!(
            "encoder bf16: wte has {} u32 words, fewer than one row of c = {c} (bf16 pairs)",
            wte.len
        )));
    }
    let out = first_words("encoder bf16 out", out, nw)?;
    let tokens = first_tokens(tokens, n)?;
    let wte = first_words("encoder bf16 wte", wte, v * cw)?;
    let wpe = first_words("encoder bf16 wpe", wpe, t * cw)?;
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
        S,
        "encoder_forward",
        &dims,
        &[Arg::W(&out), Arg::R(&tokens), Arg::R(&wte), Arg::R(&wpe)],
        groups_1d(nw),
    )?])
}

/// dwte bf16 `[V,C]` +=, dwpe bf16 `[maxT,C]` += (accumulated) from dout bf16 [B·T,C]; tokens
/// u32 `[B·T]`, tokens ≥ `v` are skipped; `c` even.
#[allow(clippy::too_many_arguments)]
pub fn encoder_backward_bf16(
    g: &Gpu,
    dwte: &View,
    dwpe: &View,
    dout: &View,
    tokens: &View,
    b: usize,
    t: usize,
    c: usize,
    v: usize,
) -> Result<Vec<Op>> {
    let (n, nw) = shape(b, t, c)?;
    let cw = c / 2;
    let vc = v
        .checked_mul(c)
        .filter(|&vc| v > 0 && u32::try_from(vc).is_ok())
        .ok_or_else(|| Error::Config(format!("encoder bf16: V·C = {v}·{c} must be in 1..2³²")))?;
    let dwte = first_words("encoder bf16 dwte", dwte, vc / 2)?;
    let dwpe = first_words("encoder bf16 dwpe", dwpe, t * cw)?;
    let dout = first_words("encoder bf16 dout", dout, nw)?;
    let tokens = first_tokens(tokens, n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let links = g.scratch("encoder links", n);
    let firsts = g.scratch("encoder first positions", v);
    let dims = [n as u32, cw as u32, t as u32, v as u32];
    Ok(vec![
        // u32 only: the f32 family's pass, shared as is
        op(
            g,
            "encoder",
            "encoder_links",
            &dims,
            &[Arg::W(&links), Arg::W(&firsts), Arg::R(&tokens)],
            [1, 1, 1],
        )?,
        op(
            g,
            S,
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
