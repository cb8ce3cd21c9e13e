//! Matmul family (shaders/matmul.wgsl): the linear layer's forward product and both backward
//! products, plus the bias gradient. Twins: `cpu::{matmul_forward, matmul_backward}`.
//!
//! One register-tiled kernel shape serves three layouts (row-major, C[M,N] = Σ_k A·B):
//!
//! ```text
//!   forward   out[n,oc]    = inp[n,c]   · weight[oc,c]ᵀ + bias   matmul_nt  (M=n,  N=oc, K=c)
//!   backward  dinp[n,c]    = dout[n,oc] · weight[oc,c]           matmul_nn  (M=n,  N=c,  K=oc)
//!             dweight[oc,c] += dout[n,oc]ᵀ · inp[n,c]            matmul_tn  (M=oc, N=c,  K=n)
//!             dbias[oc]    += Σ_rows dout                        matmul_bias_backward
//! ```
//!
//! Each invocation computes an 8×8 tile of C, a workgroup 8×8 invocations (64×64 of C). The
//! kernels read every operand as vec4 along its contiguous axis; an operand whose row length is
//! not a multiple of 4 is first copied into a zero-padded scratch matrix by a `matmul_pad` op
//! (allocated here, once, when the ops are built). Shapes of any size work; edge tiles are
//! bounds-checked at the store.

use super::{groups_1d, need, op, Arg, Op};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

const S: &str = "matmul";
/// Rows × columns of C per invocation (must match the shader).
pub const TILE_M: usize = 8;
pub const TILE_N: usize = 16;
/// Invocations per workgroup along n and m (must match `@workgroup_size`).
const WG_X: usize = 8;
const WG_Y: usize = 8;

const ACCUMULATE: u32 = 1;
const BIAS: u32 = 2;

/// Which product a dispatch computes (see the module table).
#[derive(Clone, Copy)]
enum Layout {
    /// C = A[M,K] · B[N,K]ᵀ
    Nt,
    /// C = A[M,K] · B[K,N]
    Nn,
    /// C = A[K,M]ᵀ · B[K,N]
    Tn,
}

/// `v` as a `rows × cols` matrix whose row length is a multiple of 4: `v` itself when it
/// already is, else a zero-padded copy made by an op pushed onto `ops`.
fn aligned(g: &Gpu, ops: &mut Vec<Op>, v: &View, rows: usize, cols: usize) -> Result<View> {
    if cols % 4 == 0 {
        return Ok(v.slice(0, rows * cols));
    }
    let stride = cols.next_multiple_of(4);
    let total = rows
        .checked_mul(stride)
        .filter(|&t| t <= u32::MAX as usize)
        .ok_or_else(|| Error::Config(format!("matmul: {rows}×{cols} matrix too large")))?;
    let padded = g.buffer("matmul padded operand", total);
    ops.push(op(
        g,
        S,
        "matmul_pad",
        &[rows as u32, cols as u32, stride as u32, 0],
        &[Arg::W(&padded), Arg::R(v)],
        groups_1d(total),
    )?);
    Ok(padded)
}

/// One tiled product C[M,N] (= or +=) A·B (+ bias[n]); `a`, `b` already 4-aligned (see `aligned`).
#[allow(clippy::too_many_arguments)]
fn gemm(
    g: &Gpu,
    layout: Layout,
    c: &View,
    a: &View,
    b: &View,
    bias: Option<&View>,
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
) -> Result<Op> {
    let (entry, sa, sb) = match layout {
        Layout::Nt => ("matmul_nt", k.div_ceil(4), k.div_ceil(4)),
        Layout::Nn => ("matmul_nn", k.div_ceil(4), n.div_ceil(4)),
        Layout::Tn => ("matmul_tn", m.div_ceil(4), n.div_ceil(4)),
    };
    let flags = if accumulate { ACCUMULATE } else { 0 } | if bias.is_some() { BIAS } else { 0 };
    let groups = |len: usize, tile: usize, wg: usize| len.div_ceil(tile).div_ceil(wg) as u32;
    op(
        g,
        S,
        entry,
        &[m as u32, n as u32, k as u32, sa as u32, sb as u32, flags],
        // Without a bias the weight stands in for the unread binding.
        &[Arg::W(c), Arg::R(a), Arg::R(b), Arg::R(bias.unwrap_or(b))],
        [groups(n, TILE_N, WG_X), groups(m, TILE_M, WG_Y), 1],
    )
}

/// Rejects empty or oversized dimensions (every index must fit a u32 in the shader).
fn check_dims(n: usize, c: usize, oc: usize) -> Result<()> {
    if n == 0 || c == 0 || oc == 0 {
        return Err(Error::Config(format!(
            "matmul: dimensions must be ≥ 1 (n={n}, c={c}, oc={oc})"
        )));
    }
    let big = [n * c, n * oc, oc * c]
        .iter()
        .any(|&x| x + 4 * n.max(oc) > u32::MAX as usize);
    if big {
        return Err(Error::Config(format!(
            "matmul: n={n}, c={c}, oc={oc} exceeds 32-bit indexing"
        )));
    }
    Ok(())
}

/// out[n,oc] = inp[n,c] · weight[oc,c]ᵀ + bias[oc]   (twin: `cpu::matmul_forward`)
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
    check_dims(n, c, oc)?;
    need("matmul_forward out", out, n * oc)?;
    need("matmul_forward inp", inp, n * c)?;
    need("matmul_forward weight", weight, oc * c)?;
    if let Some(b) = bias {
        need("matmul_forward bias", b, oc)?;
    }
    let mut ops = Vec::new();
    let a = aligned(g, &mut ops, inp, n, c)?;
    let w = aligned(g, &mut ops, weight, oc, c)?;
    let bias = bias.map(|b| b.slice(0, oc));
    ops.push(gemm(
        g,
        Layout::Nt,
        &out.slice(0, n * oc),
        &a,
        &w,
        bias.as_ref(),
        false,
        (n, oc, c),
    )?);
    Ok(ops)
}

/// dinp[n,c] = dout·weight (assigned);  dweight[oc,c] += doutᵀ·inp (accumulated);
/// dbias[oc] += Σ_rows dout (accumulated, rows in order).   (twin: `cpu::matmul_backward`)
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
    check_dims(n, c, oc)?;
    need("matmul_backward dinp", dinp, n * c)?;
    need("matmul_backward dweight", dweight, oc * c)?;
    need("matmul_backward dout", dout, n * oc)?;
    need("matmul_backward inp", inp, n * c)?;
    need("matmul_backward weight", weight, oc * c)?;
    if let Some(b) = dbias {
        need("matmul_backward dbias", b, oc)?;
    }
    let mut ops = Vec::new();
    let dy = aligned(g, &mut ops, dout, n, oc)?;
    let w = aligned(g, &mut ops, weight, oc, c)?;
    let x = aligned(g, &mut ops, inp, n, c)?;
    ops.push(gemm(
        g,
        Layout::Nn,
        &dinp.slice(0, n * c),
        &dy,
        &w,
        None,
        false,
        (n, c, oc),
    )?);
    ops.push(gemm(
        g,
        Layout::Tn,
        &dweight.slice(0, oc * c),
        &dy,
        &x,
        None,
        true,
        (oc, c, n),
    )?);
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
