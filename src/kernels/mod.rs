//! Kernel registry and dispatch: WGSL sources (one file per op family, assembled in
//! `registry`), pipelines built once per device, and one dispatch function per op returning [`Dispatch`]s.
//!
//! An [`Dispatch`] is a pipeline + bind group + workgroup count, built once and recorded into a
//! compute pass as often as needed: a model builds its whole step as `Vec<Dispatch>` at start-up and
//! replays it every step. Binding convention in every shader: `@binding(0)` is a uniform of
//! u32/f32 dims, `@binding(1..)` are storage buffers in the order of the dispatch function's
//! arguments (outputs first, then inputs, as in the CPU twins). Each family's twin, its
//! plain-Rust specification, is in the tests' `tests/twins` (`twins::…` in the families' docs).

use wgpu::util::DeviceExt;

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

pub mod attention;
pub mod bf16;
pub mod elementwise;
pub mod encoder;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod optim;
mod registry;
mod texels;
pub use registry::SHADERS;

/// Threads per workgroup of every 1-D kernel.
pub const WG: u32 = 256;

/// One recorded op: a compute dispatch, or a copy of a buffer's rows into a texture.
#[derive(Clone)]
pub struct Dispatch {
    pub label: &'static str,
    work: Work,
    /// The views the bind group holds: their buffers stay in the memory ledger as long as the
    /// op can run (a kernel's own scratch has no other owner).
    _views: Vec<View>,
    /// Ledger entries of device memory the bind group holds that is no buffer (the texture
    /// matmul's packed operands).
    _memory: Vec<std::sync::Arc<crate::memory::Allocation>>,
}

/// What an op does on the device.
#[derive(Clone)]
enum Work {
    Compute {
        pipeline: wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        groups: [u32; 3],
    },
    /// `rows` rows of `width` texels from `buffer` at byte `offset`, `row_bytes` apart, into
    /// texel rows `y`.. of `texture` from its first column: what a pack shader would store
    /// there when the tensor's rows are its texel rows, without a shader ([`texels`]).
    Copy {
        buffer: wgpu::Buffer,
        offset: u64,
        row_bytes: u32,
        width: u32,
        rows: u32,
        y: u32,
        texture: wgpu::Texture,
    },
}

impl crate::gpu::Record for Dispatch {
    fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        if let Work::Compute {
            pipeline,
            bind_group,
            groups,
        } = &self.work
        {
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, bind_group, &[]);
            pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        }
    }
    fn is_copy(&self) -> bool {
        matches!(self.work, Work::Copy { .. })
    }
    fn copy(&self, enc: &mut wgpu::CommandEncoder) {
        let Work::Copy {
            buffer,
            offset,
            row_bytes,
            width,
            rows,
            y,
            texture,
        } = &self.work
        else {
            return;
        };
        enc.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: *offset,
                    bytes_per_row: Some(*row_bytes),
                    rows_per_image: None,
                },
            },
            wgpu::TexelCopyTextureInfo {
                texture,
                mip_level: 0,
                origin: wgpu::Origin3d { x: 0, y: *y, z: 0 },
                aspect: wgpu::TextureAspect::All,
            },
            wgpu::Extent3d {
                width: *width,
                height: *rows,
                depth_or_array_layers: 1,
            },
        );
    }
}

/// A storage argument: read-only or read-write. Must match the shader's declaration.
pub enum Arg<'a> {
    R(&'a View),
    W(&'a View),
}

impl Arg<'_> {
    fn view(&self) -> &View {
        match self {
            Arg::R(v) | Arg::W(v) => v,
        }
    }
}

/// The shader of family `base` in precision `p`: `base` itself (f32) or `base_bf16`.
pub(crate) fn shader(base: &'static str, p: Precision) -> &'static str {
    match p {
        Precision::F32 => base,
        Precision::Bf16 => SHADERS
            .iter()
            .map(|(name, _)| *name)
            .find(|name| name.strip_suffix("_bf16") == Some(base))
            .unwrap_or("(a bf16 shader not in the registry)"),
    }
}

fn source(shader: &str) -> Result<&'static str> {
    SHADERS
        .iter()
        .find(|(n, _)| *n == shader)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::Config(format!("no shader named {shader}")))
}

/// The pipeline of `shader::entry` and its bind group layout, built once per device: the layout
/// of the buffer convention for `args` (a uniform, then one storage buffer per argument), or,
/// for `None`, the layout wgpu derives from the shader (texture bindings do not follow it).
fn pipeline(
    gpu: &Gpu,
    shader: &'static str,
    entry: &'static str,
    args: Option<&[Arg]>,
) -> Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout)> {
    let mut cache = gpu
        .pipelines
        .lock()
        .map_err(|_| Error::Device("pipeline cache poisoned".into()))?;
    if let Some(p) = cache.get(&(shader, entry)) {
        return Ok(p.clone());
    }
    let dev = &gpu.device;
    let layout = args.map(|args| {
        let entry_of = |binding: u32, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let mut entries = vec![entry_of(0, wgpu::BufferBindingType::Uniform)];
        for (i, a) in args.iter().enumerate() {
            let read_only = matches!(a, Arg::R(_));
            entries.push(entry_of(
                i as u32 + 1,
                wgpu::BufferBindingType::Storage { read_only },
            ));
        }
        let bgl = dev.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(entry),
            entries: &entries,
        });
        let layout = dev.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(entry),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        (bgl, layout)
    });
    let module = module(dev, shader)?;
    let pipe = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: layout.as_ref().map(|(_, l)| l),
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    });
    let bgl = match layout {
        Some((bgl, _)) => bgl,
        None => pipe.get_bind_group_layout(0),
    };
    gpu.check()?;
    cache.insert((shader, entry), (pipe.clone(), bgl.clone()));
    Ok((pipe, bgl))
}

/// The module of `shader`, with wgpu's runtime checks (bounds checks and loop bounding). Trusted
/// modules without them measured no faster on lavapipe (docs/kernels.md), so every kernel keeps
/// them.
pub(crate) fn module(dev: &wgpu::Device, shader: &'static str) -> Result<wgpu::ShaderModule> {
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(shader),
        source: wgpu::ShaderSource::Wgsl(source(shader)?.into()),
    };
    Ok(dev.create_shader_module(desc))
}

/// Builds one dispatch of `shader::entry` over `args` with `dims` as its uniform
/// (u32 words; pass f32 values with `f32::to_bits`).
pub fn op(
    gpu: &Gpu,
    shader: &'static str,
    entry: &'static str,
    dims: &[u32],
    args: &[Arg],
    groups: [u32; 3],
) -> Result<Dispatch> {
    let resources = args
        .iter()
        .map(|a| buffer_binding(entry, a.view()).map(Some))
        .collect::<Result<Vec<_>>>()?;
    let views = args.iter().map(|a| a.view().clone()).collect();
    dispatch(
        gpu,
        shader,
        entry,
        Some(args),
        dims,
        resources,
        groups,
        views,
    )
}

/// A storage binding of the whole of `v`, whose offset must be 64-aligned (the adapters' storage
/// offset alignment); `what` names the kernel in the error.
pub(crate) fn buffer_binding<'a>(what: &str, v: &'a View) -> Result<wgpu::BindingResource<'a>> {
    if !v.offset.is_multiple_of(64) {
        return Err(Error::Config(format!(
            "{what}: view offset {} not 64-aligned",
            v.offset
        )));
    }
    Ok(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: &v.buf,
        offset: v.byte_offset(),
        size: wgpu::BufferSize::new(v.bytes().max(4)),
    }))
}

/// One dispatch of `shader::entry`: `dims` (u32 words, padded to whole vec4s) at binding 0 and
/// `resources` at bindings 1, 2, … (a `None` leaves its binding out: one the entry does not
/// use), on the layout of [`pipeline`] for `args`; `views` are the buffers it keeps alive.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch(
    gpu: &Gpu,
    shader: &'static str,
    entry: &'static str,
    args: Option<&[Arg]>,
    dims: &[u32],
    resources: Vec<Option<wgpu::BindingResource>>,
    groups: [u32; 3],
    views: Vec<View>,
) -> Result<Dispatch> {
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    if groups.iter().any(|&g| g > max) {
        return Err(Error::Config(format!(
            "{entry}: dispatch {groups:?} exceeds {max} per dimension"
        )));
    }
    let (pipeline, bgl) = pipeline(gpu, shader, entry, args)?;
    let mut words = dims.to_vec();
    words.resize(dims.len().next_multiple_of(4).max(4), 0);
    let uniform = gpu
        .device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(entry),
            contents: bytemuck::cast_slice(&words),
            usage: wgpu::BufferUsages::UNIFORM,
        });
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: uniform.as_entire_binding(),
    }];
    for (i, resource) in resources.into_iter().enumerate() {
        if let Some(resource) = resource {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource,
            });
        }
    }
    let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(entry),
        layout: &bgl,
        entries: &entries,
    });
    gpu.check()?;
    Ok(Dispatch {
        label: entry,
        work: Work::Compute {
            pipeline,
            bind_group,
            groups,
        },
        _views: views,
        _memory: Vec::new(),
    })
}

/// Workgroups for `n` threads of a 1-D kernel of `WG` threads, folded into y past 65535.
/// Shaders recover the index as `gid.x + gid.y * nwg.x * WG` and bounds-check it.
pub fn groups_1d(n: usize) -> [u32; 3] {
    let g = (n as u32).div_ceil(WG).max(1);
    if g <= 65535 {
        [g, 1, 1]
    } else {
        [65535, g.div_ceil(65535), 1]
    }
}

/// Checks that `v` holds at least `need` elements, naming the argument.
pub fn need(name: &str, v: &View, need: usize) -> Result<()> {
    if v.len < need {
        return Err(Error::Config(format!(
            "{name}: view has {} elements, kernel needs {need}",
            v.len
        )));
    }
    Ok(())
}

/// Checks that packed `v` holds at least `words` u32 words, naming the operand.
pub(crate) fn need_words(name: &str, v: &View, words: usize) -> Result<()> {
    if v.len < words {
        return Err(Error::Config(format!(
            "{name}: view has {} u32 words, kernel needs {words} (bf16 pairs)",
            v.len
        )));
    }
    Ok(())
}

/// Checks that `v` holds `words` u32 words of precision `p` (f32 elements, or bf16 pairs),
/// naming the operand.
pub(crate) fn need_in(p: Precision, name: &str, v: &View, words: usize) -> Result<()> {
    match p {
        Precision::F32 => need(name, v, words),
        Precision::Bf16 => need_words(name, v, words),
    }
}

/// Refuses an odd row length `c`: a row would end inside a word shared with the next row.
pub(crate) fn even_rows(family: &str, what: &str, c: usize) -> Result<()> {
    if !c.is_multiple_of(2) {
        return Err(Error::Config(format!(
            "{family} bf16: {what} = {c} must be even (each invocation writes whole bf16 pairs)"
        )));
    }
    Ok(())
}
