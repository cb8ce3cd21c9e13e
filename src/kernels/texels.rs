//! Tensors read through texture copies on CPU adapters ([`Gpu::texture_reads`]).
//!
//! On the software adapters a storage-buffer load whose address differs between lanes is a
//! loop over the lanes, with a branch per lane and element; a texel fetch is one vector gather.
//! Measured on lavapipe (2 cores, 2 MiB of f32, 2026-12-07): reading a buffer once costs about
//! 2.2 ms, a queue copy of it into a texture 0.12 ms, and reading that texture 0.4 ms. So the
//! row kernels (layernorm, GELU, the residual add, the bias gradient), attention's tiled and
//! subgroup kernels and AdamW read their inputs from a copy: the tensor's Quads (four elements:
//! f32 words, or two words of packed bf16) row after row in a texture [`ROW`] texels wide
//! (`flat` in the shaders: Quad q at texel (q mod ROW, q / ROW)), rgba32uint or rg32uint texels
//! holding the buffer's bits. The matmul's operand textures are made and copied by the same
//! [`Texels`].

use std::sync::Arc;

use super::{Dispatch, Work};
use crate::error::Result;
use crate::gpu::{Gpu, View};
use crate::memory::{Allocation, Category};
use crate::precision::Precision;

/// Texels per row of a flat copy (`FLAT_ROW` in shaders/store_f32.wgsl and store_bf16.wgsl).
pub(crate) const ROW: usize = 256;

/// A texture and its bytes in the memory ledger (workspace: a matmul operand's while the ops
/// that read it live, a flat copy's for the device's life).
pub(crate) struct Texels {
    pub view: wgpu::TextureView,
    pub held: Arc<Allocation>,
    texture: wgpu::Texture,
}

impl Texels {
    /// A fresh `w × h`-texel texture of `format` (zeros), written by copies and, where
    /// `storage`, by a pack shader.
    pub fn new(
        g: &Gpu,
        label: &str,
        format: wgpu::TextureFormat,
        (w, h): (usize, usize),
        storage: bool,
    ) -> Texels {
        let texel_bytes = format.block_copy_size(None).unwrap_or(16) as usize;
        let held = g.hold(Category::Workspace, (texel_bytes * w * h) as u64);
        let texture = g.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: wgpu::Extent3d {
                width: w as u32,
                height: h as u32,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: match storage {
                true => wgpu::TextureUsages::STORAGE_BINDING,
                false => wgpu::TextureUsages::empty(),
            } | wgpu::TextureUsages::TEXTURE_BINDING
                | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        Texels {
            view: texture.create_view(&Default::default()),
            held,
            texture,
        }
    }

    /// The op that copies `rows` rows of `width` texels, `row_bytes` apart from the start of
    /// `stored`, into texel rows `y`.. (a row pitch and offset [`Texels::copyable`] allows).
    pub fn copy_op(
        &self,
        label: &'static str,
        stored: View,
        row_bytes: usize,
        (width, rows, y): (usize, usize, usize),
    ) -> Dispatch {
        Dispatch {
            label,
            work: Work::Copy {
                buffer: (*stored.buf).clone(),
                offset: stored.byte_offset(),
                row_bytes: row_bytes as u32,
                width: width as u32,
                rows: rows as u32,
                y: y as u32,
                texture: self.texture.clone(),
            },
            _views: vec![stored],
            _memory: Vec::new(),
        }
    }

    /// Whether rows `row_bytes` apart at byte `offset` can be copied into texels of
    /// `texel_bytes`: a row pitch wgpu copies with (a multiple of 256 bytes) at an offset of
    /// whole texels.
    pub fn copyable(row_bytes: usize, offset: u64, texel_bytes: u64) -> bool {
        row_bytes.is_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT as usize)
            && offset.is_multiple_of(texel_bytes)
    }
}

/// The first `elems` elements of `v` (precision `p`) as a flat copy ([`ROW`] Quads a texel
/// row), with the ops that copy them pushed onto `ops`; `None` where the kernel reads the
/// buffer instead: texture reads off ([`Gpu::texture_reads`]), `elems` not whole Quads, a view
/// not at a whole texel, or more texel rows than the adapter's texture limit.
///
/// The texture is the device's for this format, height and `place` (the copy's index in its
/// op's list), shared by every op: an op's copies are read only by its own dispatches, which
/// the queue runs right after them, so the ops of every layer and microbatch can take turns
/// with one texture, and a device holds a few copies' worth of workspace, not one per op. Its
/// height holds `cap` elements where that is more than `elems`.
fn flat(
    g: &Gpu,
    ops: &mut Vec<Dispatch>,
    (p, v, elems): (Precision, &View, usize),
    (place, cap): (usize, usize),
) -> Option<Texels> {
    let (format, texel_bytes) = match p {
        Precision::F32 => (wgpu::TextureFormat::Rgba32Uint, 16),
        Precision::Bf16 => (wgpu::TextureFormat::Rg32Uint, 8),
    };
    let quads = elems / 4;
    let (full, rest) = (quads / ROW, quads % ROW);
    // a texel row more where the height is a power of two: llvmpipe compiles a kernel again
    // for textures whose sides change between powers of two and others, so every copy has a
    // side of each kind (the width is ROW)
    let mut h = quads.max(cap / 4).div_ceil(ROW);
    while h.is_power_of_two() {
        h += 1;
    }
    if !g.texture_reads()
        || quads == 0
        || !elems.is_multiple_of(4)
        || h > g.limits.max_texture_dimension_2d as usize
        || !Texels::copyable(ROW * texel_bytes, v.byte_offset(), texel_bytes as u64)
    {
        return None;
    }
    let t = {
        let mut pool = g.textures.lock().ok()?;
        let (texture, held) = pool.entry((format, h, place)).or_insert_with(|| {
            let t = Texels::new(g, "flat copy", format, (ROW, h), false);
            (t.texture, t.held)
        });
        Texels {
            view: texture.create_view(&Default::default()),
            held: held.clone(),
            texture: texture.clone(),
        }
    };
    let row_bytes = ROW * texel_bytes;
    let words = |q: usize| p.words(4 * q);
    if full > 0 {
        let stored = v.slice(0, words(full * ROW));
        ops.push(t.copy_op("flat_copy", stored, row_bytes, (ROW, full, 0)));
    }
    if rest > 0 {
        let stored = v.slice(words(full * ROW), words(rest));
        ops.push(t.copy_op("flat_copy", stored, row_bytes, (rest, 1, full)));
    }
    Some(t)
}

/// Flat copies of every `(p, view, elems)` of `list` ([`flat`]), their copy ops pushed onto
/// `ops`; `None`, with nothing pushed, unless every one can be made.
pub(crate) fn flats(
    g: &Gpu,
    ops: &mut Vec<Dispatch>,
    list: &[(Precision, &View, usize)],
) -> Option<Vec<Texels>> {
    flats_in(g, ops, list, (0, 0))
}

/// [`flats`] at places `first`.. (for an op that copies some of its tensors later than others:
/// each call's places must not meet another's of the same op) in textures that hold `cap`
/// elements or more (the slices of an op split to bound its copies' workspace share one set).
pub(crate) fn flats_in(
    g: &Gpu,
    ops: &mut Vec<Dispatch>,
    list: &[(Precision, &View, usize)],
    (first, cap): (usize, usize),
) -> Option<Vec<Texels>> {
    let before = ops.len();
    let all: Option<Vec<Texels>> = list
        .iter()
        .enumerate()
        .map(|(i, &x)| flat(g, ops, x, (first + i, cap)))
        .collect();
    if all.is_none() {
        ops.truncate(before);
    }
    all
}

/// A binding of a kernel that reads copies: a storage buffer, a texture, or none (a binding of
/// its module this entry does not use).
#[derive(Clone, Copy)]
pub(crate) enum Bind<'a> {
    Buffer(&'a View),
    Texture(&'a Texels),
    Skip,
}

/// One dispatch of `shader::entry` with `dims` at binding 0 and `binds` at 1, 2, … (the layout
/// wgpu derives from the shader; a [`Bind::Skip`] binds nothing); it keeps the buffers and the
/// textures' ledger entries alive.
pub(crate) fn op(
    g: &Gpu,
    (shader, entry): (&'static str, &'static str),
    dims: &[u32],
    binds: &[Bind],
    groups: [u32; 3],
) -> Result<Dispatch> {
    let mut resources = Vec::with_capacity(binds.len());
    let mut views = Vec::new();
    let mut memory = Vec::new();
    for b in binds {
        resources.push(match b {
            Bind::Buffer(v) => {
                views.push((*v).clone());
                Some(super::buffer_binding(entry, v)?)
            }
            Bind::Texture(t) => {
                memory.push(t.held.clone());
                Some(wgpu::BindingResource::TextureView(&t.view))
            }
            Bind::Skip => None,
        });
    }
    let mut op = super::dispatch(g, shader, entry, None, dims, resources, groups, views)?;
    op._memory = memory;
    Ok(op)
}
