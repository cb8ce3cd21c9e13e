//! The texture kernels of the matmul family: both operands of C[M,N] = A·B are packed into
//! textures of four elements a texel: rgba32float, or, for two bf16 operands where the device
//! writes rg32uint textures, four bf16 in two words that the kernel widens as it fetches (half
//! the bytes; the same values, so the same bits). Packed by `matmul_pack4` from whole vec4 rows,
//! else `matmul_pack`, transposing when the operand is used transposed; or a plain copy where an
//! operand's stored rows are whole texel rows (`copy_rows`; a bf16 one for f32 texels widened
//! into f32 rows first), which for a transposed operand the kernel reads in a rows layout. Then one
//! kernel computes C from texel fetches: the portable `matmul_tex` (a 16×16 tile per
//! invocation), or `matmul_tex_sg8` (32×8 per lane, A's texels shared across an 8-lane
//! subgroup; same bits) where the device's subgroups are exactly 8 lanes. The textures are
//! padded with zeros to whole tiles of the kernel, so it never fetches out of range. Its bind
//! groups hold textures, so its pipelines take the layout wgpu derives from the shader instead
//! of the buffer convention of [`op`](crate::kernels::op).

use super::operand::Mat;
use super::pack::{copy_rows, pack, Reuse};
use super::shaders::{binding, shader, tex_op};
use super::WG_SIDE;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::Dispatch;
use crate::precision::Precision;

/// Which kernel multiplies the packed operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tex {
    /// `matmul_tex`: any adapter with rgba32float storage textures.
    Portable,
    /// `matmul_tex_sg8`: needs subgroups of exactly 8 lanes ([`Gpu::subgroup_lanes`]).
    Subgroup8,
}

impl Tex {
    /// The kernel `g` runs best: the subgroup one where its subgroups are 8 lanes.
    pub(super) fn best(g: &Gpu) -> Tex {
        if g.subgroup_lanes() == Some(8) {
            Tex::Subgroup8
        } else {
            Tex::Portable
        }
    }
    /// The shader holding the kernel, for C and the bias stored in the layer's precision `p`,
    /// texels of `words` (packed bf16) or f32, operands in the rows layouts `rows`, and C
    /// stored a Quad at a time where `quads` ([`super::quad_stores`]).
    fn shader(self, p: Precision, words: bool, rows: Rows, quads: bool) -> &'static str {
        let layout = match rows {
            (false, false) => "",
            (true, _) => "_a_rows",
            (false, true) => "_b_rows",
        };
        let name = match self {
            Tex::Portable => format!("{}{layout}", shader(p, words, quads)),
            Tex::Subgroup8 => {
                let texels = match (p, words) {
                    (Precision::F32, _) => "",
                    (Precision::Bf16, false) => "_bf16",
                    (Precision::Bf16, true) => "_words",
                };
                let q = if quads { "_q" } else { "" };
                format!("matmul_subgroup{texels}{layout}{q}")
            }
        };
        crate::kernels::SHADERS
            .iter()
            .map(|(n, _)| *n)
            .find(|n| *n == name)
            .unwrap_or("(a matmul shader not in the registry)")
    }
    fn entry(self) -> &'static str {
        match self {
            Tex::Portable => "matmul_tex",
            Tex::Subgroup8 => "matmul_tex_sg8",
        }
    }
    /// Rows and columns of C per workgroup; must match the shaders (16×16 per invocation on
    /// 8×8 invocations; 32×8 per lane on 8 lanes).
    fn workgroup_tile(self) -> (usize, usize) {
        match self {
            Tex::Portable => (16 * WG_SIDE, 16 * WG_SIDE),
            Tex::Subgroup8 => (32, 64),
        }
    }
    /// What A' is padded to in rows and B' in texels across: every fetch of a workgroup's
    /// invocations stays inside (the portable kernel skips invocations outside C; the subgroup
    /// one keeps every lane).
    fn pads(self) -> (usize, usize) {
        match self {
            Tex::Portable => (16, 4),
            Tex::Subgroup8 => (32, 16),
        }
    }
}

/// Texture sizes (width, height) in texels of the packed A' and B' for C[M,N], K.
fn texture_sizes(kernel: Tex, m: usize, n: usize, k: usize) -> [(usize, usize); 2] {
    let (rows, across) = kernel.pads();
    let kt = k.div_ceil(4);
    [
        (kt, m.next_multiple_of(rows)),
        (n.div_ceil(4).next_multiple_of(across), 4 * kt),
    ]
}

/// Which operands come as a copy of their stored rows although used transposed: (A, B).
/// `A_ROWS`: A'(q, k) = A(4q .. 4q+3, k); `B_ROWS`: B'(t, n) = B(4t .. 4t+3, n)
/// (shaders/matmul.wgsl, matmul_subgroup.wgsl). Each combination is its own shader module, so
/// the kernel's choice is made when it is compiled, not in its loop.
type Rows = (bool, bool);

/// The kernel's texture sizes under `rows`; a side without its flag keeps its size from
/// [`texture_sizes`]. The pads cover every fetch of a tile: rows of C per invocation (16) or
/// workgroup (32), columns per invocation (16) or workgroup (64).
fn rows_sizes(kernel: Tex, m: usize, n: usize, k: usize, rows: Rows) -> [(usize, usize); 2] {
    let [sa, sb] = texture_sizes(kernel, m, n, k);
    let (tile_m, tile_n) = match kernel {
        Tex::Portable => (16, 16),
        Tex::Subgroup8 => (32, 64),
    };
    let kt = k.div_ceil(4);
    [
        if rows.0 {
            (m.next_multiple_of(tile_m) / 4, 4 * kt)
        } else {
            sa
        },
        if rows.1 {
            (kt, n.next_multiple_of(tile_n))
        } else {
            sb
        },
    ]
}

pub(super) fn fits(g: &Gpu, kernel: Tex, m: usize, n: usize, k: usize) -> bool {
    let max = g.limits.max_texture_dimension_2d as usize;
    texture_sizes(kernel, m, n, k)
        .iter()
        .all(|&(w, h)| w <= max && h <= max)
}

/// C (= or +=) A·B (+ bias) with a texture kernel: two packs (one when B's texture is taken from
/// `reuse`) and one product. The bias is in `p`, and C in `p` unless `flags` has C_F32; each
/// operand is packed from its own storage.
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    g: &Gpu,
    kernel: Tex,
    p: Precision,
    ops: &mut Vec<Dispatch>,
    c: &View,
    a: Mat,
    b: Mat,
    bias: Option<&View>,
    flags: u32,
    reuse: Reuse,
) -> Result<()> {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    if kernel == Tex::Subgroup8 && g.subgroup_lanes() != Some(8) {
        return Err(Error::Config(format!(
            "matmul: the subgroup kernel needs subgroups of exactly 8 lanes; {} has {}",
            g.adapter_name(),
            if g.features.contains(wgpu::Features::SUBGROUP) {
                format!(
                    "subgroups of {}..{} lanes",
                    g.info.subgroup_min_size, g.info.subgroup_max_size
                )
            } else {
                "no subgroup operations".into()
            }
        )));
    }
    if !fits(g, kernel, m, n, k) {
        return Err(Error::Config(format!(
            "matmul: M={m}, N={n}, K={k} exceeds the texture size limit {}; use Kernel::Buffer",
            g.limits.max_texture_dimension_2d
        )));
    }
    // transposed operands taken as copies of their rows (one side at a time, and where the
    // rows layout fits the texture limit)
    let max = g.limits.max_texture_dimension_2d as usize;
    // two bf16 operands as packed bf16 texels, where the device can write them
    let words = a.ty == Precision::Bf16 && b.ty == Precision::Bf16 && g.has_word_textures();
    let rows_of = |x: &Mat| x.t && copy_rows(x, words).is_some();
    let (ra, rb) = (rows_of(&a), rows_of(&b));
    let rows = (ra, rb && !ra);
    let rows = match rows_sizes(kernel, m, n, k, rows) {
        s if s.iter().all(|&(w, h)| w <= max && h <= max) => rows,
        _ => (false, false),
    };
    let [sa, sb] = rows_sizes(kernel, m, n, k, rows);
    let pa = pack(g, ops, &a, sa, rows.0, words)?;
    let kept = match &reuse {
        Reuse::TakeB(packs) => packs.find(&b, sb, words).cloned(),
        _ => None,
    };
    let pb = match kept {
        Some(kept) => kept,
        None => pack(g, ops, &b, sb, rows.1, words)?,
    };
    if let Reuse::KeepA(packs) = reuse {
        packs.0.push(pa.clone());
    }
    let (ta, tb) = (&pa.view, &pb.view);
    let dims = [m, n, k.div_ceil(4), 0, 0, flags as usize, 0, 0].map(|x| x as u32);
    let resources = vec![
        binding(c)?,
        wgpu::BindingResource::TextureView(ta),
        wgpu::BindingResource::TextureView(tb),
        binding(bias.unwrap_or(&a.v))?,
    ];
    let (tile_rows, tile_cols) = kernel.workgroup_tile();
    let groups = [
        n.div_ceil(tile_cols) as u32,
        m.div_ceil(tile_rows) as u32,
        1,
    ];
    let mut op = tex_op(
        g,
        kernel.shader(p, words, rows, super::quad_stores(n, flags)),
        kernel.entry(),
        &dims,
        resources,
        groups,
    )?;
    op._memory = vec![pa.held, pb.held];
    ops.push(op);
    Ok(())
}
