//! Elementwise ops (shaders/elementwise.wgsl): GELU forward/backward, residual add and the small
//! helpers fill / scale / add. Twins: `cpu::{gelu_forward, gelu_backward, residual_forward, fill,
//! scale, add}`.

use super::{groups_1d, need, op, Arg, Op};
use crate::error::Result;
use crate::gpu::{Gpu, View};

const S: &str = "elementwise";

fn dims(n: usize, value: f32) -> [u32; 4] {
    [n as u32, value.to_bits(), 0, 0]
}

/// `out[n]` = `gelu(inp[n]`)
pub fn gelu_forward(g: &Gpu, out: &View, inp: &View, n: usize) -> Result<Op> {
    need("gelu out", out, n)?;
    need("gelu inp", inp, n)?;
    op(
        g,
        S,
        "gelu_forward",
        &dims(n, 0.0),
        &[Arg::W(out), Arg::R(inp)],
        groups_1d(n),
    )
}

/// `dinp[n]` = gelu'(inp) · dout (assigned)
pub fn gelu_backward(g: &Gpu, dinp: &View, inp: &View, dout: &View, n: usize) -> Result<Op> {
    need("gelu dinp", dinp, n)?;
    need("gelu dout", dout, n)?;
    op(
        g,
        S,
        "gelu_backward",
        &dims(n, 0.0),
        &[Arg::W(dinp), Arg::R(inp), Arg::R(dout)],
        groups_1d(n),
    )
}

/// `out[n]` = a + b
pub fn residual_forward(g: &Gpu, out: &View, a: &View, b: &View, n: usize) -> Result<Op> {
    need("residual out", out, n)?;
    need("residual a", a, n)?;
    need("residual b", b, n)?;
    op(
        g,
        S,
        "residual_forward",
        &dims(n, 0.0),
        &[Arg::W(out), Arg::R(a), Arg::R(b)],
        groups_1d(n),
    )
}

/// out[..] = value
pub fn fill(g: &Gpu, out: &View, value: f32) -> Result<Op> {
    op(
        g,
        S,
        "fill",
        &dims(out.len, value),
        &[Arg::W(out)],
        groups_1d(out.len),
    )
}

/// out[..] *= s
pub fn scale(g: &Gpu, out: &View, s: f32) -> Result<Op> {
    op(
        g,
        S,
        "scale",
        &dims(out.len, s),
        &[Arg::W(out)],
        groups_1d(out.len),
    )
}

/// out[..] += a
pub fn add(g: &Gpu, out: &View, a: &View) -> Result<Op> {
    need("add a", a, out.len)?;
    op(
        g,
        S,
        "add",
        &dims(out.len, 0.0),
        &[Arg::W(out), Arg::R(a)],
        groups_1d(out.len),
    )
}

/// out[..] = a (bit-exact copy inside a compute pass)
pub fn copy(g: &Gpu, out: &View, a: &View) -> Result<Op> {
    need("copy a", a, out.len)?;
    op(
        g,
        S,
        "copy",
        &dims(out.len, 0.0),
        &[Arg::W(out), Arg::R(a)],
        groups_1d(out.len),
    )
}
