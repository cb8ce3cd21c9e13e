//! Global gradient norm and AdamW for mixed precision (shaders/packed_optim.wgsl): packed bf16
//! gradients in, f32 master weights and Adam moments updated, packed bf16 parameters (the
//! rounded master weights) out. Twins `cpu::packed::optim::{grad_norm_squared_bf16,
//! adamw_bf16}`.
//!
//! `grad_norm_squared_bf16` is two dispatches: `P = norm_scratch_len(⌈n/2⌉)` threads each sum
//! the squares of one contiguous run of words, then one workgroup adds the `P` partials in a
//! fixed tree: the result repeats bit for bit. `adamw_bf16` is one thread per word; its
//! hyper-parameters and clip factor come from the same `hp` words and norm as the f32 AdamW
//! ([`crate::kernels::optim::hyper_words`]).

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::optim::norm_scratch_len;
use crate::kernels::{groups_1d, need, op, Arg, Op};

const S: &str = "packed_optim";

fn dims(what: &str, n: usize, parts: usize, decay_end: usize) -> Result<[u32; 4]> {
    let n32 =
        u32::try_from(n).map_err(|_| Error::Config(format!("{what}: {n} elements exceed u32")))?;
    Ok([
        n32,
        n.div_ceil(2) as u32,
        parts as u32,
        decay_end.min(n) as u32,
    ])
}

fn words_of(what: &str, view: &View, n: usize) -> Result<()> {
    if view.len != n.div_ceil(2) {
        return Err(Error::Config(format!(
            "{what}: {} u32 words for {n} bf16 elements (need {})",
            view.len,
            n.div_ceil(2)
        )));
    }
    Ok(())
}

/// Gradients are bound read_write (as in the f32 kernels) so that they may share a buffer
/// with the views a dispatch writes.
///
/// `out[0]` (f32) = Σ g² over the `n` bf16 gradients packed in `grads` (⌈n/2⌉ words), in a
/// fixed order; `scratch` (f32) holds at least `norm_scratch_len(⌈n/2⌉)` partial sums.
pub fn grad_norm_squared_bf16(
    g: &Gpu,
    out: &View,
    scratch: &View,
    grads: &View,
    n: usize,
) -> Result<Vec<Op>> {
    words_of("grad_norm_squared_bf16 grads", grads, n)?;
    let parts = norm_scratch_len(grads.len);
    need("grad_norm_squared_bf16 out", out, 1)?;
    need("grad_norm_squared_bf16 scratch", scratch, parts)?;
    let (out, scratch) = (out.slice(0, 1), scratch.slice(0, parts));
    let d = dims("grad_norm_squared_bf16", n, parts, 0)?;
    let mut ops = Vec::new();
    if grads.len > 0 {
        ops.push(op(
            g,
            S,
            "norm_partials_bf16",
            &d,
            &[Arg::W(&scratch), Arg::W(grads)],
            groups_1d(parts),
        )?);
    } else {
        // no words: the final pass sums one zero partial
        ops.push(crate::kernels::elementwise::fill(
            g,
            crate::precision::Precision::F32,
            &scratch,
            0.0,
        )?);
    }
    ops.push(op(
        g,
        S,
        "norm_final_bf16",
        &d,
        &[Arg::W(&out), Arg::R(&scratch)],
        [1, 1, 1],
    )?);
    Ok(ops)
}

/// One AdamW step over `master`, `m`, `v` (f32, n elements each) from the packed bf16 `grads`,
/// writing the rounded master weights into the packed bf16 `params` (⌈n/2⌉ words each); twin
/// `cpu::packed::optim::adamw_bf16` with `grad_scale = h.clip_scale(sqrt(norm_sq[0]))`. `hp`
/// holds `hyper_words` (8 words); elements with index < `decay_end` get weight decay.
#[allow(clippy::too_many_arguments)]
pub fn adamw_bf16(
    g: &Gpu,
    params: &View,
    master: &View,
    grads: &View,
    m: &View,
    v: &View,
    hp: &View,
    norm_sq: &View,
    decay_end: usize,
) -> Result<Op> {
    let n = master.len;
    for (name, x) in [("m", m), ("v", v)] {
        if x.len != n {
            return Err(Error::Config(format!(
                "adamw_bf16: {name} has {} elements, master {n}",
                x.len
            )));
        }
    }
    words_of("adamw_bf16 params", params, n)?;
    words_of("adamw_bf16 grads", grads, n)?;
    need("adamw_bf16 hp", hp, 8)?;
    need("adamw_bf16 norm_sq", norm_sq, 1)?;
    let (hp, norm_sq) = (hp.slice(0, 8), norm_sq.slice(0, 1));
    op(
        g,
        S,
        "adamw_bf16",
        &dims("adamw_bf16", n, 0, decay_end)?,
        &[
            Arg::W(params),
            Arg::W(master),
            Arg::W(m),
            Arg::W(v),
            Arg::W(grads),
            Arg::R(&hp),
            Arg::R(&norm_sq),
        ],
        groups_1d(params.len.max(1)),
    )
}
