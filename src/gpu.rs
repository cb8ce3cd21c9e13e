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

use crate::error::{Error, Result};
use crate::memory::{Allocation, Category, MemoryLedger, Usage};

mod adapter;
mod readback;
mod timer;
mod transfer;
mod view;
pub use adapter::{
    backends_from_env, find_adapter, list_adapters, parse_backends, AdapterChoice,
    AdapterDescription,
};
pub use timer::{Counts, Tally};
pub use view::{Buffer, View};

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
