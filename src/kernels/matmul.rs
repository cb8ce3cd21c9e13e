//! Matmul family (shaders/matmul.wgsl, one source for both precisions): the linear layer's
//! forward product and both backward products, plus the bias gradient. Twins:
//! `twins::{matmul_forward, matmul_backward}`, with [`Precision::round`] at every bf16 store.
//!
//! Every product is `C[M,N] (= or +=) A·B` with A, B row-major or transposed:
//!
//! ```text
//!   forward   out[n,oc]     = inp[n,c]    · weight[oc,c]ᵀ + bias   buffer kernel matmul_nt
//!   backward  dinp[n,c]     = dout[n,oc]  · weight[oc,c]           buffer kernel matmul_nn
//!             dweight[oc,c] += dout[n,oc]ᵀ · inp[n,c]              buffer kernel matmul_tn
//!             dbias[oc]     += Σ_rows dout                         matmul_bias_backward(4)
//! ```
//!
//! [`Linear`] says how the operands are stored: every one in the model's precision, except
//! that under bf16 the LM head keeps its logits (`out`) and dlogits (`dout`) in f32
//! ([`Linear::head`]). Sums are f32 in k order from the bias (rows in order for the bias
//! gradient); a bf16 output is rounded to nearest even once, when stored, and a `+=` output
//! widens the old value, adds the finished sum and rounds. A bf16 output of more than one row
//! needs an even row length (each invocation writes whole u32 words); odd ones are refused.
//!
//! Three kernels compute a product, each summing in f32 (see the shaders for the tiles):
//! - **buffer**: register-tiled (8×16 outputs per invocation) straight from the storage buffers,
//!   one entry point per layout. Operands are read as groups of 4 along their contiguous axis,
//!   so one whose row length is not a multiple of 4 is first copied into a zero-padded scratch
//!   matrix by a `matmul_pad` op.
//! - **texture**: both operands are packed (`matmul_pack`/`matmul_pack4`, transposing as needed)
//!   into textures of four elements a texel (rgba32float; for two bf16 operands, where the
//!   device writes them, rg32uint texels of four bf16 that the kernel widens as it fetches),
//!   then one 16×16-tiled kernel (`matmul_tex`) runs. An operand whose rows already are its
//!   texel rows (not transposed, rows of 256 bytes or a multiple) is copied into its texture
//!   instead (`matmul_copy`, a buffer-to-texture copy between compute passes: the same texels
//!   without a shader, ~40× faster on lavapipe; a bf16 operand beside an f32 one is widened
//!   into f32 rows first). The subgroup
//!   kernel also takes a transposed operand (wᵀ in the forward, doutᵀ in the weight
//!   gradient) as a copy of its stored rows, transposing 4×4 blocks as it fetches them. On lavapipe,
//!   where a texel fetch is a vector gather, the kernel alone runs about twice as fast as the
//!   buffer kernel, and the whole product (packs included, two more dispatches) 1.1–1.5× as
//!   fast from 256³ to 768³; on GL llvmpipe it gains less.
//! - **subgroup**: the same packs, then `matmul_tex_sg8` (shaders/matmul_subgroup.wgsl), where
//!   the device's subgroups are exactly 8 lanes ([`Gpu::subgroup_lanes`]; lavapipe on 256-bit
//!   vectors): each lane fetches a quarter of A's texels the portable kernel fetches per
//!   output and the subgroup shares them by broadcast. Same sums in the same order as
//!   `matmul_tex`: the same bits.
//!
//! The texture paths hold f32 texels: a bf16 operand is widened exactly when packed, so a bf16
//! product gets the buffer kernel's (and the twin's) bits from every kernel.
//!
//! [`Kernel::Auto`] takes a texture path on CPU adapters for products of at least
//! [`texture_min_flops`] that fit the texture size limit (the subgroup kernel where the device
//! has 8-lane subgroups, else `matmul_tex`), and the buffer kernel everywhere else: the choice
//! follows the adapter's type, features and subgroup size, never its name. Scratch buffers and
//! textures are allocated when the ops are built and refilled every time they run.
//!
//! The forward packs its input `inp[n,c]` exactly as the weight gradient packs it (operand B of
//! `doutᵀ·inp`, the same texels) whenever the two textures have one size (n a whole number of
//! the kernel's tile rows, c/4 of its tile columns: every layer of the default models). A model
//! keeps the forward's textures ([`matmul_forward_keeping`], [`Packs`]) and its weight
//! gradients bind them ([`matmul_backward_weight_packed`]): one pack fewer per linear layer and
//! step, the same bits. Sound because a model slot's activations are written only by its own
//! forward (and a recomputation re-runs that forward's packs).
//!
//! Any shape works: edge tiles clamp or pad their loads and skip the store outside C. Results
//! are bit-identical run to run, and the split backward (`_input` + `_weight`) gives the same
//! bits as the unsplit one (it is the same ops).

use super::texels::{self, Bind};
use super::{groups_1d, need_in, op, shader, Arg, Dispatch};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

mod texture;
pub use texture::Packs;
use texture::{Reuse, Tex};

/// Outputs per invocation (rows × columns of C) of the buffer kernel; must match the shader.
const BUF_TILE: (usize, usize) = (8, 16);
/// Invocations per workgroup along each axis (`@workgroup_size(8, 8)`).
const WG_SIDE: usize = 8;

const ACCUMULATE: u32 = 1;
const BIAS: u32 = 2;
const A_F32: u32 = 4;
const C_F32: u32 = 8;

/// Whether a product stores C a Quad at a time (shaders/c_quads.wgsl): where every Quad of its
/// N columns is whole, and C is in the layer's precision (a C_F32 C holds f32 words, which the
/// bf16 Quad store does not write).
fn quad_stores(n: usize, flags: u32) -> bool {
    n.is_multiple_of(4) && flags & C_F32 == 0
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

/// Which kernel computes the products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// A texture kernel for large products on CPU adapters, the buffer kernel otherwise.
    Auto,
    Buffer,
    /// The portable texture kernel. Fails with `Error::Config` if an operand exceeds
    /// the adapter's texture size limit.
    Texture,
    /// The texture kernel with 8-lane subgroup broadcasts. Fails with `Error::Config`
    /// where the device's subgroups are not exactly 8 lanes, or as `Texture` does.
    Subgroup,
}

/// How a linear layer's operands are stored, and which kernel computes its products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// Precision of the weights, the bias, the input and their gradients.
    pub p: Precision,
    /// Storage of the forward output and of the backward `dout`: `p`, or f32 for the LM
    /// head's logits and dlogits.
    pub io: Precision,
    pub kernel: Kernel,
}

impl Linear {
    /// Every operand in `p`, the kernel the library picks.
    pub const fn new(p: Precision) -> Linear {
        Linear {
            p,
            io: p,
            kernel: Kernel::Auto,
        }
    }
    /// The LM head's product: the output / dout stays f32.
    pub const fn head(self) -> Linear {
        Linear {
            p: self.p,
            io: Precision::F32,
            kernel: self.kernel,
        }
    }
    pub const fn with(self, kernel: Kernel) -> Linear {
        Linear {
            p: self.p,
            io: self.io,
            kernel,
        }
    }
}

/// An operand as stored: `sr × sc` row-major with row stride `ld` elements, used as is or
/// transposed (`t`), its elements in `ty`. Logical element (r, c) lives at element `r·ld + c`,
/// or `c·ld + r` when transposed.
#[derive(Clone)]
struct Mat {
    v: View,
    ty: Precision,
    sr: usize,
    sc: usize,
    ld: usize,
    t: bool,
}

impl Mat {
    fn new(v: &View, ty: Precision, rows: usize, cols: usize) -> Mat {
        Mat {
            v: v.slice(0, ty.words(rows * cols)),
            ty,
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
    let module = texture::shader(p, false, quad_stores(n, flags));
    ops.push(op(g, module, entry, &dims, &args, groups)?);
    Ok(())
}

/// C[M,N] (= or +=) A·B (+ bias[N]) with the kernel `l` selects; C is stored as `c_ty`.
#[allow(clippy::too_many_arguments)]
fn product(
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

/// Rejects a `Linear` no shader runs (an f32 layer's output in bf16), and empty or oversized
/// dimensions (every padded index must fit a u32 in the shader).
fn check_dims(l: Linear, n: usize, c: usize, oc: usize) -> Result<()> {
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
fn need(entry: &str, name: &str, v: &View, ty: Precision, elems: usize) -> Result<()> {
    need_in(ty, &format!("{entry} {name}"), v, ty.words(elems))
}

/// A bf16 output of `rows` rows of `len` elements: rows of odd length would share words.
fn even_rows(
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

/// `out[n,oc] = inp[n,c] · weight[oc,c]ᵀ + bias[oc]`   (twin: `twins::matmul_forward`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward(
    g: &Gpu,
    l: Linear,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Dispatch>> {
    forward(g, l, out, inp, weight, bias, (n, c, oc), Reuse::None)
}

/// [`matmul_forward`], keeping the texture `inp` is packed into (on a texture path) in `packs`
/// for [`matmul_backward_weight_packed`]: `inp` must then be left unwritten until that
/// product has run, or be packed again by these same ops.
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_keeping(
    g: &Gpu,
    l: Linear,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    (n, c, oc): (usize, usize, usize),
    packs: &mut Packs,
) -> Result<Vec<Dispatch>> {
    forward(
        g,
        l,
        out,
        inp,
        weight,
        bias,
        (n, c, oc),
        Reuse::KeepA(packs),
    )
}

#[allow(clippy::too_many_arguments)]
fn forward(
    g: &Gpu,
    l: Linear,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    (n, c, oc): (usize, usize, usize),
    reuse: Reuse,
) -> Result<Vec<Dispatch>> {
    let (e, p) = ("matmul_forward", l.p);
    check_dims(l, n, c, oc)?;
    even_rows(e, "out", "oc", l.io, n, oc)?;
    need(e, "out", out, l.io, n * oc)?;
    need(e, "inp", inp, p, n * c)?;
    need(e, "weight", weight, p, oc * c)?;
    if let Some(b) = bias {
        need(e, "bias", b, p, oc)?;
    }
    let bias = bias.map(|b| b.slice(0, p.words(oc)));
    let mut ops = Vec::new();
    let (x, w) = (Mat::new(inp, p, n, c), Mat::new(weight, p, oc, c).t());
    product(g, l, &mut ops, out, l.io, x, w, bias.as_ref(), false, reuse)?;
    Ok(ops)
}

/// `dinp[n,c] = dout·weight` (assigned);  `dweight[oc,c] += doutᵀ·inp` (accumulated);
/// `dbias[oc] += Σ_rows dout` (accumulated, rows in order): the ops of
/// [`matmul_backward_input`] then [`matmul_backward_weight`].   (twin: `twins::matmul_backward`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    g: &Gpu,
    l: Linear,
    dinp: &View,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Dispatch>> {
    let mut ops = matmul_backward_input(g, l, dinp, dout, weight, n, c, oc)?;
    ops.extend(matmul_backward_weight(
        g, l, dweight, dbias, dout, inp, n, c, oc,
    )?);
    Ok(ops)
}

/// The input-gradient half of [`matmul_backward`]: `dinp[n,c] = dout·weight` (assigned).
/// Zero-bubble schedules run it in B and the weight half later, in W.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_input(
    g: &Gpu,
    l: Linear,
    dinp: &View,
    dout: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Dispatch>> {
    let (e, p) = ("matmul_backward_input", l.p);
    check_dims(l, n, c, oc)?;
    even_rows(e, "dinp", "c", p, n, c)?;
    need(e, "dinp", dinp, p, n * c)?;
    need(e, "dout", dout, l.io, n * oc)?;
    need(e, "weight", weight, p, oc * c)?;
    let mut ops = Vec::new();
    let (dy, w) = (Mat::new(dout, l.io, n, oc), Mat::new(weight, p, oc, c));
    product(g, l, &mut ops, dinp, p, dy, w, None, false, Reuse::None)?;
    Ok(ops)
}

/// The weight-gradient half of [`matmul_backward`]: `dweight += doutᵀ·inp`, `dbias += Σ_rows dout`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_weight(
    g: &Gpu,
    l: Linear,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Dispatch>> {
    backward_weight(g, l, dweight, dbias, dout, inp, (n, c, oc), Reuse::None)
}

/// [`matmul_backward_weight`] binding the texture [`matmul_forward_keeping`] packed `inp`
/// into, where `packs` holds one of the size this product packs (else it packs `inp` itself):
/// one pack fewer, the same bits.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_weight_packed(
    g: &Gpu,
    l: Linear,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    (n, c, oc): (usize, usize, usize),
    packs: &Packs,
) -> Result<Vec<Dispatch>> {
    backward_weight(
        g,
        l,
        dweight,
        dbias,
        dout,
        inp,
        (n, c, oc),
        Reuse::TakeB(packs),
    )
}

#[allow(clippy::too_many_arguments)]
fn backward_weight(
    g: &Gpu,
    l: Linear,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    (n, c, oc): (usize, usize, usize),
    reuse: Reuse,
) -> Result<Vec<Dispatch>> {
    let (e, p) = ("matmul_backward_weight", l.p);
    check_dims(l, n, c, oc)?;
    even_rows(e, "dweight", "c", p, oc, c)?;
    need(e, "dweight", dweight, p, oc * c)?;
    need(e, "dout", dout, l.io, n * oc)?;
    need(e, "inp", inp, p, n * c)?;
    if let Some(b) = dbias {
        need(e, "dbias", b, p, oc)?;
    }
    let mut ops = Vec::new();
    let (dy, x) = (Mat::new(dout, l.io, n, oc), Mat::new(inp, p, n, c));
    product(
        g,
        l,
        &mut ops,
        dweight,
        p,
        dy.clone().t(),
        x,
        None,
        true,
        reuse,
    )?;
    if let Some(db) = dbias {
        let flags = if l.io != p { A_F32 } else { 0 };
        let words = p.words(oc);
        // whole Quads of dout's rows: four columns per invocation (eight for f32 rows of
        // whole pairs of Quads, faster there), eight invocations per workgroup
        let quads = |entry, per: usize| {
            let groups = (oc / per).div_ceil(8) as u32;
            let y = groups.div_ceil(65535);
            (entry, [groups.div_ceil(y), y, 1])
        };
        let db = db.slice(0, words);
        let dims = [n as u32, oc as u32, flags, 0];
        let t = match flags == 0 && oc.is_multiple_of(4) {
            true => texels::flats(g, &mut ops, &[(p, &dy.v, n * oc)]),
            false => None,
        };
        if let Some([t]) = t.as_deref() {
            let (entry, groups) = quads("matmul_bias_backward_t", 4);
            let binds = [Bind::Buffer(&db), Bind::Texture(t)];
            ops.push(texels::op(
                g,
                (shader("matmul", p), entry),
                &dims,
                &binds,
                groups,
            )?);
            return Ok(ops);
        }
        let (entry, groups) = if flags != 0 || !oc.is_multiple_of(4) {
            ("matmul_bias_backward", groups_1d(words))
        } else if p == Precision::F32 && oc.is_multiple_of(8) {
            quads("matmul_bias_backward8", 8)
        } else {
            quads("matmul_bias_backward4", 4)
        };
        ops.push(op(
            g,
            shader("matmul", p),
            entry,
            &dims,
            &[Arg::W(&db), Arg::R(&dy.v)],
            groups,
        )?);
    }
    Ok(ops)
}
