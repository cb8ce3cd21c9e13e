//! Elementwise ops (shaders/elementwise.wgsl, one source for both precisions behind a storage
//! prelude): GELU forward/backward, residual add and the helpers fill / scale / add / copy.
//! Twins: `twins::{gelu_forward, gelu_backward, residual_forward, fill, scale, add}` in f32,
//! `twins::packed::elementwise` in bf16.
//!
//! Views are in u32 words: f32 elements, or packed bf16 pairs (element `2i` in the low half of
//! word `i`). The `n`-element ops take views of at least `⌈n/2⌉` words under bf16 and write the
//! high half of an odd `n`'s last word 0 (as `bf16::pack` does); fill / scale / add / copy work
//! on whole views (all `2·len` halves under bf16). Arithmetic is f32 with one rounding per
//! stored bf16 element.

use super::texels::{self, Bind};
use super::{groups_1d, op, shader, Arg, Dispatch};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

/// Uniform: element count, word count, an f32 operand's bits.
fn dims(p: Precision, n: usize, value: f32) -> Result<[u32; 4]> {
    let n32 = u32::try_from(n).map_err(|_| {
        Error::Config(format!(
            "elementwise {p}: {n} elements exceed the u32 index range"
        ))
    })?;
    Ok([n32, p.words(n) as u32, value.to_bits(), 0])
}

/// Elements a whole view of `v.len` words holds.
fn whole(p: Precision, v: &View) -> usize {
    match p {
        Precision::F32 => v.len,
        Precision::Bf16 => 2 * v.len,
    }
}

/// Checks that `v` holds `n` elements of precision `p`, naming the operand
/// (`"<op> <arg>"`, `"<op> bf16 <arg>"` under bf16).
fn need(p: Precision, op: &str, arg: &str, v: &View, n: usize) -> Result<()> {
    let name = match p {
        Precision::F32 => format!("{op} {arg}"),
        Precision::Bf16 => format!("{op} bf16 {arg}"),
    };
    super::need_in(p, &name, v, p.words(n))
}

/// One op of `n` elements over `args` (outputs first): the `4` entry (`entry4`, one invocation
/// per four elements) when `n % 4 == 0`, else `entry` (one invocation per word). Both do the
/// same arithmetic per element.
fn run(
    g: &Gpu,
    p: Precision,
    (entry, entry4): (&'static str, &'static str),
    n: usize,
    v: f32,
    args: &[Arg],
) -> Result<Dispatch> {
    let (entry, groups) = if n.is_multiple_of(4) {
        (entry4, groups_1d(n / 4))
    } else {
        (entry, groups_1d(p.words(n)))
    };
    op(
        g,
        shader("elementwise", p),
        entry,
        &dims(p, n, v)?,
        args,
        groups,
    )
}

/// `out[n]` = `gelu(inp[n])`
pub fn gelu_forward(
    g: &Gpu,
    p: Precision,
    out: &View,
    inp: &View,
    n: usize,
) -> Result<Vec<Dispatch>> {
    need(p, "gelu", "out", out, n)?;
    need(p, "gelu", "inp", inp, n)?;
    let entries = ("gelu_forward", "gelu_forward4", "gelu_forward_t");
    run_reading(g, p, entries, n, out, &[inp])
}

/// `dinp[n]` = gelu'(inp) · dout (assigned)
pub fn gelu_backward(
    g: &Gpu,
    p: Precision,
    dinp: &View,
    inp: &View,
    dout: &View,
    n: usize,
) -> Result<Vec<Dispatch>> {
    need(p, "gelu", "dinp", dinp, n)?;
    need(p, "gelu", "inp", inp, n)?;
    need(p, "gelu", "dout", dout, n)?;
    let entries = ("gelu_backward", "gelu_backward4", "gelu_backward_t");
    run_reading(g, p, entries, n, dinp, &[inp, dout])
}

/// `out[n]` = a + b
pub fn residual_forward(
    g: &Gpu,
    p: Precision,
    out: &View,
    a: &View,
    b: &View,
    n: usize,
) -> Result<Vec<Dispatch>> {
    need(p, "residual", "out", out, n)?;
    need(p, "residual", "a", a, n)?;
    need(p, "residual", "b", b, n)?;
    let entries = (
        "residual_forward",
        "residual_forward4",
        "residual_forward_t",
    );
    run_reading(g, p, entries, n, out, &[a, b])
}

/// An op of `n` elements writing `out` from `reads`: the `_t` entry (`entries.2`) reading flat
/// copies of them ([`texels`]) where they can be made and `n % 4 == 0`, else [`run`]'s entries.
fn run_reading(
    g: &Gpu,
    p: Precision,
    (entry, entry4, entry_t): (&'static str, &'static str, &'static str),
    n: usize,
    out: &View,
    reads: &[&View],
) -> Result<Vec<Dispatch>> {
    let mut ops = Vec::new();
    let list: Vec<_> = reads.iter().map(|&v| (p, v, n)).collect();
    if let Some(t) = texels::flats(g, &mut ops, &list).filter(|_| n.is_multiple_of(4)) {
        let mut binds = vec![Bind::Buffer(out)];
        binds.extend(t.iter().map(Bind::Texture));
        let dims = dims(p, n, 0.0)?;
        let shader = (shader("elementwise", p), entry_t);
        ops.push(texels::op(g, shader, &dims, &binds, groups_1d(n / 4))?);
        return Ok(ops);
    }
    let mut args = vec![Arg::W(out)];
    args.extend(reads.iter().map(|&v| Arg::R(v)));
    Ok(vec![run(g, p, (entry, entry4), n, 0.0, &args)?])
}

/// out[..] = value (bf16: rounded once, both halves of every word)
pub fn fill(g: &Gpu, p: Precision, out: &View, value: f32) -> Result<Dispatch> {
    run(
        g,
        p,
        ("fill", "fill4"),
        whole(p, out),
        value,
        &[Arg::W(out)],
    )
}

/// out[..] *= s
pub fn scale(g: &Gpu, p: Precision, out: &View, s: f32) -> Result<Dispatch> {
    run(g, p, ("scale", "scale4"), whole(p, out), s, &[Arg::W(out)])
}

/// out[..] += a
pub fn add(g: &Gpu, p: Precision, out: &View, a: &View) -> Result<Dispatch> {
    let n = whole(p, out);
    need(p, "add", "a", a, n)?;
    run(g, p, ("add", "add4"), n, 0.0, &[Arg::W(out), Arg::R(a)])
}

/// out[..] = a, word for word (bit-exact, NaN payloads included)
pub fn copy(g: &Gpu, p: Precision, out: &View, a: &View) -> Result<Dispatch> {
    let n = whole(p, out);
    need(p, "copy", "a", a, n)?;
    run(g, p, ("copy", "copy4"), n, 0.0, &[Arg::W(out), Arg::R(a)])
}
