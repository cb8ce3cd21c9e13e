//! Packed-bf16 elementwise ops (shaders/packed_elementwise.wgsl): GELU forward/backward,
//! residual add, and the helpers fill / copy / add. Twins: `cpu::packed::elementwise`.
//!
//! One invocation per u32 word (two bf16 elements), arithmetic in f32, one rounding per stored
//! element. The `n`-element ops take views of at least `⌈n/2⌉` words; for an odd `n` the high
//! half of the last output word is written 0 (as `bf16::pack` does). fill / copy / add work on
//! whole views: all `2·len` halves of their `len` words.

use super::need_words;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{groups_1d, op, Arg, Op};

const S: &str = "packed_elementwise";

/// Uniform: element count, word count, an f32 operand's bits.
fn dims(n: usize, value: f32) -> Result<[u32; 4]> {
    let n32 = u32::try_from(n).map_err(|_| {
        Error::Config(format!(
            "elementwise bf16: {n} elements exceed the u32 index range"
        ))
    })?;
    Ok([n32, n.div_ceil(2) as u32, value.to_bits(), 0])
}

/// `out[n]` = `gelu(inp[n])`; out, inp bf16 `[⌈n/2⌉]` words.
pub fn gelu_forward_bf16(g: &Gpu, out: &View, inp: &View, n: usize) -> Result<Op> {
    let w = n.div_ceil(2);
    need_words("gelu bf16 out", out, w)?;
    need_words("gelu bf16 inp", inp, w)?;
    op(
        g,
        S,
        "gelu_forward",
        &dims(n, 0.0)?,
        &[Arg::W(out), Arg::R(inp)],
        groups_1d(w),
    )
}

/// `dinp[n]` = gelu'(inp) · dout (assigned, as in the f32 op); all bf16 `[⌈n/2⌉]` words.
pub fn gelu_backward_bf16(g: &Gpu, dinp: &View, inp: &View, dout: &View, n: usize) -> Result<Op> {
    let w = n.div_ceil(2);
    need_words("gelu bf16 dinp", dinp, w)?;
    need_words("gelu bf16 inp", inp, w)?;
    need_words("gelu bf16 dout", dout, w)?;
    op(
        g,
        S,
        "gelu_backward",
        &dims(n, 0.0)?,
        &[Arg::W(dinp), Arg::R(inp), Arg::R(dout)],
        groups_1d(w),
    )
}

/// `out[n]` = a + b (f32 add, one rounding); all bf16 `[⌈n/2⌉]` words.
pub fn residual_forward_bf16(g: &Gpu, out: &View, a: &View, b: &View, n: usize) -> Result<Op> {
    let w = n.div_ceil(2);
    need_words("residual bf16 out", out, w)?;
    need_words("residual bf16 a", a, w)?;
    need_words("residual bf16 b", b, w)?;
    op(
        g,
        S,
        "residual_forward",
        &dims(n, 0.0)?,
        &[Arg::W(out), Arg::R(a), Arg::R(b)],
        groups_1d(w),
    )
}

/// Every half of `out[..]` (`2·out.len` elements) = `value` rounded to bf16 once.
pub fn fill_bf16(g: &Gpu, out: &View, value: f32) -> Result<Op> {
    op(
        g,
        S,
        "fill",
        &dims(2 * out.len, value)?,
        &[Arg::W(out)],
        groups_1d(out.len),
    )
}

/// `out[..]` = `a` word for word (bit-exact, NaN payloads included).
pub fn copy_bf16(g: &Gpu, out: &View, a: &View) -> Result<Op> {
    need_words("copy bf16 a", a, out.len)?;
    op(
        g,
        S,
        "copy",
        &dims(2 * out.len, 0.0)?,
        &[Arg::W(out), Arg::R(a)],
        groups_1d(out.len),
    )
}

/// `out[..]` += a over all `2·out.len` halves (widen both, f32 add, round).
pub fn add_bf16(g: &Gpu, out: &View, a: &View) -> Result<Op> {
    need_words("add bf16 a", a, out.len)?;
    op(
        g,
        S,
        "add",
        &dims(2 * out.len, 0.0)?,
        &[Arg::W(out), Arg::R(a)],
        groups_1d(out.len),
    )
}
