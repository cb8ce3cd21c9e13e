//! Which adapter to open: backends from flags or `WGPU_BACKEND`, the adapters found, and the
//! one a choice selects.

use crate::error::{Error, Result};

/// Which adapter to open. `backends = None` reads `WGPU_BACKEND` (default: all backends).
#[derive(Clone, Debug, Default)]
pub struct AdapterChoice {
    pub backends: Option<wgpu::Backends>,
    /// Prefer the CPU (software) adapter: lavapipe on Vulkan, llvmpipe on GL.
    pub software: bool,
    /// Pick the i-th adapter of [`list_adapters`] instead of asking wgpu for one.
    pub index: Option<usize>,
}

impl AdapterChoice {
    /// The software adapter on the backend named by `WGPU_BACKEND` (what tests use).
    pub fn software() -> Result<Self> {
        Ok(Self {
            backends: backends_from_env()?,
            software: true,
            index: None,
        })
    }
    /// From command-line flags: `--backend NAME` (else `WGPU_BACKEND`), `--adapter INDEX`,
    /// `--software` (prefer the CPU adapter).
    pub fn from_flags(backend: Option<&str>, index: Option<usize>, software: bool) -> Result<Self> {
        let backends = match backend {
            Some(b) => Some(parse_backends(b)?),
            None => backends_from_env()?,
        };
        Ok(Self {
            backends,
            software,
            index,
        })
    }
    /// Any adapter on the backend named by `WGPU_BACKEND`, highest performance first.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            backends: backends_from_env()?,
            software: false,
            index: None,
        })
    }
}

/// Parses a backend name strictly (wgpu itself ignores unknown names with a log line).
pub fn parse_backends(name: &str) -> Result<wgpu::Backends> {
    let mut out = wgpu::Backends::empty();
    for part in name.split(',') {
        out |= match part.trim().to_lowercase().as_str() {
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "gl" | "gles" | "opengl" => wgpu::Backends::GL,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "all" => wgpu::Backends::all(),
            _ => return Err(Error::UnknownBackend(name.to_string())),
        };
    }
    Ok(out)
}

/// `WGPU_BACKEND`, parsed strictly; `None` when unset or empty.
pub fn backends_from_env() -> Result<Option<wgpu::Backends>> {
    match std::env::var("WGPU_BACKEND") {
        Ok(v) if !v.trim().is_empty() => parse_backends(&v).map(Some),
        _ => Ok(None),
    }
}

fn instance(backends: Option<wgpu::Backends>) -> wgpu::Instance {
    crate::runtime_dir::ensure();
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends.unwrap_or(wgpu::Backends::all());
    wgpu::Instance::new(desc)
}

/// What a user needs to know about one adapter to choose it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterDescription {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub timestamps: bool,
    pub shader_f16: bool,
    pub subgroups: bool,
    pub subgroup_size: (u32, u32),
    pub max_storage_binding: u64,
    pub max_buffer: u64,
    pub max_workgroup_invocations: u32,
}

fn describe(index: usize, a: &wgpu::Adapter) -> AdapterDescription {
    let info = a.get_info();
    let f = a.features();
    let l = a.limits();
    AdapterDescription {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver,
        driver_info: info.driver_info,
        timestamps: f.contains(wgpu::Features::TIMESTAMP_QUERY),
        shader_f16: f.contains(wgpu::Features::SHADER_F16),
        subgroups: f.contains(wgpu::Features::SUBGROUP),
        subgroup_size: (info.subgroup_min_size, info.subgroup_max_size),
        max_storage_binding: l.max_storage_buffer_binding_size,
        max_buffer: l.max_buffer_size,
        max_workgroup_invocations: l.max_compute_invocations_per_workgroup,
    }
}

fn enumerate(backends: Option<wgpu::Backends>) -> Vec<wgpu::Adapter> {
    let inst = instance(backends);
    pollster::block_on(inst.enumerate_adapters(backends.unwrap_or(wgpu::Backends::all())))
}

/// Every adapter on every backend (or on `backends`), in wgpu's order.
pub fn list_adapters(backends: Option<wgpu::Backends>) -> Vec<AdapterDescription> {
    enumerate(backends)
        .iter()
        .enumerate()
        .map(|(i, a)| describe(i, a))
        .collect()
}

/// Finds the adapter for `choice`.
pub fn find_adapter(choice: &AdapterChoice) -> Result<wgpu::Adapter> {
    let backends = match choice.backends {
        Some(b) => Some(b),
        None => backends_from_env()?,
    };
    let which = match backends {
        Some(b) => format!(" on backend(s) {b:?}"),
        None => String::new(),
    };
    if let Some(i) = choice.index {
        let all = enumerate(backends);
        let n = all.len();
        return all.into_iter().nth(i).ok_or_else(|| {
            Error::NoAdapter(format!(" with index {i}{which} ({n} adapter(s) present)"))
        });
    }
    let inst = instance(backends);
    let opts = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: choice.software,
        ..Default::default()
    };
    match pollster::block_on(inst.request_adapter(&opts)) {
        Ok(a) => Ok(a),
        // Some drivers hide the CPU adapter from `force_fallback_adapter`; take any CPU-typed one.
        Err(e) => {
            pollster::block_on(inst.enumerate_adapters(backends.unwrap_or(wgpu::Backends::all())))
                .into_iter()
                .find(|a| !choice.software || a.get_info().device_type == wgpu::DeviceType::Cpu)
                .ok_or_else(|| Error::NoAdapter(format!("{which} ({e})")))
        }
    }
}
