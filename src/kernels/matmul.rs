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
use super::{groups_1d, op, shader, Arg, Dispatch};
use crate::error::Result;
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

mod operand;
mod pack;
mod product;
mod shaders;
mod texture;
use operand::Mat;
pub use pack::Packs;
use pack::Reuse;
pub use product::texture_min_flops;
use product::{check_dims, even_rows, need, product};

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
