//! # triaxis
//!
//! A portable multi-device GPT trainer on wgpu that measures what each split of the work costs.
//!
//! ```text
//! gpu          adapters, virtual devices (several wgpu::Device on one adapter), transfers, timers
//! runtime_dir  a private XDG_RUNTIME_DIR before the first wgpu instance (lavapipe's warning)
//! kernels      WGSL op families (shaders/*.wgsl) → pipelines built once → Op = dispatch, replayed
//! cpu          the plain-Rust twin of every kernel: the specification the GPU is tested against
//! params       one flat buffer per device for params / grads / Adam moments, named (offset, len)
//! memory       the memory ledger: every buffer by category, current and peak per device
//! model        GPT config and blocks (embedding, transformer blocks, head + loss), each with an
//!              explicit forward/backward pair; a stage owns any contiguous range of blocks
//! optim        layout-invariant global-norm clipping + AdamW over whole buffers or shards
//! step         what every runner shares: TrainConfig, StepStats, ModelState, the checksum
//! train        the one-device reference step the runtime is tested against; evaluation, generation
//! data         built-in addition corpus and byte-level text files; seeded batches; version
//! link         the link model (bandwidth, latency, presets) every clock and cost uses
//! collective   host-staged ring / tree / naive collectives over devices, and their ledger
//! comm         the Communicator: one rank's handle on a group (in-process, loopback double,
//!              MPI behind feature `mpi`); launcher detection
//! parallel     what the axes are made of: buckets, ZeRO's shard grid, the block chain, the
//!              Megatron split, pairwise-tree accumulation (the runtime runs them)
//! pipeline     schedules as data, validator, simulators, partition, theory (bubble, held
//!              microbatches), step events, timeline
//! mesh         a dp × tp × pp layout: validation with alternatives, rank ↔ coordinates
//! runtime      every layout lowered to per-device op lists, checked, run by one worker each;
//!              the fault hooks every fault test goes through
//! engine       one entry point for every layout: placement, steps, per-axis costs, state
//! session      a run: data cursor, checkpoints every N steps, resume under any layout
//! checkpoint   params + Adam moments + step + data cursor in one safetensors file, atomically
//! record       the run record: config, adapter, shader hashes, dataset, losses, how it stopped
//! interrupt    graceful stop on SIGINT / SIGTERM
//! cost         the analytic cost model, ZeRO's figures, the planner (and its validation)
//! flags        checks of command-line values and paths shared by the examples
//! plot         SVG charts; progress  the examples' progress bars; rng  the seeded generator
//! error        the one error type
//! ```
//!
//! Parameter gradients accumulate (`+=`) and activation gradients assign (`=`), so gradient
//! accumulation over microbatches costs nothing extra. The CPU twin of the whole model
//! (`model::cpu`) replays the same arithmetic on the host for tests.

pub mod checkpoint;
pub mod collective;
pub mod comm;
pub mod cost;
pub mod cpu;
pub mod data;
pub mod engine;
pub mod error;
pub mod gpu;
pub mod interrupt;
pub mod kernels;
pub mod link;
pub mod memory;
pub mod mesh;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod params;
pub mod pipeline;
pub mod record;
pub mod rng;
pub mod runtime;
pub mod runtime_dir;
pub mod session;
pub mod step;
pub mod train;

pub use error::{Error, Result};
pub use gpu::{Gpu, View};
