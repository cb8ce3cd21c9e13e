//! Token + position embedding (shaders/encoder.wgsl), twins `cpu::{encoder_forward,
//! encoder_backward}`.
//!
//! Forward: one dispatch, one thread per output element (per 4 channels when `c % 4 == 0`).
//! Backward: two dispatches and no atomics. `encoder_links` (one workgroup, a walk over the
//! positions from last to first) chains the positions of each token in order, into scratch
//! buffers of `B·T` and `V` u32 that the returned ops own; then `encoder_backward` lets each
//! chain head add its chain's `dout` rows into `dwte` in position order, and each position
//! `t < T` add its `B` rows into `dwpe`. Both sums run in the CPU twin's order, so the GPU result
//! equals the twin bit for bit.

use super::{groups_1d, need, op, Arg, Op};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "encoder";

/// Checks the shape and returns (`B·T`, `B·T·C`), which must fit the shader's u32 indices.
fn shape(b: usize, t: usize, c: usize) -> Result<(usize, usize)> {
    if t == 0 || c == 0 {
        return Err(Error::Config(format!(
            "encoder: t = {t} and c = {c} must be at least 1"
        )));
    }
    let n = b.checked_mul(t);
    let nc = n.and_then(|n| n.checked_mul(c));
    match (n, nc) {
        (Some(n), Some(nc)) if u32::try_from(nc).is_ok() => Ok((n, nc)),
        _ => Err(Error::Config(format!(
            "encoder: B·T·C = {b}·{t}·{c} exceeds u32"
        ))),
    }
}

/// The first `len` elements of `v`, after checking there are that many.
fn first(name: &str, v: &View, len: usize) -> Result<View> {
    need(name, v, len)?;
    Ok(v.slice(0, len))
}

/// out [B·T,C] = `wte[tokens]` + `wpe[position]`; wte `[V,C]` (V = wte.len / c), wpe [maxT ≥ t, C].
/// A token ≥ V yields a NaN row (it would be out of bounds on the CPU).
#[allow(clippy::too_many_arguments)]
pub fn encoder_forward(
    g: &Gpu,
    out: &View,
    tokens: &View,
    wte: &View,
    wpe: &View,
    b: usize,
    t: usize,
    c: usize,
) -> Result<Vec<Op>> {
    let (n, nc) = shape(b, t, c)?;
    let v = wte.len / c;
    if v == 0 {
        return Err(Error::Config(format!(
            "encoder: wte has {} elements, fewer than one row of c = {c}",
            wte.len
        )));
    }
    let out = first("encoder out", out, nc)?;
    let tokens = first("encoder tokens", tokens, n)?;
    let wte = first("encoder wte", wte, v * c)?;
    let wpe = first("encoder wpe", wpe, t * c)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let (entry, cw) = if c.is_multiple_of(4) {
        ("encoder_forward4", c / 4)
    } else {
        ("encoder_forward", c)
    };
    let dims = [
        n as u32,
        cw as u32,
        t as u32,
        v.min(u32::MAX as usize) as u32,
    ];
    Ok(vec![op(
        g,
        S,
        entry,
        &dims,
        &[Arg::W(&out), Arg::R(&tokens), Arg::R(&wte), Arg::R(&wpe)],
        groups_1d(n * cw),
    )?])
}

/// dwte `[V,C]` +=, dwpe `[maxT,C]` += (accumulated) from dout [B·T,C]; tokens ≥ `v` are skipped.
#[allow(clippy::too_many_arguments)]
pub fn encoder_backward(
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
    let (n, nc) = shape(b, t, c)?;
    let vc = v
        .checked_mul(c)
        .filter(|&vc| v > 0 && u32::try_from(vc).is_ok())
        .ok_or_else(|| Error::Config(format!("encoder: V·C = {v}·{c} must be in 1..2³²")))?;
    let dwte = first("encoder dwte", dwte, vc)?;
    let dwpe = first("encoder dwpe", dwpe, t * c)?;
    let dout = first("encoder dout", dout, nc)?;
    let tokens = first("encoder tokens", tokens, n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let links = g.scratch("encoder links", n);
    let firsts = g.scratch("encoder first positions", v);
    let (entry, cw) = if c.is_multiple_of(4) {
        ("encoder_backward4", c / 4)
    } else {
        ("encoder_backward", c)
    };
    let dims = [n as u32, cw as u32, t as u32, v as u32];
    Ok(vec![
        op(
            g,
            S,
            "encoder_links",
            &dims,
            &[Arg::W(&links), Arg::W(&firsts), Arg::R(&tokens)],
            [1, 1, 1],
        )?,
        op(
            g,
            S,
            entry,
            &dims,
            &[
                Arg::W(&dwte),
                Arg::W(&dwpe),
                Arg::R(&dout),
                Arg::R(&tokens),
                Arg::R(&links),
                Arg::R(&firsts),
            ],
            groups_1d(n * cw),
        )?,
    ])
}
