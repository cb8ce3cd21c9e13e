//! # triaxis
//!
//! A portable multi-device GPT trainer on wgpu that measures what each split of the work costs.
//!
//! ## The path of one step
//!
//! ```text
//! Session::step_once    src/session.rs         batches from the data cursor; checkpoint every N
//!  └ Engine::step       src/engine.rs          the layout's one runtime; per-axis StepCosts
//!    └ Runtime::step    src/runtime/exec.rs    each worker handed to its own persistent thread
//!      │                                       (runtime/crew.rs) with its replica's
//!      │                                       microbatches; the first failure is the error
//!      └ Worker::exec   src/runtime/worker.rs  its device's program (src/runtime/ir.rs), op by
//!        │                                     op: compute, or download → communicator → upload
//!        └ dispatch     src/kernels/           kernels::Dispatch: one recorded wgpu dispatch of a
//!                                              WGSL pipeline built once (shaders/*.wgsl)
//! ```
//!
//! Where to start reading: [`session`] (what a program embedding triaxis drives), then
//! [`engine`] and [`mesh`] (a layout and its validation), [`runtime`] (how a layout is lowered
//! to per-device op lists and run), [`kernels`] (the arithmetic; each kernel's plain-Rust twin, its specification, is in the
//! tests' `tests/twins`), and
//! [`record`] (the run record as data). The command-line programs (flags, progress bars, SVG
//! charts) live in `examples/`, their shared parts in `examples/support/`.
//!
//! ## Modules
//!
//! ```text
//! checkpoint   params + Adam moments + step + data cursor in one safetensors file, atomically
//! collective   host-staged ring / tree / naive collectives over devices, and their ledger
//! comm         the Communicator: one rank's handle on a group (in-process, loopback, MPI)
//! cost         the analytic cost model, ZeRO's figures, the planner and its checks (no device work)
//! cpu          bf16 packing on the host (as the kernels store it); AdamW's hyper-parameters
//! data         built-in addition corpus and byte-level text files; seeded batches; version
//! engine       one entry point for every layout: placement, steps, per-axis costs, state
//! error        the one error type
//! eval         forward-only evaluation of a whole model: validation loss, generation, accuracy
//! gpu          adapters, virtual devices (several wgpu::Device on one adapter), transfers
//! kernels      WGSL op families → pipelines built once → a Dispatch each, replayed
//! link         the link model (bandwidth, latency, presets) every clock and cost uses
//! measure      each block's measured time (pipeline balance by time); the median
//! memory       the memory ledger: every buffer by category, current and peak per device
//! mesh         a dp × tp × pp layout: validation with alternatives, rank ↔ coordinates
//! model        GPT config and blocks, each an explicit forward/backward pair; stages of blocks
//! optim        layout-invariant global-norm clipping + AdamW over whole buffers or shards
//! parallel     the axes' parts: buckets, ZeRO's shard grid, block chain, Megatron split
//! params       one flat buffer per device for params / grads / Adam moments, named ranges
//! pipeline     schedules as data, validator, unit-cost simulator, partition, theory
//! record       the run record: config, adapter, shader hashes, dataset, losses, how it stopped
//! rng          the seeded generator
//! runtime      every layout lowered to per-device op lists, checked, run by one worker each
//! runtime_dir  a private XDG_RUNTIME_DIR before the first wgpu instance (lavapipe's warning)
//! sim          a layout's step simulated from a calibration: lowered, costed, replayed at scale
//! session      a run: data cursor, checkpoints every N steps, resume under any layout
//! step         what every runner shares: TrainConfig, StepStats, ModelState, the checksum
//! train        the one-device reference step the runtime is tested against; eval, generation
//! ```
//!
//! Parameter gradients accumulate (`+=`) and activation gradients assign (`=`), so gradient
//! accumulation over microbatches costs nothing extra. The CPU twin of the whole model
//! (`tests/twins/cpu_model.rs`) replays the same arithmetic on the host for the tests.

pub mod checkpoint;
pub mod collective;
pub mod comm;
pub mod cost;
pub mod cpu;
pub mod data;
pub mod engine;
pub mod error;
pub mod eval;
pub mod gpu;
pub mod kernels;
pub mod link;
pub mod measure;
pub mod memory;
pub mod mesh;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod params;
pub mod pipeline;
pub mod precision;
pub mod record;
pub mod rng;
pub mod runtime;
pub mod runtime_dir;
pub mod session;
pub mod sim;
pub mod step;
pub mod train;

pub use error::{Error, Result};
pub use gpu::{Gpu, View};
