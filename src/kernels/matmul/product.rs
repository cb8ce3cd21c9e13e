//! One product C (+)= A·B of two stored operands: the operands aligned for a kernel, the kernel
//! chosen by size and adapter, and the checks of the operands.

use super::operand::Mat;
use super::pack::Reuse;
use super::shaders;
use super::texture::{self, Tex};
use super::{quad_stores, Kernel, Linear, ACCUMULATE, A_F32, BIAS, BUF_TILE, C_F32, WG_SIDE};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

use crate::kernels::{groups_1d, need_in, op, shader, Arg, Dispatch};

/// `m` with a row stride that is a multiple of 4: `m` itself, or a zero-padded copy (same
/// storage) made by an op pushed onto `ops`.
fn aligned(g: &Gpu, p: Precision, ops: &mut Vec<Dispatch>, m: Mat) -> Result<Mat> {
    if m.ld.is_multiple_of(4) {
        return Ok(m);
    }
    let ld = m.sc.next_multiple_of(4);
    let words = m.ty.words(m.sr * ld);
    let padded = g.scratch("matmul padded operand", words);
    let entry = if m.ty == p {
        "matmul_pad"
    } else {
        "matmul_pad_f32"
    };
    ops.push(op(
        g,
        shader("matmul", p),
        entry,
        &[m.sr as u32, m.sc as u32, ld as u32, m.ld as u32],
        &[Arg::W(&padded), Arg::R(&m.v)],
        groups_1d(words),
    )?);
    Ok(Mat { v: padded, ld, ..m })
}

/// C (= or +=) A·B (+ bias) with the buffer kernel of A's and B's layout; B and the bias are
/// in `p`, A and C in `p` or f32.
#[allow(clippy::too_many_arguments)]
fn buffer_product(
    g: &Gpu,
    p: Precision,
    ops: &mut Vec<Dispatch>,
    c: (&View, Precision),
    a: Mat,
    b: Mat,
    bias: Option<&View>,
    flags: u32,
) -> Result<()> {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let entry = match (a.t, b.t) {
        (false, true) => "matmul_nt",
        (false, false) => "matmul_nn",
        (true, false) => "matmul_tn",
        (true, true) => return Err(Error::Config("matmul: Aᵀ·Bᵀ is not a kernel layout".into())),
    };
    let mixed = |ty: Precision, bit: u32| if ty != p { bit } else { 0 };
    let flags = flags | mixed(a.ty, A_F32) | mixed(c.1, C_F32);
    let (a, b) = (aligned(g, p, ops, a)?, aligned(g, p, ops, b)?);
    let groups = |len: usize, tile: usize| len.div_ceil(tile).div_ceil(WG_SIDE) as u32;
    let dims = [m, n, k, a.ld / 4, b.ld / 4, flags as usize].map(|x| x as u32);
    // Without a bias an input stands in for the unread binding.
    let args = [
        Arg::W(c.0),
        Arg::R(&a.v),
        Arg::R(&b.v),
        Arg::R(bias.unwrap_or(&b.v)),
    ];
    let groups = [groups(n, BUF_TILE.1), groups(m, BUF_TILE.0), 1];
    let module = shaders::shader(p, false, quad_stores(n, flags));
    ops.push(op(g, module, entry, &dims, &args, groups)?);
    Ok(())
}

/// C[M,N] (= or +=) A·B (+ bias[N]) with the kernel `l` selects; C is stored as `c_ty`.
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    g: &Gpu,
    l: Linear,
    ops: &mut Vec<Dispatch>,
    c: &View,
    c_ty: Precision,
    a: Mat,
    b: Mat,
    bias: Option<&View>,
    accumulate: bool,
    reuse: Reuse,
) -> Result<()> {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let flags = if accumulate { ACCUMULATE } else { 0 } | if bias.is_some() { BIAS } else { 0 };
    let c = c.slice(0, c_ty.words(m * n));
    let texture = match l.kernel {
        Kernel::Buffer => None,
        Kernel::Texture => Some(Tex::Portable),
        Kernel::Subgroup => Some(Tex::Subgroup8),
        Kernel::Auto => {
            let best = Tex::best(g);
            (texture_min_flops(g).is_some_and(|min| 2 * m * n * k >= min)
                && texture::fits(g, best, m, n, k))
            .then_some(best)
        }
    };
    match texture {
        Some(kernel) => {
            let flags = flags | if c_ty != l.p { C_F32 } else { 0 };
            texture::product(g, kernel, l.p, ops, &c, a, b, bias, flags, reuse)
        }
        None => buffer_product(g, l.p, ops, (&c, c_ty), a, b, bias, flags),
    }
}

/// Smallest product (2·M·N·K) for which [`Kernel::Auto`] takes a texture path on `g`, or
/// `None` where it never does (not a CPU adapter). Measured on Mesa: on lavapipe, whose operands
/// are mostly copies (bf16 ones widened first), the texture path wins from 2²⁰ in either
/// precision (the default run's 512 × 64 × 64 attention projections: its f32 step 52–53 → 48 ms;
/// bf16 at C64 T64 B16 157–172 → 117–118 ms with the copies). On GL llvmpipe it wins at every
/// size measured (64³ to 512³; at 256³ 11.4 against the buffer kernel's 2.5 GFLOP/s on a Zen 3
/// host, 23.2 against 19.7 on a Zen 5 one), so both backends take the same threshold.
pub fn texture_min_flops(g: &Gpu) -> Option<usize> {
    (g.info.device_type == wgpu::DeviceType::Cpu).then_some(1 << 20)
}

/// Rejects a `Linear` no shader runs (an f32 layer's output in bf16), and empty or oversized
/// dimensions (every padded index must fit a u32 in the shader).
pub(super) fn check_dims(l: Linear, n: usize, c: usize, oc: usize) -> Result<()> {
    if l.p == Precision::F32 && l.io == Precision::Bf16 {
        return Err(Error::Config(
            "matmul: an f32 layer's output and dout are f32 (bf16 io needs bf16 weights)".into(),
        ));
    }
    if n == 0 || c == 0 || oc == 0 {
        return Err(Error::Config(format!(
            "matmul: dimensions must be ≥ 1 (n={n}, c={c}, oc={oc})"
        )));
    }
    let fits = |rows: usize, cols: usize| {
        (rows.next_multiple_of(16) as u128) * (cols.next_multiple_of(16) as u128)
            <= u32::MAX as u128
    };
    if !(fits(n, c) && fits(n, oc) && fits(oc, c)) {
        return Err(Error::Config(format!(
            "matmul: n={n}, c={c}, oc={oc} exceeds 32-bit indexing"
        )));
    }
    Ok(())
}

/// Checks that `v` holds `elems` elements stored as `ty`, naming the operand.
pub(super) fn need(entry: &str, name: &str, v: &View, ty: Precision, elems: usize) -> Result<()> {
    need_in(ty, &format!("{entry} {name}"), v, ty.words(elems))
}

/// A bf16 output of `rows` rows of `len` elements: rows of odd length would share words.
pub(super) fn even_rows(
    entry: &str,
    name: &str,
    dim: &str,
    ty: Precision,
    rows: usize,
    len: usize,
) -> Result<()> {
    if ty == Precision::Bf16 && rows > 1 && len % 2 == 1 {
        return Err(Error::Config(format!(
            "{entry} {name}: bf16 matmul needs an even {dim} ({dim} = {len}) to write {rows} \
             packed rows (rows of odd length would share u32 words between invocations)"
        )));
    }
    Ok(())
}
