//! Adapters, virtual devices, buffers and transfers: the `Gpu` handle every other module uses.
//!
//! One `Gpu` is one `wgpu::Device` + `Queue` on some adapter. Several `Gpu`s can be opened on the
//! same adapter ("virtual devices"); each can be driven from its own thread. Transfers go through
//! mapped staging buffers, because GL's `queue.write_buffer` is slow (~1 GB/s); their copies, and
//! device-to-device copies, are recorded and go to the queue at the head of the next submit, so
//! a step's uploads cost no submit of their own. Device errors are captured by a handler and
//! surfaced by [`Gpu::check`] as [`Error::Device`], never as a panic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::memory::{Allocation, Category, MemoryLedger, Usage};

mod readback;
mod timer;
pub use timer::{Counts, Tally};

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

/// Something a pass records: one dispatch with its pipeline and bindings, or a copy that runs
/// on the encoder between compute passes (the kernels' `Dispatch`). The device runs a list of
/// them as one pass.
pub trait Record {
    /// Records a dispatch into `pass` (nothing when the op is a copy).
    fn record(&self, pass: &mut wgpu::ComputePass<'_>);
    /// Whether the op is a copy, which [`Record::copy`] records on the encoder.
    fn is_copy(&self) -> bool {
        false
    }
    /// Records a copy on `enc` (nothing when the op is a dispatch).
    fn copy(&self, _enc: &mut wgpu::CommandEncoder) {}
}

/// Compute pipelines of one device by (shader, entry point), with their bind group layout.
pub(crate) type Pipelines =
    Mutex<HashMap<(&'static str, &'static str), (wgpu::ComputePipeline, wgpu::BindGroupLayout)>>;

/// Textures of one device that kernels share, by (format, height in texels, place): the flat
/// copies of `kernels::texels`, each with its bytes in the memory ledger.
pub(crate) type TexturePool =
    Mutex<HashMap<(wgpu::TextureFormat, usize, usize), (wgpu::Texture, Arc<Allocation>)>>;

/// One device on one adapter, plus what the kernels need to know about it.
#[derive(Clone)]
pub struct Gpu {
    pub device: wgpu::Device,
    /// The device's queue. Work submitted here directly runs before the copies still pending
    /// from [`Gpu::upload`] / [`Gpu::copy`]; call [`Gpu::sync`] first to keep program order.
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub features: wgpu::Features,
    pub limits: wgpu::Limits,
    /// Label of this virtual device ("dev0", …), used in errors and timelines.
    pub label: String,
    errors: Arc<Mutex<Vec<String>>>,
    /// The pass timer of [`Gpu::run_stamped`] (shared by every clone).
    timer: Arc<Mutex<timer::Timer>>,
    /// Queue submits, host waits and dispatches (shared by every clone).
    counts: Arc<Counts>,
    /// Compute pipelines of this device, built on first use and kept (shared by every clone).
    pub(crate) pipelines: Arc<Pipelines>,
    /// Textures the kernels' flat copies share (shared by every clone).
    pub(crate) textures: Arc<TexturePool>,
    /// Bytes allocated on this device, by category (shared by every clone).
    memory: Arc<MemoryLedger>,
    /// Shaders may write rg32uint storage textures (the matmul's packed bf16 texels).
    word_textures: bool,
    /// Copies recorded by [`Gpu::upload`] and [`Gpu::copy`] and not yet submitted: they go to
    /// the queue first in the next submit (or [`Gpu::sync`]), so they run in program order
    /// without a submit of their own (shared by every clone).
    pending: Arc<Mutex<Option<wgpu::CommandEncoder>>>,
    /// The staging buffer downloads reuse (shared by every clone).
    readback: Arc<readback::Readback>,
    /// Kernels built from now on read their row tensors through texture copies (CPU adapters
    /// only; see [`Gpu::set_texture_reads`]; shared by every clone).
    texture_reads: Arc<std::sync::atomic::AtomicBool>,
}

impl Gpu {
    /// Opens one device on the adapter `choice` selects.
    pub fn open(choice: &AdapterChoice) -> Result<Gpu> {
        let adapter = find_adapter(choice)?;
        Gpu::on_adapter(&adapter, "dev0")
    }

    /// Opens `n` virtual devices on one adapter; each may be moved to its own thread.
    pub fn open_virtual(choice: &AdapterChoice, n: usize) -> Result<Vec<Gpu>> {
        if n == 0 {
            return Err(Error::Config("at least one device is needed".into()));
        }
        let adapter = find_adapter(choice)?;
        (0..n)
            .map(|i| Gpu::on_adapter(&adapter, &format!("dev{i}")))
            .collect()
    }

    /// Opens a device on `adapter` with the adapter's own limits (2 GiB buffers on Mesa,
    /// instead of the 128 MiB default binding) and timestamp queries and subgroups where
    /// available.
    pub fn on_adapter(adapter: &wgpu::Adapter, label: &str) -> Result<Gpu> {
        let want = wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
            | wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP;
        let features = adapter.features() & want;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some(label),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::Device(format!("{label}: request_device failed: {e}")))?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        Ok(Gpu {
            pipelines: Arc::default(),
            textures: Arc::default(),
            device,
            queue,
            info: adapter.get_info(),
            features,
            limits,
            label: label.to_string(),
            errors,
            timer: Arc::default(),
            counts: Arc::default(),
            memory: MemoryLedger::new(),
            word_textures: adapter
                .get_texture_format_features(wgpu::TextureFormat::Rg32Uint)
                .allowed_usages
                .contains(wgpu::TextureUsages::STORAGE_BINDING),
            pending: Arc::default(),
            readback: Arc::default(),
            texture_reads: Arc::new(std::sync::atomic::AtomicBool::new(
                adapter.get_info().device_type == wgpu::DeviceType::Cpu,
            )),
        })
    }

    /// Whether kernels built now read their row tensors (activations, their gradients, the
    /// layernorm parameters) from texture copies of them instead of storage buffers. On by
    /// default on CPU adapters, where a storage load per lane is a loop over the lanes and a
    /// texel fetch one gather (docs/kernels.md); off, and not settable, elsewhere. The bits are
    /// the same either way.
    pub fn texture_reads(&self) -> bool {
        self.texture_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns [`Gpu::texture_reads`] on or off for the kernels built from now on (every clone
    /// of this device); on is refused (`Error::Config`) where the adapter is not a CPU one.
    pub fn set_texture_reads(&self, on: bool) -> Result<()> {
        if on && self.info.device_type != wgpu::DeviceType::Cpu {
            return Err(Error::Config(format!(
                "{}: texture reads are for CPU adapters; {} is a {:?} one",
                self.label,
                self.adapter_name(),
                self.info.device_type
            )));
        }
        self.texture_reads
            .store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Whether shaders may write rg32uint storage textures: where they may, a product of two
    /// bf16 operands takes them as packed bf16 texels (half the bytes of f32 ones).
    pub fn has_word_textures(&self) -> bool {
        self.word_textures
    }

    /// "llvmpipe (LLVM 15.0.6, 256 bits) / Vulkan"
    pub fn adapter_name(&self) -> String {
        format!("{} / {:?}", self.info.name, self.info.backend)
    }

    pub fn has_timestamps(&self) -> bool {
        self.features.contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// The subgroup size, where the device has subgroup operations and the adapter promises one
    /// size (its minimum and maximum agree); `None` otherwise. Kernels written for a fixed lane
    /// count run only where this is their count.
    pub fn subgroup_lanes(&self) -> Option<u32> {
        let (lo, hi) = (self.info.subgroup_min_size, self.info.subgroup_max_size);
        (self.features.contains(wgpu::Features::SUBGROUP) && lo == hi && lo > 0).then_some(lo)
    }

    /// Returns the first device error recorded since the last call, as an `Error`.
    pub fn check(&self) -> Result<()> {
        let mut v = self
            .errors
            .lock()
            .map_err(|_| Error::Device("error sink poisoned".into()))?;
        if v.is_empty() {
            return Ok(());
        }
        let msg = v.join("; ");
        v.clear();
        Err(Error::Device(format!("{}: {msg}", self.label)))
    }

    /// Queue submits, host waits and compute dispatches of this device so far.
    pub fn counts(&self) -> Tally {
        self.counts.read()
    }

    /// Blocks until all submitted work is done (pending copies submitted first).
    pub fn sync(&self) -> Result<()> {
        self.submit_after_pending(None, 0)?;
        self.counts.wait();
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Device(format!("{}: poll: {e}", self.label)))?;
        self.check()
    }

    /// A storage buffer of `len` 4-byte elements (f32 or u32), zero-initialised, counted as
    /// activations in the memory ledger (see [`Gpu::buffer_in`]).
    pub fn buffer(&self, label: &str, len: usize) -> View {
        self.buffer_in(Category::Activations, label, len)
    }

    /// A storage buffer like [`Gpu::buffer`] counted as workspace: scratch used within one pass.
    pub fn scratch(&self, label: &str, len: usize) -> View {
        self.buffer_in(Category::Workspace, label, len)
    }

    /// A storage buffer like [`Gpu::buffer`], recorded in the memory ledger under `category`
    /// until the last view of it drops.
    pub fn buffer_in(&self, category: Category, label: &str, len: usize) -> View {
        let size = ((len.max(1) * 4) as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        let raw = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        View {
            buf: Buffer {
                raw,
                alloc: Some(Arc::new(Allocation::new(&self.memory, category, size))),
            },
            offset: 0,
            len,
        }
    }

    /// Records `bytes` of device memory that is no buffer (a texture) in the ledger under
    /// `category` until the returned entry drops.
    pub fn hold(&self, category: Category, bytes: u64) -> Arc<Allocation> {
        Arc::new(Allocation::new(&self.memory, category, bytes))
    }

    /// Current and peak bytes of this device by category.
    pub fn memory(&self) -> Usage {
        self.memory.usage(&self.label)
    }

    /// Starts a new peak window of the memory ledger (peaks := current).
    pub fn reset_memory_peaks(&self) {
        self.memory.reset_peaks()
    }

    /// Copies `data` into `dst` through a mapped staging buffer (fast on GL too). The copy is
    /// recorded, not submitted: it runs first in the device's next submit, after everything
    /// submitted before it and before everything submitted after.
    pub fn upload<T: bytemuck::Pod>(&self, dst: &View, data: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 != dst.bytes() {
            return Err(Error::Config(format!(
                "upload of {} bytes into a view of {} bytes",
                bytes.len(),
                dst.bytes()
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let _staged = Allocation::new(&self.memory, Category::Staging, bytes.len() as u64);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("upload"),
            size: bytes.len() as u64,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        staging
            .slice(..)
            .get_mapped_range_mut()
            .map_err(|e| Error::Device(format!("{}: map for upload: {e}", self.label)))?
            .copy_from_slice(bytes);
        staging.unmap();
        self.record_copy(|enc| {
            enc.copy_buffer_to_buffer(&staging, 0, &dst.buf, dst.byte_offset(), dst.bytes())
        })?;
        self.check()
    }

    /// Records a copy into the pending encoder (opened if there is none).
    fn record_copy(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<()> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Device("pending copies poisoned".into()))?;
        let enc = pending.get_or_insert_with(|| {
            self.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("copies"),
                })
        });
        f(enc);
        Ok(())
    }

    /// Submits the pending copies, then `enc` if given (holding `dispatches` compute
    /// dispatches), as one queue submit; nothing when there is neither. The pending lock is
    /// held through the submit, so clones submitting at once keep each copy ahead of every
    /// submit recorded after it.
    fn submit_after_pending(
        &self,
        enc: Option<wgpu::CommandEncoder>,
        dispatches: usize,
    ) -> Result<()> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Device("pending copies poisoned".into()))?;
        let buffers: Vec<wgpu::CommandBuffer> = pending
            .take()
            .into_iter()
            .chain(enc)
            .map(wgpu::CommandEncoder::finish)
            .collect();
        if !buffers.is_empty() {
            self.queue.submit(buffers);
            self.counts.submit(dispatches);
        }
        Ok(())
    }

    /// Submits `enc` (holding `dispatches` compute dispatches) after the pending copies, as
    /// one queue submit.
    fn submit(&self, enc: wgpu::CommandEncoder, dispatches: usize) -> Result<()> {
        self.submit_after_pending(Some(enc), dispatches)
    }

    /// Reads `src` back to the host (waits for all work submitted before).
    pub fn download<T: bytemuck::Pod>(&self, src: &View) -> Result<Vec<T>> {
        Ok(self.download_many(&[src])?.pop().unwrap_or_default())
    }

    /// Reads several views back with one submit and one wait (each after all work submitted
    /// before): one vector per view, in order.
    pub fn download_many<T: bytemuck::Pod>(&self, views: &[&View]) -> Result<Vec<Vec<T>>> {
        let size: u64 = views.iter().map(|v| v.bytes()).sum();
        if size == 0 {
            return Ok(views.iter().map(|_| Vec::new()).collect());
        }
        let staging = self.readback.lend(&self.device, &self.memory, size);
        let mut enc = self.device.create_command_encoder(&Default::default());
        let mut at = 0;
        for v in views {
            enc.copy_buffer_to_buffer(&v.buf, v.byte_offset(), &staging.buf, at, v.bytes());
            at += v.bytes();
        }
        let all: Vec<T> = self.read_after(enc, &staging.buf, size, "readback")?;
        // kept only after a clean read (unmapped): a failed one drops its buffer
        self.readback.keep(staging);
        let mut out = Vec::with_capacity(views.len());
        let mut rest = &all[..];
        for v in views {
            let (head, tail) = rest.split_at(v.bytes() as usize / std::mem::size_of::<T>());
            out.push(head.to_vec());
            rest = tail;
        }
        Ok(out)
    }

    /// Copies `src` into `dst` (the same size) on the device, in program order (recorded like
    /// an upload's copy, run first in the next submit); no wait.
    pub fn copy(&self, src: &View, dst: &View) -> Result<()> {
        if src.bytes() != dst.bytes() {
            return Err(Error::Config(format!(
                "copy of {} bytes into a view of {} bytes",
                src.bytes(),
                dst.bytes()
            )));
        }
        self.record_copy(|enc| {
            enc.copy_buffer_to_buffer(
                &src.buf,
                src.byte_offset(),
                &dst.buf,
                dst.byte_offset(),
                src.bytes(),
            )
        })?;
        self.check()
    }

    /// Submits `enc` (which fills `buf`'s first `bytes`), waits for it, and reads them back.
    fn read_after<T: bytemuck::Pod>(
        &self,
        enc: wgpu::CommandEncoder,
        buf: &wgpu::Buffer,
        bytes: u64,
        what: &str,
    ) -> Result<Vec<T>> {
        self.submit(enc, 0)?;
        let (tx, rx) = std::sync::mpsc::channel();
        buf.slice(..bytes).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.sync()?;
        rx.recv_timeout(Duration::from_secs(60))
            .map_err(|_| Error::Device(format!("{}: {what} never completed", self.label)))?
            .map_err(|e| Error::Device(format!("{}: map failed: {e}", self.label)))?;
        let out = {
            let view = buf
                .slice(..bytes)
                .get_mapped_range()
                .map_err(|e| Error::Device(format!("{}: mapped range: {e}", self.label)))?;
            bytemuck::cast_slice::<u8, T>(&view).to_vec()
        };
        buf.unmap();
        Ok(out)
    }

    /// Records `ops` into one compute pass and submits it (does not wait).
    pub fn run(&self, ops: &[impl Record]) -> Result<()> {
        self.submit_pass(ops, None)
    }

    /// One pass of `ops`, with `stamps` written at its start and end if given; submitted, not
    /// waited on. Dispatches between copies share one compute pass; a copy runs on the encoder
    /// between two (`Record::copy`), so a pass of n copies is n + 1 compute passes at most, the
    /// first carrying the start stamp and the last the end stamp (empty ones where the pass
    /// starts or ends with a copy).
    fn submit_pass(
        &self,
        ops: &[impl Record],
        stamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some(&self.label),
            });
        // the dispatches between copies, one compute pass each (segment i of last + 1); copy i
        // follows segment i
        let last = ops.iter().filter(|op| op.is_copy()).count();
        let mut copies = ops.iter().filter(|op| op.is_copy());
        for (i, segment) in ops.split(|op| op.is_copy()).enumerate() {
            let writes = stamps.as_ref().and_then(|s| {
                let begin = s.beginning_of_pass_write_index.filter(|_| i == 0);
                let end = s.end_of_pass_write_index.filter(|_| i == last);
                (begin.is_some() || end.is_some()).then_some(wgpu::ComputePassTimestampWrites {
                    query_set: s.query_set,
                    beginning_of_pass_write_index: begin,
                    end_of_pass_write_index: end,
                })
            });
            if !segment.is_empty() || writes.is_some() {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("ops"),
                    timestamp_writes: writes,
                });
                for op in segment {
                    op.record(&mut pass);
                }
            }
            if let Some(copy) = copies.next() {
                copy.copy(&mut enc);
            }
        }
        self.submit(enc, ops.len() - last)?;
        self.check()
    }

    fn buffer_with_usage(&self, label: &str, bytes: u64, extra: wgpu::BufferUsages) -> View {
        let raw = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: extra | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        View {
            buf: Buffer {
                raw,
                alloc: Some(Arc::new(Allocation::new(
                    &self.memory,
                    Category::Staging,
                    bytes,
                ))),
            },
            offset: 0,
            len: (bytes / 4) as usize,
        }
    }
}

/// A range of 4-byte elements inside a buffer: `(offset, len)` in elements.
/// Views bound to kernels start at multiples of 64 elements (256 bytes, the largest storage
/// offset alignment WebGPU allows), which [`crate::params`] guarantees for its layouts.
#[derive(Clone, Debug)]
pub struct View {
    pub buf: Buffer,
    pub offset: usize,
    pub len: usize,
}

/// A wgpu buffer with its memory-ledger record: derefs to `wgpu::Buffer`; when the last clone
/// drops, the ledger records the release.
#[derive(Clone, Debug)]
pub struct Buffer {
    raw: wgpu::Buffer,
    alloc: Option<Arc<Allocation>>,
}

impl Buffer {
    /// The ledger category this buffer is counted in, if any.
    pub fn category(&self) -> Option<Category> {
        self.alloc.as_ref().map(|a| a.category)
    }
}

impl std::ops::Deref for Buffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.raw
    }
}

impl View {
    pub fn byte_offset(&self) -> u64 {
        (self.offset * 4) as u64
    }
    pub fn bytes(&self) -> u64 {
        (self.len * 4) as u64
    }
    /// The sub-range `[start, start + len)` of this view.
    pub fn slice(&self, start: usize, len: usize) -> View {
        assert!(start + len <= self.len, "view slice out of range");
        View {
            buf: self.buf.clone(),
            offset: self.offset + start,
            len,
        }
    }
}

/// Opens the software adapter for a test. Without one: fails loudly under `CI`, otherwise prints
/// a skip line and returns `None`.
pub fn test_gpu() -> Option<Gpu> {
    test_gpus(1).map(|mut v| v.remove(0))
}

/// `n` virtual devices on the software adapter, for tests (same policy as [`test_gpu`]).
pub fn test_gpus(n: usize) -> Option<Vec<Gpu>> {
    let opened = AdapterChoice::software().and_then(|c| Gpu::open_virtual(&c, n));
    match opened {
        Ok(g) => Some(g),
        Err(e) if std::env::var_os("CI").is_some() => panic!("CI has no usable GPU adapter: {e}"),
        Err(e) => {
            eprintln!("SKIP: no GPU adapter ({e}); GPU test skipped");
            None
        }
    }
}
