//! Global gradient norm and AdamW (shaders/optim.wgsl, one source for both precisions behind a
//! storage prelude). Twins: `cpu::{grad_norm, adamw}` in f32, `cpu::packed::optim` in bf16.
//!
//! Gradients and parameters are words of the run's precision (f32 elements or packed bf16
//! pairs); the master weights and both Adam moments are f32. Under f32 the parameters are the
//! master weights; under bf16 AdamW updates the f32 master and writes it rounded into the
//! packed parameters.
//!
//! `grad_norm_squared` is two dispatches: `P = norm_scratch_len(p, n)` threads each sum the
//! squares of one contiguous chunk of the view (four f32 words or one bf16 word at a time) into
//! `scratch[p]`, then one workgroup adds the elements past the last whole chunk unit (`n % 4`
//! under f32) and the `P` partials in a fixed tree. The partition depends only on `n`, so the
//! result repeats bit for bit.
//! `adamw` is one thread per four f32 elements (and one per tail element), or per packed bf16
//! word; its hyper-parameters come from a small storage
//! buffer (`hyper_words`, uploaded every step) so the recorded ops can be replayed, and the clip
//! factor is computed on the device from the norm, so no read-back is needed.

use super::{groups_1d, need, op, Arg, Dispatch};
use crate::cpu;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

/// The family's shader in precision `p`.
fn shader(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "optim",
        Precision::Bf16 => "optim_bf16",
    }
}

/// Most partial sums of `grad_norm_squared` (the final pass sums them with 256 threads).
const MAX_PARTS: usize = 4096;
/// Fewest words per partial before the count of partials grows.
const PER_PART: usize = 64;

/// Length of the `scratch` view `grad_norm_squared` needs for `n` gradient elements of
/// precision `p`: the number of partial sums, `clamp(⌈words/64⌉, 1, 4096)`.
pub fn norm_scratch_len(p: Precision, n: usize) -> usize {
    p.words(n).div_ceil(PER_PART).clamp(1, MAX_PARTS)
}

/// Uniform: element count, partial count, the end of weight decay.
fn dims(what: &str, n: usize, parts: usize, decay_end: usize) -> Result<[u32; 4]> {
    let n32 =
        u32::try_from(n).map_err(|_| Error::Config(format!("{what}: {n} elements exceed u32")))?;
    Ok([n32, parts as u32, decay_end.min(n) as u32, 0])
}

/// Checks that `v` is exactly the `n` elements of precision `p`.
fn exact(p: Precision, what: &str, v: &View, n: usize) -> Result<()> {
    if v.len != p.words(n) {
        return Err(Error::Config(format!(
            "{what}: {} u32 words for {n} {p} elements (need {})",
            v.len,
            p.words(n)
        )));
    }
    Ok(())
}

/// `out[0]` (f32) = Σ g² over the `n` gradients of precision `p` in `grads` (exactly
/// `p.words(n)` words), in a fixed order. `scratch` holds the partial sums (at least
/// `norm_scratch_len(p, n)`). Two dispatches (one when there is no whole unit: f32 n < 4, or
/// no elements); grads is bound read_write so that it may share a buffer with `out` or
/// `scratch`.
pub fn grad_norm_squared(
    g: &Gpu,
    p: Precision,
    out: &View,
    scratch: &View,
    grads: &View,
    n: usize,
) -> Result<Vec<Dispatch>> {
    exact(p, "grad_norm_squared grads", grads, n)?;
    let parts = norm_scratch_len(p, n);
    need("grad_norm_squared out", out, 1)?;
    need("grad_norm_squared scratch", scratch, parts)?;
    let (out, scratch) = (out.slice(0, 1), scratch.slice(0, parts));
    // whole units: four f32 words, or every bf16 word
    let units = match p {
        Precision::F32 => n / 4,
        Precision::Bf16 => grads.len,
    };
    let mut ops = Vec::new();
    if units > 0 {
        ops.push(op(
            g,
            shader(p),
            "norm_partials",
            &dims("grad_norm_squared", n, parts, 0)?,
            &[Arg::W(&scratch), Arg::W(grads)],
            groups_1d(parts),
        )?);
    }
    // The final pass reads the tail (f32: n % 4 elements) from the gradients; with no elements
    // at all it binds scratch in their place and reads nothing.
    let tail = if grads.len > 0 { grads } else { &scratch };
    let used = if units > 0 { parts } else { 0 };
    ops.push(op(
        g,
        shader(p),
        "norm_final",
        &dims("grad_norm_squared", n, used, 0)?,
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

/// One AdamW step over `n = m.len` elements, twin `cpu::adamw` (f32) or
/// `cpu::packed::optim::adamw_bf16` with `grad_scale = h.clip_scale(sqrt(norm_sq[0]))`.
/// `params` and `grads` are exactly `p.words(n)` words of precision `p`; `m`, `v` and the
/// `master` weights are `n` f32 elements. Under f32 `master` is `None`: the parameters are the
/// master weights, updated in place (a thread per four elements, and one for each of the
/// `n % 4` tail elements). Under bf16 it is required and `params` receive it rounded (a thread
/// per parameter word). `hp` holds `hyper_words` (8 words); elements with index < `decay_end`
/// get weight decay. grads is bound read_write so that every view may live in one buffer.
#[allow(clippy::too_many_arguments)]
pub fn adamw(
    g: &Gpu,
    p: Precision,
    params: &View,
    master: Option<&View>,
    grads: &View,
    m: &View,
    v: &View,
    hp: &View,
    norm_sq: &View,
    decay_end: usize,
) -> Result<Vec<Dispatch>> {
    let n = m.len;
    match (p, master) {
        (Precision::F32, None) | (Precision::Bf16, Some(_)) => {}
        (_, w) => {
            return Err(Error::Config(format!(
                "adamw {p}: master weights {} (f32 updates its parameters in place, bf16 \
                 needs f32 masters)",
                if w.is_some() { "given" } else { "missing" }
            )))
        }
    }
    let masters = master.map(|w| ("master", w));
    for (name, x) in std::iter::once(("v", v)).chain(masters) {
        if x.len != n {
            return Err(Error::Config(format!(
                "adamw {p}: {name} has {} elements, m {n}",
                x.len
            )));
        }
    }
    exact(p, "adamw params", params, n)?;
    exact(p, "adamw grads", grads, n)?;
    need("adamw hp", hp, 8)?;
    need("adamw norm_sq", norm_sq, 1)?;
    let (hp, norm_sq) = (hp.slice(0, 8), norm_sq.slice(0, 1));
    let mut ops = Vec::new();
    if let Some(master) = master {
        if n > 0 {
            ops.push(op(
                g,
                shader(p),
                "adamw",
                &dims("adamw", n, 0, decay_end)?,
                &[
                    Arg::W(params),
                    Arg::W(master),
                    Arg::W(m),
                    Arg::W(v),
                    Arg::W(grads),
                    Arg::R(&hp),
                    Arg::R(&norm_sq),
                ],
                groups_1d(params.len),
            )?);
        }
        return Ok(ops);
    }
    // f32 in place: the leading n/4 vec4s, then the tail
    let body = n / 4 * 4;
    let mut d = dims("adamw", n, 0, decay_end)?;
    for (entry, vec4, len) in [
        ("adamw_in_place4", true, body),
        ("adamw_in_place", false, n - body),
    ] {
        if len == 0 {
            continue;
        }
        // the vec4 entry binds the leading vec4s, a thread each; the tail entry the whole
        // views, a thread per element from `body`
        let (threads, start) = if vec4 { (body / 4, 0) } else { (len, body) };
        d[3] = start as u32;
        let s = |x: &View| if vec4 { x.slice(0, body) } else { x.clone() };
        ops.push(op(
            g,
            shader(p),
            entry,
            &d,
            &[
                Arg::W(&s(params)),
                Arg::W(&s(grads)),
                Arg::W(&s(m)),
                Arg::W(&s(v)),
                Arg::R(&hp),
                Arg::R(&norm_sq),
            ],
            groups_1d(threads),
        )?);
    }
    Ok(ops)
}
