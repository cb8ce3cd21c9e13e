//! Causal multi-head self-attention (shaders/attention.wgsl), forward and backward.
//! Twins: `cpu::{attention_forward, attention_backward}`.
//!
//! qkv `[B,T,3C]` holds q | k | v per token; head h owns channels h·hs..(h+1)·hs of each part
//! (hs = C/NH, scale 1/√hs). The forward is one dispatch (threads own query rows), the backward
//! two: rows (dpre into `scratch`, dq) then columns (dk, dv gathered over t ≥ t2), so no thread
//! ever adds into another's output and every sum has a fixed order. When hs % 4 == 0 the `_vec4`
//! entry points run: a thread owns 4 tokens of a head and loads q/k/v/dout as vec4 into 4×4
//! register tiles (about 4× faster on lavapipe); otherwise a scalar kernel, one token per thread.

use super::{groups_1d, need, op, Arg, Op};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "attention";

/// Checks the shape and returns hs = C/NH (also used by the packed variant).
pub(crate) fn head_size(b: usize, t: usize, c: usize, nh: usize) -> Result<usize> {
    if nh == 0 || c == 0 || !c.is_multiple_of(nh) {
        return Err(Error::Config(format!(
            "attention: channels c = {c} must be a positive multiple of the head count nh = {nh}"
        )));
    }
    let fits = |dims: &[usize]| {
        dims.iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .is_some_and(|n| n <= u32::MAX as usize)
    };
    if !fits(&[b, nh, t, t]) || !fits(&[b, t, 3, c]) {
        return Err(Error::Config(format!(
            "attention: B={b}, T={t}, C={c}, NH={nh} overflows 32-bit indices"
        )));
    }
    Ok(c / nh)
}

/// Uniform: b, t, c, nh, hs, scale (f32 bits) (also used by the packed variant).
pub(crate) fn dims(b: usize, t: usize, c: usize, nh: usize, hs: usize) -> [u32; 8] {
    let scale = 1.0 / (hs as f32).sqrt();
    [
        b as u32,
        t as u32,
        c as u32,
        nh as u32,
        hs as u32,
        scale.to_bits(),
        0,
        0,
    ]
}

/// The entry point and workgroup count for a shape: the tiled vec4 kernel (64 threads a group,
/// one thread per 4 tokens of a head) when hs % 4 == 0, else the scalar one (one thread per token
/// of a head, `groups_1d`).
fn pick(
    vec4: &'static str,
    scalar: &'static str,
    b: usize,
    t: usize,
    nh: usize,
    hs: usize,
) -> (&'static str, [u32; 3]) {
    if hs.is_multiple_of(4) {
        let g = ((b * nh * t.div_ceil(4)) as u32).div_ceil(64).max(1);
        let groups = if g <= 65535 {
            [g, 1, 1]
        } else {
            [65535, g.div_ceil(65535), 1]
        };
        (vec4, groups)
    } else {
        (scalar, groups_1d(b * nh * t))
    }
}

/// qkv `[B,T,3C]` = q | k | v, head h uses channels h*hs..(h+1)*hs of each (hs = C/NH).
/// att `[B,NH,T,T]` receives the softmax probabilities (zero above the diagonal), out `[B,T,C]`.
/// Twin: cpu::attention_forward. Scale 1/sqrt(hs). One dispatch.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward(
    g: &Gpu,
    out: &View,
    att: &View,
    qkv: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Op>> {
    let hs = head_size(b, t, c, nh)?;
    let (n_out, n_att, n_qkv) = (b * t * c, b * nh * t * t, b * t * 3 * c);
    need("attention out", out, n_out)?;
    need("attention att", att, n_att)?;
    need("attention qkv", qkv, n_qkv)?;
    if b * t == 0 {
        return Ok(Vec::new());
    }
    // Bind exactly the elements used (multiples of 4 on the vec4 path).
    let (out, att, qkv) = (
        out.slice(0, n_out),
        att.slice(0, n_att),
        qkv.slice(0, n_qkv),
    );
    let (entry, groups) = pick("attention_forward_vec4", "attention_forward", b, t, nh, hs);
    Ok(vec![op(
        g,
        S,
        entry,
        &dims(b, t, c, nh, hs),
        &[Arg::W(&out), Arg::W(&att), Arg::R(&qkv)],
        groups,
    )?])
}

/// dqkv `[B,T,3C]` ASSIGNED (every element written, zeros where no gradient), from dout `[B,T,C]`,
/// qkv and att. scratch: a `[B,NH,T,T]` buffer the kernel uses for dpreatt (its upper triangle is
/// left untouched). Twin: cpu::attention_backward. Two dispatches (rows, then columns).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    g: &Gpu,
    dqkv: &View,
    scratch: &View,
    dout: &View,
    qkv: &View,
    att: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Op>> {
    let hs = head_size(b, t, c, nh)?;
    let (n_out, n_att, n_qkv) = (b * t * c, b * nh * t * t, b * t * 3 * c);
    need("attention dqkv", dqkv, n_qkv)?;
    need("attention scratch", scratch, n_att)?;
    need("attention dout", dout, n_out)?;
    need("attention qkv", qkv, n_qkv)?;
    need("attention att", att, n_att)?;
    if b * t == 0 {
        return Ok(Vec::new());
    }
    let dqkv = dqkv.slice(0, n_qkv);
    let scratch = scratch.slice(0, n_att);
    let dout = dout.slice(0, n_out);
    let qkv = qkv.slice(0, n_qkv);
    let att = att.slice(0, n_att);
    let args = [
        Arg::W(&dqkv),
        Arg::W(&scratch),
        Arg::R(&dout),
        Arg::R(&qkv),
        Arg::R(&att),
    ];
    let d = dims(b, t, c, nh, hs);
    let (rows, groups) = pick(
        "attention_backward_rows_vec4",
        "attention_backward_rows",
        b,
        t,
        nh,
        hs,
    );
    let (cols, _) = pick(
        "attention_backward_cols_vec4",
        "attention_backward_cols",
        b,
        t,
        nh,
        hs,
    );
    Ok(vec![
        op(g, S, rows, &d, &args, groups)?,
        op(g, S, cols, &d, &args, groups)?,
    ])
}
