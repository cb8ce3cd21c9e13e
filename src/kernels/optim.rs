//! Global gradient norm and AdamW (shaders/optim.wgsl), twins `cpu::{grad_norm, adamw}`.
//!
//! `grad_norm_squared` is two dispatches: `P = norm_scratch_len(n)` threads each sum the squares
//! of one contiguous chunk of the view (vec4 loads) into `scratch[p]`, then one workgroup adds
//! the `n % 4` tail elements and the `P` partials in a fixed tree. The partition depends only on
//! `n`, so the result repeats bit for bit.
//! `adamw` is one thread per vec4 (plus a tail dispatch); its hyper-parameters come from a small
//! storage buffer (`hyper_words`, uploaded every step) so the recorded ops can be replayed, and
//! the clip factor is computed on the device from the norm, so no read-back is needed.

use super::{groups_1d, need, op, Arg, Op};
use crate::cpu;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "optim";

/// Most partial sums of `grad_norm_squared` (the final pass sums them with 256 threads).
const MAX_PARTS: usize = 4096;
/// Fewest elements per partial before the count of partials grows.
const PER_PART: usize = 64;

/// Length of the `scratch` view `grad_norm_squared` needs for `n` gradient elements: the number
/// of partial sums, `clamp(⌈n/64⌉, 1, 4096)`.
pub fn norm_scratch_len(n: usize) -> usize {
    n.div_ceil(PER_PART).clamp(1, MAX_PARTS)
}

fn len_u32(name: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Config(format!("{name}: {n} elements exceed u32")))
}

/// `out[0]` = Σ grads² over the whole view, in a fixed order. `scratch` holds the partial sums
/// (length at least `norm_scratch_len(grads.len)`). Two dispatches (one when grads.len < 4);
/// grads is bound read_write so that it may share a buffer with `out` or `scratch`.
pub fn grad_norm_squared(g: &Gpu, out: &View, scratch: &View, grads: &View) -> Result<Vec<Op>> {
    let n = len_u32("grad_norm_squared grads", grads.len)?;
    let parts = norm_scratch_len(grads.len);
    need("grad_norm_squared out", out, 1)?;
    need("grad_norm_squared scratch", scratch, parts)?;
    let (out, scratch) = (out.slice(0, 1), scratch.slice(0, parts));
    let n4 = grads.len / 4;
    let mut ops = Vec::new();
    if n4 > 0 {
        ops.push(op(
            g,
            S,
            "norm_partials4",
            &[n, parts as u32],
            &[Arg::W(&scratch), Arg::W(&grads.slice(0, 4 * n4))],
            groups_1d(parts),
        )?);
    }
    // The final pass reads the tail (n % 4 elements) from the scalar view; with no elements at
    // all it binds scratch in its place and reads nothing.
    let tail = if grads.len > 0 { grads } else { &scratch };
    let used = if n4 > 0 { parts as u32 } else { 0 };
    ops.push(op(
        g,
        S,
        "norm_final",
        &[n, used],
        &[Arg::W(&out), Arg::W(&scratch), Arg::W(tail)],
        [1, 1, 1],
    )?);
    Ok(ops)
}

/// The 8 u32 words of the `hp` buffer `adamw` reads: lr, beta1, beta2, eps, weight_decay,
/// t (u32), clip, 0.
pub fn hyper_words(h: &cpu::AdamW) -> [u32; 8] {
    [
        h.lr.to_bits(),
        h.beta1.to_bits(),
        h.beta2.to_bits(),
        h.eps.to_bits(),
        h.weight_decay.to_bits(),
        h.t,
        h.clip.to_bits(),
        0,
    ]
}

/// One AdamW step over params/grads/m/v (same length), twin `cpu::adamw` with
/// `grad_scale = h.clip_scale(sqrt(norm_sq[0]))`. `hp` holds `hyper_words` (8 words); elements
/// with index < `decay_end` get weight decay. One dispatch over the leading `n/4` vec4s, plus one
/// for the `n % 4` tail elements when there are any. grads is bound read_write so that all four
/// views may live in one buffer.
#[allow(clippy::too_many_arguments)]
pub fn adamw(
    g: &Gpu,
    params: &View,
    grads: &View,
    m: &View,
    v: &View,
    hp: &View,
    norm_sq: &View,
    decay_end: usize,
) -> Result<Vec<Op>> {
    let n = params.len;
    for (name, x) in [("grads", grads), ("m", m), ("v", v)] {
        if x.len != n {
            return Err(Error::Config(format!(
                "adamw: {name} has {} elements, params {n}",
                x.len
            )));
        }
    }
    need("adamw hp", hp, 8)?;
    need("adamw norm_sq", norm_sq, 1)?;
    let (hp, norm_sq) = (hp.slice(0, 8), norm_sq.slice(0, 1));
    let n32 = len_u32("adamw params", n)?;
    let decay_end = decay_end.min(n) as u32;
    let body = n / 4 * 4;
    let mut ops = Vec::new();
    if body > 0 {
        let s = |x: &View| x.slice(0, body);
        ops.push(op(
            g,
            S,
            "adamw4",
            &[n32, 0, 0, decay_end],
            &[
                Arg::W(&s(params)),
                Arg::W(&s(grads)),
                Arg::W(&s(m)),
                Arg::W(&s(v)),
                Arg::R(&hp),
                Arg::R(&norm_sq),
            ],
            groups_1d(body / 4),
        )?);
    }
    if body < n {
        ops.push(op(
            g,
            S,
            "adamw",
            &[n32, 0, body as u32, decay_end],
            &[
                Arg::W(params),
                Arg::W(grads),
                Arg::W(m),
                Arg::W(v),
                Arg::R(&hp),
                Arg::R(&norm_sq),
            ],
            groups_1d(n - body),
        )?);
    }
    Ok(ops)
}
