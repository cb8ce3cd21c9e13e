//! Matmul family (shaders/matmul.wgsl): the linear layer's forward product and both backward
//! products, plus the bias gradient. Twins: `cpu::{matmul_forward, matmul_backward}`.
//!
//! Every product is `C[M,N] (= or +=) A·B` with A, B row-major or transposed:
//!
//! ```text
//!   forward   out[n,oc]     = inp[n,c]    · weight[oc,c]ᵀ + bias   buffer kernel matmul_nt
//!   backward  dinp[n,c]     = dout[n,oc]  · weight[oc,c]           buffer kernel matmul_nn
//!             dweight[oc,c] += dout[n,oc]ᵀ · inp[n,c]              buffer kernel matmul_tn
//!             dbias[oc]     += Σ_rows dout                         matmul_bias_backward
//! ```
//!
//! Two kernels compute a product (see the shader for the tiles):
//! - **buffer**: register-tiled (8×16 outputs per invocation) straight from the storage buffers,
//!   one entry point per layout. Operands are read as vec4 along their contiguous axis, so one
//!   whose row length is not a multiple of 4 is first copied into a zero-padded scratch matrix
//!   by a `matmul_pad` op.
//! - **texture**: both operands are packed (`matmul_pack`/`matmul_pack4`, transposing as needed)
//!   into rgba32float textures, then one 16×16-tiled kernel (`matmul_tex`) runs. On lavapipe,
//!   where a texel fetch is a vector gather, the kernel alone runs about twice as fast as the
//!   buffer kernel, and the whole product (packs included, two more dispatches) 1.1–1.5× as
//!   fast from 256³ to 768³; on GL llvmpipe it gains less.
//!
//! [`Kernel::Auto`] takes the texture kernel on CPU adapters for products of at least
//! [`texture_min_flops`] that fit the texture size limit, and the buffer kernel everywhere else.
//! Scratch buffers and textures are allocated when the ops are built and refilled every time
//! they run.
//!
//! Any shape works: edge tiles clamp or pad their loads and skip the store outside C. Each
//! output sums its products in k order starting from the bias (as the CPU twin does), and the
//! bias gradient sums rows in order: results are bit-identical run to run.

use super::{groups_1d, need, op, Arg, Op};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

mod texture;

const S: &str = "matmul";
/// Outputs per invocation (rows × columns of C) of the buffer kernel; must match the shader.
const BUF_TILE: (usize, usize) = (8, 16);
/// Invocations per workgroup along each axis (`@workgroup_size(8, 8)`).
const WG_SIDE: usize = 8;

const ACCUMULATE: u32 = 1;
const BIAS: u32 = 2;

/// Smallest product (2·M·N·K) for which [`Kernel::Auto`] packs into textures on `g`, or `None`
/// where it never does (not a CPU adapter). Measured on Mesa, with the packs included: the
/// texture path wins from about 160³ on lavapipe, and only from about 400³ on GL llvmpipe,
/// where wgpu bounds-checks every texel fetch.
pub fn texture_min_flops(g: &Gpu) -> Option<usize> {
    if g.info.device_type != wgpu::DeviceType::Cpu {
        return None;
    }
    Some(if g.info.backend == wgpu::Backend::Gl {
        1 << 27
    } else {
        1 << 23
    })
}

/// Which kernel computes the products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Texture kernel for large products on CPU adapters, buffer kernel otherwise.
    Auto,
    Buffer,
    /// Fails with `Error::Config` if an operand exceeds the adapter's texture size limit.
    Texture,
}

/// An operand as stored: `sr × sc` row-major with row stride `ld` elements, used as is or
/// transposed (`t`). Logical element (r, c) lives at `r·ld + c`, or `c·ld + r` when transposed.
#[derive(Clone)]
struct Mat {
    v: View,
    sr: usize,
    sc: usize,
    ld: usize,
    t: bool,
}

impl Mat {
    fn new(v: &View, rows: usize, cols: usize) -> Mat {
        let v = v.slice(0, rows * cols);
        Mat {
            v,
            sr: rows,
            sc: cols,
            ld: cols,
            t: false,
        }
    }
    fn t(self) -> Mat {
        Mat { t: !self.t, ..self }
    }
    fn rows(&self) -> usize {
        if self.t {
            self.sc
        } else {
            self.sr
        }
    }
    fn cols(&self) -> usize {
        if self.t {
            self.sr
        } else {
            self.sc
        }
    }
}

/// `m` with a row stride that is a multiple of 4: `m` itself, or a zero-padded copy made by an
/// op pushed onto `ops`.
fn aligned(g: &Gpu, ops: &mut Vec<Op>, m: Mat) -> Result<Mat> {
    if m.ld.is_multiple_of(4) {
        return Ok(m);
    }
    let ld = m.sc.next_multiple_of(4);
    let padded = g.scratch("matmul padded operand", m.sr * ld);
    ops.push(op(
        g,
        S,
        "matmul_pad",
        &[m.sr as u32, m.sc as u32, ld as u32, m.ld as u32],
        &[Arg::W(&padded), Arg::R(&m.v)],
        groups_1d(m.sr * ld),
    )?);
    Ok(Mat { v: padded, ld, ..m })
}

/// C (= or +=) A·B (+ bias) with the buffer kernel of A's and B's layout.
fn buffer_product(
    g: &Gpu,
    ops: &mut Vec<Op>,
    c: &View,
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
    let (a, b) = (aligned(g, ops, a)?, aligned(g, ops, b)?);
    let groups = |len: usize, tile: usize| len.div_ceil(tile).div_ceil(WG_SIDE) as u32;
    let dims = [m, n, k, a.ld / 4, b.ld / 4, flags as usize].map(|x| x as u32);
    // Without a bias an input stands in for the unread binding.
    let args = [
        Arg::W(c),
        Arg::R(&a.v),
        Arg::R(&b.v),
        Arg::R(bias.unwrap_or(&b.v)),
    ];
    let groups = [groups(n, BUF_TILE.1), groups(m, BUF_TILE.0), 1];
    ops.push(op(g, S, entry, &dims, &args, groups)?);
    Ok(())
}

/// C[M,N] (= or +=) A·B (+ bias[N]) with the kernel `kernel` selects.
#[allow(clippy::too_many_arguments)]
fn product(
    g: &Gpu,
    kernel: Kernel,
    ops: &mut Vec<Op>,
    c: &View,
    a: Mat,
    b: Mat,
    bias: Option<&View>,
    accumulate: bool,
) -> Result<()> {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let flags = if accumulate { ACCUMULATE } else { 0 } | if bias.is_some() { BIAS } else { 0 };
    let c = c.slice(0, m * n);
    let texture = match kernel {
        Kernel::Buffer => false,
        Kernel::Texture => true,
        Kernel::Auto => {
            texture_min_flops(g).is_some_and(|min| 2 * m * n * k >= min)
                && texture::fits(g, m, n, k)
        }
    };
    if texture {
        texture::product(g, ops, &c, a, b, bias, flags)
    } else {
        buffer_product(g, ops, &c, a, b, bias, flags)
    }
}

/// Rejects empty or oversized dimensions (every padded index must fit a u32 in the shader).
/// Also used by the packed-bf16 variants ([`super::packed::matmul`]).
pub(crate) fn check_dims(n: usize, c: usize, oc: usize) -> Result<()> {
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

/// `out[n,oc] = inp[n,c] · weight[oc,c]ᵀ + bias[oc]`   (twin: `cpu::matmul_forward`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward(
    g: &Gpu,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    matmul_forward_with(g, Kernel::Auto, out, inp, weight, bias, n, c, oc)
}

/// [`matmul_forward`] with a chosen kernel.
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_with(
    g: &Gpu,
    kernel: Kernel,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    check_dims(n, c, oc)?;
    need("matmul_forward out", out, n * oc)?;
    need("matmul_forward inp", inp, n * c)?;
    need("matmul_forward weight", weight, oc * c)?;
    if let Some(b) = bias {
        need("matmul_forward bias", b, oc)?;
    }
    let bias = bias.map(|b| b.slice(0, oc));
    let mut ops = Vec::new();
    let (x, w) = (Mat::new(inp, n, c), Mat::new(weight, oc, c).t());
    product(g, kernel, &mut ops, out, x, w, bias.as_ref(), false)?;
    Ok(ops)
}

/// `dinp[n,c] = dout·weight` (assigned);  `dweight[oc,c] += doutᵀ·inp` (accumulated);
/// `dbias[oc] += Σ_rows dout` (accumulated, rows in order).   (twin: `cpu::matmul_backward`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    g: &Gpu,
    dinp: &View,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    matmul_backward_with(
        g,
        Kernel::Auto,
        dinp,
        dweight,
        dbias,
        dout,
        inp,
        weight,
        n,
        c,
        oc,
    )
}

/// [`matmul_backward`] with a chosen kernel.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_with(
    g: &Gpu,
    kernel: Kernel,
    dinp: &View,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    let mut ops = matmul_backward_input_with(g, kernel, dinp, dout, weight, n, c, oc)?;
    ops.extend(matmul_backward_weight_with(
        g, kernel, dweight, dbias, dout, inp, n, c, oc,
    )?);
    Ok(ops)
}

/// The input-gradient half of [`matmul_backward`]: `dinp[n,c] = dout·weight` (assigned).
/// Zero-bubble schedules run it in B and the weight half later, in W.
pub fn matmul_backward_input(
    g: &Gpu,
    dinp: &View,
    dout: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    matmul_backward_input_with(g, Kernel::Auto, dinp, dout, weight, n, c, oc)
}

/// The weight-gradient half of [`matmul_backward`]: `dweight += doutᵀ·inp`, `dbias += Σ_rows dout`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_weight(
    g: &Gpu,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    matmul_backward_weight_with(g, Kernel::Auto, dweight, dbias, dout, inp, n, c, oc)
}

#[allow(clippy::too_many_arguments)]
fn matmul_backward_input_with(
    g: &Gpu,
    kernel: Kernel,
    dinp: &View,
    dout: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    check_dims(n, c, oc)?;
    need("matmul_backward dinp", dinp, n * c)?;
    need("matmul_backward dout", dout, n * oc)?;
    need("matmul_backward weight", weight, oc * c)?;
    let mut ops = Vec::new();
    let (dy, w) = (Mat::new(dout, n, oc), Mat::new(weight, oc, c));
    product(g, kernel, &mut ops, dinp, dy, w, None, false)?;
    Ok(ops)
}

#[allow(clippy::too_many_arguments)]
fn matmul_backward_weight_with(
    g: &Gpu,
    kernel: Kernel,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    check_dims(n, c, oc)?;
    need("matmul_backward dweight", dweight, oc * c)?;
    need("matmul_backward dout", dout, n * oc)?;
    need("matmul_backward inp", inp, n * c)?;
    if let Some(b) = dbias {
        need("matmul_backward dbias", b, oc)?;
    }
    let mut ops = Vec::new();
    let (dy, x) = (Mat::new(dout, n, oc), Mat::new(inp, n, c));
    product(g, kernel, &mut ops, dweight, dy.t(), x, None, true)?;
    if let Some(db) = dbias {
        ops.push(op(
            g,
            S,
            "matmul_bias_backward",
            &[n as u32, oc as u32, 0, 0],
            &[Arg::W(&db.slice(0, oc)), Arg::R(&dout.slice(0, n * oc))],
            groups_1d(oc),
        )?);
    }
    Ok(ops)
}
