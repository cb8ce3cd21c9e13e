//! Global gradient norm and AdamW (shaders/optim.wgsl, one source for both precisions behind a
//! storage prelude). Twins: `twins::{grad_norm, adamw}` in f32, `twins::packed::optim` in bf16.
//!
//! Gradients and parameters are words of the run's precision (f32 elements or packed bf16
//! pairs); the master weights and both Adam moments are f32. Under f32 the parameters are the
//! master weights; under bf16 AdamW updates the f32 master and writes it rounded into the
//! packed parameters.
//!
//! `grad_norm_squared` computes Σg² of every *part* (a range of the gradients) in two
//! dispatches, whatever the number of parts: `P = norm_parts(p, n)` threads of a part each sum
//! the squares of one contiguous chunk of it (four f32 words or one bf16 word at a time) into
//! the scratch, then one workgroup per part adds the elements past its last whole chunk unit
//! (`n % 4` under f32) and its `P` partials in a fixed tree. The partition depends only on the
//! part's length, so a part's result repeats bit for bit and equals that part computed alone.
//! `adamw` is one dispatch over a whole range: a thread per four f32 elements (and one per tail
//! element), or per packed bf16 word; which elements get weight decay comes from a bit mask
//! (one bit per 64 elements) built with the ops; its hyper-parameters come from a small storage
//! buffer (`hyper_words`, uploaded every step) so the recorded ops can be replayed, and the clip
//! factor is computed on the device from the norm, so no read-back is needed.

use std::ops::Range;

use super::texels::{self, Bind};
use super::{groups_1d, need, op, shader, Arg, Dispatch};
use crate::cpu;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

/// Most partial sums of one part (the final pass sums them with 256 threads).
const MAX_PARTS: usize = 4096;
/// Fewest words per partial before the count of partials grows.
const PER_PART: usize = 64;
/// Elements per bit of AdamW's weight-decay mask: decay ranges start and end on multiples of
/// it (the flat layout aligns every tensor to it) or at the end of the range.
pub const DECAY_BLOCK: usize = 64;

/// Partial sums of a part of `n` elements of precision `p`: `clamp(⌈words/64⌉, 1, 4096)`.
fn norm_parts(p: Precision, n: usize) -> usize {
    p.words(n).div_ceil(PER_PART).clamp(1, MAX_PARTS)
}

/// Length of the `scratch` view `grad_norm_squared` needs for `parts`: their partial sums.
pub fn norm_scratch_len(p: Precision, parts: &[Range<usize>]) -> usize {
    parts
        .iter()
        .map(|r| norm_parts(p, r.len()))
        .sum::<usize>()
        .max(1)
}

/// Uniform: a count (elements, or norm parts), and where a tail entry starts.
fn dims(what: &str, n: usize, start: usize) -> Result<[u32; 4]> {
    let word = |x: usize| {
        u32::try_from(x).map_err(|_| Error::Config(format!("{what}: {x} elements exceed u32")))
    };
    Ok([word(n)?, 0, 0, word(start)?])
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

/// `out[i]` (f32) = Σ g² over part `parts[i]`, a range of the elements of precision `p` in
/// `grads`, in a fixed order (the same bits as the part alone). Under bf16 a part starts on a
/// word (an even element). `scratch` holds the partial sums (at least
/// `norm_scratch_len(p, parts)`). Two dispatches for any number of parts (none for none);
/// grads is bound read_write so that it may share a buffer with `out` or `scratch`.
pub fn grad_norm_squared(
    g: &Gpu,
    p: Precision,
    out: &View,
    scratch: &View,
    grads: &View,
    parts: &[Range<usize>],
) -> Result<Vec<Dispatch>> {
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let what = "grad_norm_squared";
    let mut table = Vec::with_capacity(4 * parts.len());
    let mut sbase = 0;
    for r in parts {
        if r.start > r.end || p.words(r.end) > grads.len || r.start % p.per_word() != 0 {
            return Err(Error::Config(format!(
                "{what}: part {r:?} is not a range of whole words of the {} {p} words of grads",
                grads.len
            )));
        }
        let n = norm_parts(p, r.len());
        let word = |x: usize| {
            u32::try_from(x).map_err(|_| Error::Config(format!("{what}: {x} exceeds u32")))
        };
        table.extend([
            word(r.start / p.per_word())?,
            word(r.len())?,
            n as u32,
            word(sbase)?,
        ]);
        sbase += n;
    }
    need(&format!("{what} out"), out, parts.len())?;
    need(&format!("{what} scratch"), scratch, sbase)?;
    let max = g.limits.max_compute_workgroups_per_dimension as usize;
    if parts.len() > max {
        return Err(Error::Config(format!(
            "{what}: {} parts exceed {max} workgroups per dimension",
            parts.len()
        )));
    }
    let table_view = g.scratch("grad_norm_squared parts", table.len());
    g.upload(&table_view, &table)?;
    let (out, scratch) = (out.slice(0, parts.len()), scratch.slice(0, sbase));
    let widest = parts
        .iter()
        .map(|r| norm_parts(p, r.len()))
        .max()
        .unwrap_or(1);
    let d = dims(what, parts.len(), 0)?;
    let rows = parts.len() as u32;
    Ok(vec![
        op(
            g,
            shader("optim", p),
            "norm_partials",
            &d,
            &[Arg::W(&scratch), Arg::W(grads), Arg::R(&table_view)],
            [groups_1d(widest)[0], rows, 1],
        )?,
        op(
            g,
            shader("optim", p),
            "norm_final",
            &d,
            &[
                Arg::W(&out),
                Arg::W(&scratch),
                Arg::W(grads),
                Arg::R(&table_view),
            ],
            [1, rows, 1],
        )?,
    ])
}

/// The weight-decay mask of `n` elements: bit `b % 32` of word `b / 32` is set when block `b`
/// ([`DECAY_BLOCK`] elements) lies in one of `decay`.
fn decay_mask(n: usize, decay: &[Range<usize>]) -> Result<Vec<u32>> {
    let blocks = n.div_ceil(DECAY_BLOCK);
    let mut mask = vec![0u32; blocks.div_ceil(32).max(1)];
    for r in decay {
        let edge = |x: usize| x.is_multiple_of(DECAY_BLOCK) || x == n;
        if r.start > r.end || r.end > n || !edge(r.start) || !edge(r.end) {
            return Err(Error::Config(format!(
                "adamw: decay range {r:?} of {n} elements must start and end on multiples of \
                 {DECAY_BLOCK} (or at {n})"
            )));
        }
        // an empty range marks nothing (its end may round up into the next block)
        let blocks = if r.is_empty() {
            0..0
        } else {
            r.start / DECAY_BLOCK..r.end.div_ceil(DECAY_BLOCK)
        };
        for b in blocks {
            mask[b / 32] |= 1 << (b % 32);
        }
    }
    Ok(mask)
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

/// One AdamW step over `n = m.len` elements in one dispatch (two for an f32 `n % 4` tail), twin `twins::adamw` (f32) or
/// `twins::packed::optim::adamw_bf16` with `grad_scale = h.clip_scale(sqrt(norm_sq[0]))`.
/// `params` and `grads` are exactly `p.words(n)` words of precision `p`; `m`, `v` and the
/// `master` weights are `n` f32 elements. Under f32 `master` is `None`: the parameters are the
/// master weights, updated in place (a thread per four elements, and one for each of the
/// `n % 4` tail elements). Under bf16 it is required and `params` receive it rounded (a thread
/// per parameter word). `hp` holds `hyper_words` (8 words); elements inside the ranges `decay`
/// get weight decay (each range starts and ends on a multiple of [`DECAY_BLOCK`] or at `n`).
/// grads is bound read_write so that every view may live in one buffer.
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
    decay: &[Range<usize>],
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
    let mask = decay_mask(n, decay)?;
    let mask_view = g.scratch("adamw decay mask", mask.len());
    g.upload(&mask_view, &mask)?;
    if let Some(ops) = adamw_sliced(
        g,
        p,
        [params, grads, m, v],
        master,
        [&hp, &norm_sq, &mask_view],
    ) {
        return ops;
    }
    let mut ops = Vec::new();
    if let Some(master) = master {
        if n > 0 {
            ops.push(op(
                g,
                shader("optim", p),
                "adamw",
                &dims("adamw", n, 0)?,
                &[
                    Arg::W(params),
                    Arg::W(master),
                    Arg::W(m),
                    Arg::W(v),
                    Arg::W(grads),
                    Arg::R(&hp),
                    Arg::R(&norm_sq),
                    Arg::R(&mask_view),
                ],
                groups_1d(params.len),
            )?);
        }
        return Ok(ops);
    }
    // f32 in place: the leading n/4 vec4s, then the tail
    let body = n / 4 * 4;
    let mut d = dims("adamw", n, 0)?;
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
            shader("optim", p),
            entry,
            &d,
            &[
                Arg::W(&s(params)),
                Arg::W(&s(grads)),
                Arg::W(&s(m)),
                Arg::W(&s(v)),
                Arg::R(&hp),
                Arg::R(&norm_sq),
                Arg::R(&mask_view),
            ],
            groups_1d(threads),
        )?);
    }
    Ok(ops)
}

/// Elements of one slice of AdamW reading copies: its four copies' textures hold this many
/// elements (8 MiB in f32) however long the range, the slices taking turns with them.
pub const ADAMW_SLICE: usize = 1 << 19;

/// AdamW through the `_t` entries ([`texels`]), where `n % 4 == 0` and every copy can be
/// made: per slice of [`ADAMW_SLICE`] elements, the copies of its master weights (under f32
/// the parameters), gradients and two moments, then one dispatch. Elementwise, so the same
/// words as one dispatch over the range. `None` where the buffer entries must run.
fn adamw_sliced(
    g: &Gpu,
    p: Precision,
    [params, grads, m, v]: [&View; 4],
    master: Option<&View>,
    [hp, norm_sq, mask]: [&View; 3],
) -> Option<Result<Vec<Dispatch>>> {
    let n = m.len;
    if n == 0 || !n.is_multiple_of(4) {
        return None;
    }
    let cap = n.min(ADAMW_SLICE);
    let mut ops = Vec::new();
    for start in (0..n).step_by(ADAMW_SLICE) {
        let len = ADAMW_SLICE.min(n - start);
        let words = |x: &View| x.slice(p.words(start), p.words(len));
        let f32s = |x: &View| x.slice(start, len);
        let (params, grads, m, v) = (words(params), words(grads), f32s(m), f32s(v));
        let master = master.map(f32s);
        let list = [
            (Precision::F32, master.as_ref().unwrap_or(&params), len),
            (p, &grads, len),
            (Precision::F32, &m, len),
            (Precision::F32, &v, len),
        ];
        // slices start on whole texels and share one texture height, so a copy fails for
        // every slice or none; on failure nothing is kept and the buffer entries run
        let t = texels::flats_in(g, &mut ops, &list, (0, cap))?;
        let mut binds = vec![Bind::Buffer(&params), Bind::Buffer(&m), Bind::Buffer(&v)];
        binds.extend([hp, norm_sq, mask].map(Bind::Buffer));
        binds.extend(t.iter().map(Bind::Texture));
        let entry = match &master {
            Some(w) => {
                binds.push(Bind::Buffer(w));
                "adamw_t"
            }
            None => "adamw_in_place_t",
        };
        let op = dims("adamw", len, start).and_then(|d| {
            texels::op(
                g,
                (shader("optim", p), entry),
                &d,
                &binds,
                groups_1d(len / 4),
            )
        });
        match op {
            Ok(op) => ops.push(op),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(ops))
}
