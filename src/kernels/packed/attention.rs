//! Causal multi-head self-attention on packed bf16 (shaders/packed_attention.wgsl), forward and
//! backward: [`crate::kernels::attention`] with every tensor bf16 (two per u32 word), f32 inside.
//! Twins: `cpu::packed::attention::{attention_forward_bf16, attention_backward_bf16}`, i.e. the
//! f32 twins on the unpacked inputs, outputs packed.
//!
//! Same arguments and semantics as the f32 functions: the forward writes (assigns) `out` and
//! `att` (the softmax probabilities, rounded to bf16, zeros above the diagonal); `out` is summed
//! from the f32 probabilities before they are rounded, as the f32 twin does. The backward reads
//! the stored bf16 probabilities and assigns every element of `dqkv`. Scores, softmax and every
//! sum are f32, in the f32 kernels' fixed orders (bit-identical run to run).
//!
//! The f32 intermediates live, as f32 bits, in the words of the buffers the f32 kernels use for
//! them, which are half as large here: the forward pairs query rows t and T−1−t in one thread
//! (their T words hold the longer row's T−t f32 values), and the backward keeps dpre's strictly
//! lower triangle in `scratch` as f32 (T(T−1)/2 of each head's T·T/2 words) and passes each
//! diagonal entry to the second dispatch in the first word of dqkv's own dk slot. Hence the
//! constraints: head size C/NH even and T even (each thread then writes whole words).
//! As in the f32 kernel, hs % 4 == 0 runs `_vec4` entry points (4 rows or 4 row pairs a thread,
//! 4-channel loads into 4×4 register tiles, about as fast as the f32 vec4 path on lavapipe);
//! otherwise scalar ones, a row (pair) a thread.

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::attention::{dims, head_size};
use crate::kernels::{groups_1d, op, Arg, Op};

const S: &str = "packed_attention";

/// Checks the shape (as the f32 kernel, plus even hs and T) and returns hs = C/NH.
fn packed_head_size(b: usize, t: usize, c: usize, nh: usize) -> Result<usize> {
    let hs = head_size(b, t, c, nh)?;
    if !hs.is_multiple_of(2) {
        return Err(Error::Config(format!(
            "attention_bf16: head size C/NH = {c}/{nh} = {hs} must be even \
             (a bf16 word holds two channels)"
        )));
    }
    if !t.is_multiple_of(2) {
        return Err(Error::Config(format!(
            "attention_bf16: sequence length T = {t} must be even (an att row of T bf16 must \
             fill whole words)"
        )));
    }
    Ok(hs)
}

/// `n` threads in workgroups of 64, folded into y past 65535 (the shaders' `gid.x + gid.y *
/// nwg.x * 64`).
fn groups_64(n: usize) -> [u32; 3] {
    let g = (n as u32).div_ceil(64).max(1);
    if g <= 65535 {
        [g, 1, 1]
    } else {
        [65535, g.div_ceil(65535), 1]
    }
}

/// The entry point and workgroups for `rows` rows per head: the register-tiled `_vec4` kernel
/// (4 rows a thread, 4-channel loads, 64 threads a group) when hs % 4 == 0, else the scalar one
/// (a row a thread, `groups_1d`).
fn pick(
    vec4: &'static str,
    scalar: &'static str,
    bnh: usize,
    rows: usize,
    hs: usize,
) -> (&'static str, [u32; 3]) {
    if hs.is_multiple_of(4) {
        (vec4, groups_64(bnh * rows.div_ceil(4)))
    } else {
        (scalar, groups_1d(bnh * rows))
    }
}

/// Checks that packed view `v` holds the `elems` (even) bf16 of operand `name`; returns its words.
fn need_words(name: &str, v: &View, elems: usize) -> Result<usize> {
    let words = elems / 2;
    if v.len < words {
        return Err(Error::Config(format!(
            "{name}: view has {} u32 words, kernel needs {words} ({elems} bf16)",
            v.len
        )));
    }
    Ok(words)
}

/// qkv `[B,T,3C]` bf16 = q | k | v, head h uses channels h*hs..(h+1)*hs of each (hs = C/NH, even;
/// T even). att `[B,NH,T,T]` bf16 receives the softmax probabilities (zero above the diagonal),
/// out `[B,T,C]` bf16 = att·v summed from the f32 probabilities. Views in u32 words.
/// Twin: cpu::packed::attention::attention_forward_bf16. Scale 1/sqrt(hs). One dispatch.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward_bf16(
    g: &Gpu,
    out: &View,
    att: &View,
    qkv: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Op>> {
    let hs = packed_head_size(b, t, c, nh)?;
    let w_out = need_words("attention_bf16 out", out, b * t * c)?;
    let w_att = need_words("attention_bf16 att", att, b * nh * t * t)?;
    let w_qkv = need_words("attention_bf16 qkv", qkv, b * t * 3 * c)?;
    if b * t == 0 {
        return Ok(Vec::new());
    }
    let (out, att, qkv) = (
        out.slice(0, w_out),
        att.slice(0, w_att),
        qkv.slice(0, w_qkv),
    );
    // a thread per row pair (scalar) or per 4 row pairs (vec4)
    let (entry, groups) = pick(
        "attention_forward_vec4",
        "attention_forward",
        b * nh,
        t / 2,
        hs,
    );
    Ok(vec![op(
        g,
        S,
        entry,
        &dims(b, t, c, nh, hs),
        &[Arg::W(&out), Arg::W(&att), Arg::R(&qkv)],
        groups,
    )?])
}

/// dqkv `[B,T,3C]` bf16 ASSIGNED (every element written, zeros where no gradient), from dout
/// `[B,T,C]`, qkv and att (the forward's bf16 probabilities), all bf16, views in u32 words.
/// scratch: a `[B,NH,T,T]` bf16 buffer (B·NH·T·T/2 words) the kernel uses for dpreatt, as f32
/// bits in the first T(T−1)/2 words of each head's T·T/2 (the rest left untouched).
/// Twin: cpu::packed::attention::attention_backward_bf16. Two dispatches (rows, then columns).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_bf16(
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
    let hs = packed_head_size(b, t, c, nh)?;
    let (n_out, n_att, n_qkv) = (b * t * c, b * nh * t * t, b * t * 3 * c);
    let w_dqkv = need_words("attention_bf16 dqkv", dqkv, n_qkv)?;
    let w_scratch = need_words("attention_bf16 scratch", scratch, n_att)?;
    let w_dout = need_words("attention_bf16 dout", dout, n_out)?;
    let w_qkv = need_words("attention_bf16 qkv", qkv, n_qkv)?;
    let w_att = need_words("attention_bf16 att", att, n_att)?;
    if b * t == 0 {
        return Ok(Vec::new());
    }
    let dqkv = dqkv.slice(0, w_dqkv);
    let scratch = scratch.slice(0, w_scratch);
    let dout = dout.slice(0, w_dout);
    let qkv = qkv.slice(0, w_qkv);
    let att = att.slice(0, w_att);
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
        b * nh,
        t,
        hs,
    );
    let (cols, _) = pick(
        "attention_backward_cols_vec4",
        "attention_backward_cols",
        b * nh,
        t,
        hs,
    );
    Ok(vec![
        op(g, S, rows, &d, &args, groups)?,
        op(g, S, cols, &d, &args, groups)?,
    ])
}
