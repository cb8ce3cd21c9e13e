//! bf16 packing (shaders/bf16.wgsl): `n` f32 values ⇄ `⌈n/2⌉` u32 words holding two bf16 each,
//! element `2i` in the low 16 bits of word `i` and element `2i+1` in the high 16 bits (an odd
//! `n` leaves the high half of the last word 0). Narrowing rounds to nearest even; NaN stays a
//! (quiet) NaN, ±inf stay ±inf. Widening is exact. Twins: `cpu::{pack_bf16, unpack_bf16}`, which
//! follow the `half` crate bit for bit.
//!
//! One invocation per word. The kernels only move bits (no float arithmetic), so the result is
//! the same on every backend.

use super::{groups_1d, op, Arg, Dispatch};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "bf16";

/// Checks that a packed view of `words` elements fits `n` unpacked ones exactly.
fn check_words(entry: &str, packed: &str, words: usize, n: usize) -> Result<()> {
    if words != n.div_ceil(2) {
        return Err(Error::Config(format!(
            "bf16 {entry}: {packed} view has {words} u32 words, {n} f32 elements need {}",
            n.div_ceil(2)
        )));
    }
    Ok(())
}

fn dims(n: usize) -> Result<[u32; 4]> {
    let n32 = u32::try_from(n)
        .map_err(|_| Error::Config(format!("bf16: {n} elements exceed the u32 index range")))?;
    Ok([n32, n.div_ceil(2) as u32, 0, 0])
}

/// `dst_u32[⌈n/2⌉]` = bf16 pairs of `src_f32[n]`, with `n = src_f32.len`.
/// `dst_u32` must hold exactly `⌈n/2⌉` words.
pub fn pack(g: &Gpu, dst_u32: &View, src_f32: &View) -> Result<Dispatch> {
    let n = src_f32.len;
    check_words("pack", "dst", dst_u32.len, n)?;
    op(
        g,
        S,
        "pack",
        &dims(n)?,
        &[Arg::W(dst_u32), Arg::R(src_f32)],
        groups_1d(dst_u32.len),
    )
}

/// `dst_f32[n]` = f32 widening of the bf16 pairs in `src_u32[⌈n/2⌉]`, with `n = dst_f32.len`.
/// `src_u32` must hold exactly `⌈n/2⌉` words; for an odd `n` the high half of its last word is
/// ignored.
pub fn unpack(g: &Gpu, dst_f32: &View, src_u32: &View) -> Result<Dispatch> {
    let n = dst_f32.len;
    check_words("unpack", "src", src_u32.len, n)?;
    op(
        g,
        S,
        "unpack",
        &dims(n)?,
        &[Arg::W(dst_f32), Arg::R(src_u32)],
        groups_1d(src_u32.len),
    )
}
