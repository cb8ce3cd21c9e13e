//! The texture kernel of the matmul family: both operands of C[M,N] = A·B are packed into
//! rgba32float textures (`matmul_pack4` from whole vec4 rows, else `matmul_pack`; transposing
//! when the operand is used transposed), then `matmul_tex` computes a 16×16 tile per invocation
//! from texel fetches. The textures are padded with zeros to whole tiles, so the kernel never
//! fetches out of range. Its bind groups hold textures, so its pipelines take the layout wgpu
//! derives from the shader instead of the buffer convention of [`op`](crate::kernels::op).

use wgpu::util::DeviceExt;

use super::{Mat, WG_SIDE};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::Dispatch;
use crate::memory::{Allocation, Category};
use std::sync::Arc;

/// The f32 matmul shader: the texture path holds f32 texels only.
const S: &str = "matmul";

/// Outputs per invocation along each axis (rows and columns of C); must match the shader.
const TEX_TILE: usize = 16;

/// Texture sizes (width, height) in texels of the packed A' and B' for C[M,N], K.
fn texture_sizes(m: usize, n: usize, k: usize) -> [(usize, usize); 2] {
    let kt = k.div_ceil(4);
    [
        (kt, m.next_multiple_of(TEX_TILE)),
        (n.div_ceil(4).next_multiple_of(TEX_TILE / 4), 4 * kt),
    ]
}

pub(super) fn fits(g: &Gpu, m: usize, n: usize, k: usize) -> bool {
    let max = g.limits.max_texture_dimension_2d as usize;
    texture_sizes(m, n, k)
        .iter()
        .all(|&(w, h)| w <= max && h <= max)
}

/// A pipeline whose layout wgpu derives from the shader (texture bindings do not follow the
/// buffer convention of [`op`](crate::kernels::op)), built once per device like the others.
fn auto_pipeline(
    g: &Gpu,
    entry: &'static str,
) -> Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout)> {
    let mut cache = g
        .pipelines
        .lock()
        .map_err(|_| Error::Device("pipeline cache poisoned".into()))?;
    if let Some(p) = cache.get(&(S, entry)) {
        return Ok(p.clone());
    }
    let module = g.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(S),
        source: wgpu::ShaderSource::Wgsl(crate::kernels::source(S)?.into()),
    });
    let pipe = g
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
    let bgl = pipe.get_bind_group_layout(0);
    g.check()?;
    cache.insert((S, entry), (pipe.clone(), bgl.clone()));
    Ok((pipe, bgl))
}

/// One dispatch of `entry` with `dims` at binding 0 and `resources` at bindings 1, 2, …
fn tex_op(
    g: &Gpu,
    entry: &'static str,
    dims: &[u32; 8],
    resources: &[wgpu::BindingResource],
    groups: [u32; 3],
) -> Result<Dispatch> {
    let max = g.limits.max_compute_workgroups_per_dimension;
    if groups.iter().any(|&n| n > max) {
        return Err(Error::Config(format!(
            "{entry}: dispatch {groups:?} exceeds {max} per dimension"
        )));
    }
    let (pipeline, bgl) = auto_pipeline(g, entry)?;
    let uniform = g
        .device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(entry),
            contents: bytemuck::cast_slice(dims),
            usage: wgpu::BufferUsages::UNIFORM,
        });
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: uniform.as_entire_binding(),
    }];
    for (i, r) in resources.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32 + 1,
            resource: r.clone(),
        });
    }
    let bind_group = g.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(entry),
        layout: &bgl,
        entries: &entries,
    });
    g.check()?;
    Ok(Dispatch {
        label: entry,
        pipeline,
        bind_group,
        groups,
        // the product's buffers belong to the caller; its textures to the product op
        _views: Vec::new(),
        _memory: Vec::new(),
    })
}

fn binding(v: &View) -> Result<wgpu::BindingResource<'_>> {
    if !v.offset.is_multiple_of(64) {
        return Err(Error::Config(format!(
            "matmul: view offset {} not 64-aligned",
            v.offset
        )));
    }
    Ok(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: &v.buf,
        offset: v.byte_offset(),
        size: wgpu::BufferSize::new(v.bytes().max(4)),
    }))
}

/// Packs `m` into a fresh `w × h`-texel texture (texel (x, y) = m(y, 4x .. 4x+3), zero outside);
/// its 16 bytes per texel are in the memory ledger (workspace) while the returned entry lives.
fn pack(
    g: &Gpu,
    ops: &mut Vec<Dispatch>,
    m: &Mat,
    (w, h): (usize, usize),
) -> Result<(wgpu::TextureView, Arc<Allocation>)> {
    let held = g.hold(Category::Workspace, (16 * w * h) as u64);
    let tex = g.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("matmul packed operand"),
        size: wgpu::Extent3d {
            width: w as u32,
            height: h as u32,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba32Float,
        usage: wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    });
    let view = tex.create_view(&Default::default());
    let target = wgpu::BindingResource::TextureView(&view);
    let groups = |texels: usize| texels.div_ceil(WG_SIDE) as u32;
    ops.push(if m.ld.is_multiple_of(4) && m.ld == m.sc {
        // Whole vec4 rows: four texels per invocation from four vec4 loads.
        let dims = [m.rows(), m.cols(), m.ld / 4, m.t as usize, 0, 0, 0, 0].map(|x| x as u32);
        tex_op(
            g,
            "matmul_pack4",
            &dims,
            &[target, binding(&m.v)?],
            [groups(w), groups(h / 4), 1],
        )?
    } else {
        let (rs, cs) = if m.t { (1, m.ld) } else { (m.ld, 1) };
        let dims = [m.rows(), m.cols(), rs, cs, 0, 0, 0, 0].map(|x| x as u32);
        tex_op(
            g,
            "matmul_pack",
            &dims,
            &[target, binding(&m.v)?],
            [groups(w), groups(h), 1],
        )?
    });
    Ok((view, held))
}

/// C (= or +=) A·B (+ bias) with the texture kernel: two packs and one `matmul_tex`.
pub(super) fn product(
    g: &Gpu,
    ops: &mut Vec<Dispatch>,
    c: &View,
    a: Mat,
    b: Mat,
    bias: Option<&View>,
    flags: u32,
) -> Result<()> {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    if !fits(g, m, n, k) {
        return Err(Error::Config(format!(
            "matmul: M={m}, N={n}, K={k} exceeds the texture size limit {}; use Kernel::Buffer",
            g.limits.max_texture_dimension_2d
        )));
    }
    let [sa, sb] = texture_sizes(m, n, k);
    let ((ta, held_a), (tb, held_b)) = (pack(g, ops, &a, sa)?, pack(g, ops, &b, sb)?);
    let dims = [m, n, k.div_ceil(4), 0, 0, flags as usize, 0, 0].map(|x| x as u32);
    let resources = [
        binding(c)?,
        wgpu::BindingResource::TextureView(&ta),
        wgpu::BindingResource::TextureView(&tb),
        binding(bias.unwrap_or(&a.v))?,
    ];
    let groups = |len: usize| len.div_ceil(TEX_TILE).div_ceil(WG_SIDE) as u32;
    let mut op = tex_op(
        g,
        "matmul_tex",
        &dims,
        &resources,
        [groups(n), groups(m), 1],
    )?;
    op._memory = vec![held_a, held_b];
    ops.push(op);
    Ok(())
}
