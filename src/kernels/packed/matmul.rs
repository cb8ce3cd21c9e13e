//! Packed-bf16 matmul family (shaders/packed_matmul.wgsl): the buffer kernels of
//! [`crate::kernels::matmul`] with packed bf16 operands. Twins: `cpu::packed::matmul`.
//!
//! ```text
//!   forward   out[n,oc]     = inp[n,c]    · weight[oc,c]ᵀ + bias   matmul_nt_bf16
//!   backward  dinp[n,c]     = dout[n,oc]  · weight[oc,c]           matmul_nn_bf16
//!             dweight[oc,c] += dout[n,oc]ᵀ · inp[n,c]              matmul_tn_bf16
//!             dbias[oc]     += Σ_rows dout                         matmul_bias_backward_bf16
//! ```
//!
//! Everything is packed bf16 except, in the `_f32out` / `_f32dout` variants, the LM head's f32
//! logits `out` / dlogits `dout`. Sums are f32 in k order from the bias (rows in order for the
//! bias gradient), rounded to bf16 once when stored; `+=` outputs widen the old value, add the
//! finished sum, and narrow. Results are bit-identical run to run, and the split backward
//! (`_input` + `_weight`) gives the same bits as the unsplit one (it is the same ops).
//!
//! Shapes: any, except that a packed output of more than one row needs an even row length
//! (oc for `out`, c for `dinp` and `dweight`), since each invocation writes whole u32 words and
//! rows of odd length would share words between tiles; those return `Error::Config`. Inputs of
//! any row length are fine: one whose row length is not a multiple of 4 is first copied into a
//! zero-padded scratch matrix (`matmul_pad_bf16` / `matmul_pad_f32`), as the f32 path does.
//! There is no texture path.

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::matmul::check_dims;
use crate::kernels::{groups_1d, op, Arg, Op};

const S: &str = "packed_matmul";
/// Outputs per invocation (rows × columns of C); must match the shader.
const BUF_TILE: (usize, usize) = (8, 16);
/// Invocations per workgroup along each axis (`@workgroup_size(8, 8)`).
const WG_SIDE: usize = 8;

const ACCUMULATE: u32 = 1;
const BIAS: u32 = 2;
const A_F32: u32 = 4;
const C_F32: u32 = 8;

/// How an operand's elements are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    /// Packed bf16: `⌈len/2⌉` u32 words.
    Bf16,
    /// Plain f32: `len` elements.
    F32,
}

impl Ty {
    /// View length (u32 words or f32 elements) holding `elems` elements.
    fn words(self, elems: usize) -> usize {
        match self {
            Ty::Bf16 => elems.div_ceil(2),
            Ty::F32 => elems,
        }
    }
}

/// Checks that `v` holds `elems` elements stored as `ty`, naming the operand.
fn need(entry: &str, name: &str, v: &View, ty: Ty, elems: usize) -> Result<()> {
    let words = ty.words(elems);
    if v.len < words {
        let unit = match ty {
            Ty::Bf16 => "u32 words (packed bf16)",
            Ty::F32 => "f32 elements",
        };
        return Err(Error::Config(format!(
            "{entry} {name}: view has {} {unit}, kernel needs {words} for {elems} elements",
            v.len
        )));
    }
    Ok(())
}

/// A packed output of `rows` rows of `len` elements: rows of odd length would share words.
fn even_rows(entry: &str, name: &str, dim: &str, rows: usize, len: usize) -> Result<()> {
    if rows > 1 && len % 2 == 1 {
        return Err(Error::Config(format!(
            "{entry} {name}: bf16 matmul needs an even {dim} ({dim} = {len}) to write {rows} \
             packed rows (rows of odd length would share u32 words between invocations)"
        )));
    }
    Ok(())
}

/// An operand as stored: `sr × sc` row-major with row stride `ld` elements, used as is or
/// transposed (`t`); logical element (r, c) lives at element `r·ld + c`, or `c·ld + r`.
#[derive(Clone)]
struct Mat {
    v: View,
    ty: Ty,
    sr: usize,
    sc: usize,
    ld: usize,
    t: bool,
}

impl Mat {
    fn new(v: &View, ty: Ty, rows: usize, cols: usize) -> Mat {
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

/// `m` with a row stride that is a multiple of 4 elements: `m` itself, or a zero-padded copy
/// (same storage type) made by an op pushed onto `ops`.
fn aligned(g: &Gpu, ops: &mut Vec<Op>, m: Mat) -> Result<Mat> {
    if m.ld.is_multiple_of(4) {
        return Ok(m);
    }
    let ld = m.sc.next_multiple_of(4);
    let words = m.ty.words(m.sr * ld);
    let padded = g.scratch("bf16 matmul padded operand", words);
    let entry = match m.ty {
        Ty::Bf16 => "matmul_pad_bf16",
        Ty::F32 => "matmul_pad_f32",
    };
    ops.push(op(
        g,
        S,
        entry,
        &[m.sr as u32, m.sc as u32, ld as u32, m.ld as u32],
        &[Arg::W(&padded), Arg::R(&m.v)],
        groups_1d(words),
    )?);
    Ok(Mat { v: padded, ld, ..m })
}

/// C[M,N] (= or +=) A·B (+ bias[N]) with the kernel of A's and B's layout. B and the bias are
/// packed; A and C packed or f32. The caller has checked C's row length (`even_rows`).
#[allow(clippy::too_many_arguments)]
fn product(
    g: &Gpu,
    ops: &mut Vec<Op>,
    c: &View,
    c_ty: Ty,
    a: Mat,
    b: Mat,
    bias: Option<&View>,
    accumulate: bool,
) -> Result<()> {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    debug_assert_eq!(b.ty, Ty::Bf16);
    let entry = match (a.t, b.t) {
        (false, true) => "matmul_nt_bf16",
        (false, false) => "matmul_nn_bf16",
        (true, false) => "matmul_tn_bf16",
        (true, true) => return Err(Error::Config("matmul: Aᵀ·Bᵀ is not a kernel layout".into())),
    };
    let flags = if accumulate { ACCUMULATE } else { 0 }
        | if bias.is_some() { BIAS } else { 0 }
        | if a.ty == Ty::F32 { A_F32 } else { 0 }
        | if c_ty == Ty::F32 { C_F32 } else { 0 };
    let c = c.slice(0, c_ty.words(m * n));
    let (a, b) = (aligned(g, ops, a)?, aligned(g, ops, b)?);
    let groups = |len: usize, tile: usize| len.div_ceil(tile).div_ceil(WG_SIDE) as u32;
    let dims = [m, n, k, a.ld / 4, b.ld / 4, flags as usize].map(|x| x as u32);
    // Without a bias an input stands in for the unread binding.
    let args = [
        Arg::W(&c),
        Arg::R(&a.v),
        Arg::R(&b.v),
        Arg::R(bias.unwrap_or(&b.v)),
    ];
    let groups = [groups(n, BUF_TILE.1), groups(m, BUF_TILE.0), 1];
    ops.push(op(g, S, entry, &dims, &args, groups)?);
    Ok(())
}

/// `out[n,oc] = inp[n,c] · weight[oc,c]ᵀ + bias[oc]`, all packed bf16; `oc` even unless `n = 1`.
/// (twin: `cpu::packed::matmul::matmul_forward_bf16`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_bf16(
    g: &Gpu,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    let e = "matmul_forward_bf16";
    even_rows(e, "out", "oc", n, oc)?;
    forward(g, e, Ty::Bf16, out, inp, weight, bias, n, c, oc)
}

/// [`matmul_forward_bf16`] with `out[n,oc]` f32 (the LM head's logits); any `oc`.
/// (twin: `cpu::packed::matmul::matmul_forward_bf16_f32out`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_bf16_f32out(
    g: &Gpu,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    let e = "matmul_forward_bf16_f32out";
    forward(g, e, Ty::F32, out, inp, weight, bias, n, c, oc)
}

#[allow(clippy::too_many_arguments)]
fn forward(
    g: &Gpu,
    e: &str,
    out_ty: Ty,
    out: &View,
    inp: &View,
    weight: &View,
    bias: Option<&View>,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    check_dims(n, c, oc)?;
    need(e, "out", out, out_ty, n * oc)?;
    need(e, "inp", inp, Ty::Bf16, n * c)?;
    need(e, "weight", weight, Ty::Bf16, oc * c)?;
    if let Some(b) = bias {
        need(e, "bias", b, Ty::Bf16, oc)?;
    }
    let bias = bias.map(|b| b.slice(0, Ty::Bf16.words(oc)));
    let mut ops = Vec::new();
    let x = Mat::new(inp, Ty::Bf16, n, c);
    let w = Mat::new(weight, Ty::Bf16, oc, c).t();
    product(g, &mut ops, out, out_ty, x, w, bias.as_ref(), false)?;
    Ok(ops)
}

/// `dinp[n,c] = dout·weight` (assigned); `dweight[oc,c] += doutᵀ·inp`; `dbias[oc] += Σ_rows dout`
/// (rows in order, in f32); all packed bf16; `c` even unless `n = 1` and `oc = 1`.
/// The ops of [`matmul_backward_input_bf16`] then [`matmul_backward_weight_bf16`].
/// (twin: `cpu::packed::matmul::matmul_backward_bf16`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_bf16(
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
    let mut ops = backward_input(g, Ty::Bf16, dinp, dout, weight, n, c, oc)?;
    ops.extend(backward_weight(
        g,
        Ty::Bf16,
        dweight,
        dbias,
        dout,
        inp,
        n,
        c,
        oc,
    )?);
    Ok(ops)
}

/// [`matmul_backward_bf16`] with `dout[n,oc]` f32 (the LM head's dlogits).
/// (twin: `cpu::packed::matmul::matmul_backward_bf16_f32dout`)
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_bf16_f32dout(
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
    let mut ops = backward_input(g, Ty::F32, dinp, dout, weight, n, c, oc)?;
    ops.extend(backward_weight(
        g,
        Ty::F32,
        dweight,
        dbias,
        dout,
        inp,
        n,
        c,
        oc,
    )?);
    Ok(ops)
}

/// The input-gradient half of [`matmul_backward_bf16`]: `dinp[n,c] = dout·weight` (assigned).
pub fn matmul_backward_input_bf16(
    g: &Gpu,
    dinp: &View,
    dout: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    backward_input(g, Ty::Bf16, dinp, dout, weight, n, c, oc)
}

/// The weight-gradient half of [`matmul_backward_bf16`]: `dweight += doutᵀ·inp`,
/// `dbias += Σ_rows dout`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_weight_bf16(
    g: &Gpu,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    backward_weight(g, Ty::Bf16, dweight, dbias, dout, inp, n, c, oc)
}

/// [`matmul_backward_input_bf16`] with `dout` f32 (the split head backward).
pub fn matmul_backward_input_bf16_f32dout(
    g: &Gpu,
    dinp: &View,
    dout: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    backward_input(g, Ty::F32, dinp, dout, weight, n, c, oc)
}

/// [`matmul_backward_weight_bf16`] with `dout` f32 (the split head backward).
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_weight_bf16_f32dout(
    g: &Gpu,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    backward_weight(g, Ty::F32, dweight, dbias, dout, inp, n, c, oc)
}

/// The name of a backward entry point taking `dout` as `ty`, for errors.
fn backward_name(half: &str, ty: Ty) -> String {
    let suffix = if ty == Ty::F32 { "_f32dout" } else { "" };
    format!("matmul_backward{half}_bf16{suffix}")
}

#[allow(clippy::too_many_arguments)]
fn backward_input(
    g: &Gpu,
    dout_ty: Ty,
    dinp: &View,
    dout: &View,
    weight: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    let e = &backward_name("_input", dout_ty);
    check_dims(n, c, oc)?;
    even_rows(e, "dinp", "c", n, c)?;
    need(e, "dinp", dinp, Ty::Bf16, n * c)?;
    need(e, "dout", dout, dout_ty, n * oc)?;
    need(e, "weight", weight, Ty::Bf16, oc * c)?;
    let mut ops = Vec::new();
    let dy = Mat::new(dout, dout_ty, n, oc);
    let w = Mat::new(weight, Ty::Bf16, oc, c);
    product(g, &mut ops, dinp, Ty::Bf16, dy, w, None, false)?;
    Ok(ops)
}

#[allow(clippy::too_many_arguments)]
fn backward_weight(
    g: &Gpu,
    dout_ty: Ty,
    dweight: &View,
    dbias: Option<&View>,
    dout: &View,
    inp: &View,
    n: usize,
    c: usize,
    oc: usize,
) -> Result<Vec<Op>> {
    let e = &backward_name("_weight", dout_ty);
    check_dims(n, c, oc)?;
    even_rows(e, "dweight", "c", oc, c)?;
    need(e, "dweight", dweight, Ty::Bf16, oc * c)?;
    need(e, "dout", dout, dout_ty, n * oc)?;
    need(e, "inp", inp, Ty::Bf16, n * c)?;
    if let Some(b) = dbias {
        need(e, "dbias", b, Ty::Bf16, oc)?;
    }
    let mut ops = Vec::new();
    let dy = Mat::new(dout, dout_ty, n, oc);
    let x = Mat::new(inp, Ty::Bf16, n, c);
    product(
        g,
        &mut ops,
        dweight,
        Ty::Bf16,
        dy.clone().t(),
        x,
        None,
        true,
    )?;
    if let Some(db) = dbias {
        let flags = if dout_ty == Ty::F32 { A_F32 } else { 0 };
        let words = Ty::Bf16.words(oc);
        ops.push(op(
            g,
            S,
            "matmul_bias_backward_bf16",
            &[n as u32, oc as u32, flags, 0],
            &[Arg::W(&db.slice(0, words)), Arg::R(&dy.v)],
            groups_1d(words),
        )?);
    }
    Ok(ops)
}
