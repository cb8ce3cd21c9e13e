//! An operand into a texture: packed by a shader, or its stored rows copied; and the packs a
//! forward keeps for the weight gradients.

use std::sync::Arc;

use super::operand::Mat;
use super::shaders::{binding, shader, tex_op};
use super::WG_SIDE;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::kernels::texels::Texels;
use crate::kernels::Dispatch;
use crate::memory::Allocation;
use crate::precision::Precision;

/// An operand a product packed into a texture, kept so that a later product of the same
/// operand in the same layout can bind it instead of packing it again.
#[derive(Clone)]
pub(super) struct Packed {
    pub(super) view: wgpu::TextureView,
    pub(super) held: Arc<Allocation>,
    source: Source,
    size: (usize, usize),
    /// Packed bf16 texels (else f32 ones).
    words: bool,
}

/// What was packed: the operand's view (buffer, offset, length), type and layout (stored rows,
/// columns, row stride, transposed).
type Source = (
    wgpu::Buffer,
    usize,
    usize,
    Precision,
    usize,
    usize,
    usize,
    bool,
);

/// The identity of what `m` packs into a texture.
pub(super) fn source(m: &Mat) -> Source {
    let b: &wgpu::Buffer = &m.v.buf;
    (b.clone(), m.v.offset, m.v.len, m.ty, m.sr, m.sc, m.ld, m.t)
}

/// The forward's packed inputs (operand A of each product), for the weight gradients (whose
/// operand B is the same matrix in the same texel layout). Sound only for activations that
/// nothing writes between the forward's pack and the weight-gradient product: a model's own
/// slot, whose recomputation packs them again.
#[derive(Clone, Default)]
pub struct Packs(pub(super) Vec<Packed>);

impl Packs {
    pub(super) fn find(&self, m: &Mat, size: (usize, usize), words: bool) -> Option<&Packed> {
        let want = source(m);
        self.0
            .iter()
            .find(|p| p.source == want && p.size == size && p.words == words)
    }
    /// Textures kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Packs `m` into a fresh `w × h`-texel texture (texel (x, y) = m(y, 4x .. 4x+3), zero outside):
/// packed bf16 texels where `words` (`m` is bf16), else f32 ones (bf16 elements widened
/// exactly); or copies its stored rows where [`copy_rows`] allows and `m` is not transposed
/// (or, `rows`, the kernel reads the transposed operand's rows layout). Its bytes per
/// texel (16, or 8 for words), and a bf16 copy's widened rows (4 bytes per element), are in the
/// memory ledger (workspace) while the returned entry or the ops live.
pub(super) fn pack(
    g: &Gpu,
    ops: &mut Vec<Dispatch>,
    m: &Mat,
    (w, h): (usize, usize),
    rows: bool,
    words: bool,
) -> Result<Packed> {
    let (format, texel_bytes) = match words {
        true => (wgpu::TextureFormat::Rg32Uint, 8),
        false => (wgpu::TextureFormat::Rgba32Float, 16),
    };
    let t = Texels::new(g, "matmul packed operand", format, (w, h), true);
    let packed = |t: &Texels| Packed {
        view: t.view.clone(),
        held: t.held.clone(),
        source: source(m),
        size: (w, h),
        words,
    };
    if let Some(row_bytes) = copy_rows(m, words).filter(|_| !m.t || rows) {
        // texel row y is m's row y as it lies in memory (bf16 rows for f32 texels widened into
        // f32 rows first, by the bit rules the pack shader widens with): a copy, no pack
        // shader; the texels past its rows and columns keep the zeros wgpu initialises a
        // partly copied texture with
        let stored = match (m.ty, words) {
            (Precision::Bf16, false) => {
                let wide = g.scratch("matmul widened operand", m.sr * m.ld);
                ops.push(crate::kernels::bf16::unpack(g, &wide, &m.v)?);
                wide
            }
            _ => m.v.clone(),
        };
        let width = row_bytes as usize / texel_bytes;
        ops.push(t.copy_op("matmul_copy", stored, row_bytes as usize, (width, m.sr, 0)));
        return Ok(packed(&t));
    }
    let target = wgpu::BindingResource::TextureView(&t.view);
    let groups = |texels: usize| texels.div_ceil(WG_SIDE) as u32;
    ops.push(if m.ld.is_multiple_of(4) && m.ld == m.sc {
        // Whole vec4 rows: four texels per invocation from four vec4 loads.
        let dims = [m.rows(), m.cols(), m.ld / 4, m.t as usize, 0, 0, 0, 0].map(|x| x as u32);
        tex_op(
            g,
            shader(m.ty, words, false),
            "matmul_pack4",
            &dims,
            vec![target, binding(&m.v)?],
            [groups(w), groups(h / 4), 1],
        )?
    } else {
        let (rs, cs) = if m.t { (1, m.ld) } else { (m.ld, 1) };
        let dims = [m.rows(), m.cols(), rs, cs, 0, 0, 0, 0].map(|x| x as u32);
        tex_op(
            g,
            shader(m.ty, words, false),
            "matmul_pack",
            &dims,
            vec![target, binding(&m.v)?],
            [groups(w), groups(h), 1],
        )?
    });
    Ok(packed(&t))
}

/// The bytes of one texel row when `m`'s stored rows can be copied into texel rows as they lie
/// in memory (four elements a texel: f32 ones, packed bf16 ones for `words` texels, a bf16
/// operand's widened f32 rows for f32 texels): rows contiguous, and a row length wgpu copies
/// from (a multiple of 256 bytes: 64 f32 elements, 128 bf16 ones) at an offset of whole texels.
/// Not transposed, that is the packed layout every kernel reads; transposed, the rows layouts
/// ([`Rows`](super::texture::Rows)). On lavapipe a copy of a 512×64 operand takes
/// ~5 µs where the pack shader takes ~0.2 ms.
pub(super) fn copy_rows(m: &Mat, words: bool) -> Option<u32> {
    let (row_bytes, texel_bytes, offset) = match (m.ty, words) {
        (Precision::Bf16, true) => (2 * m.ld, 8, m.v.byte_offset()),
        // widened into a fresh aligned buffer
        (Precision::Bf16, false) => (4 * m.ld, 16, 0),
        (Precision::F32, _) => (4 * m.ld, 16, m.v.byte_offset()),
    };
    let whole_rows = m.ld == m.sc;
    (whole_rows && Texels::copyable(row_bytes, offset, texel_bytes)).then_some(row_bytes as u32)
}

/// How a product's packs meet [`Packs`]: none, keep A's texture, or take B's from them.
pub(super) enum Reuse<'a> {
    None,
    KeepA(&'a mut Packs),
    TakeB(&'a Packs),
}
