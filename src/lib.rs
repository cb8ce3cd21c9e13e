//! # triaxis
//!
//! A portable multi-device GPT trainer on wgpu that measures what each split of the work costs.
//!
//! ```text
//! gpu        adapters, virtual devices (several wgpu::Device on one adapter), transfers, timers
//! kernels    WGSL op families (shaders/*.wgsl) → pipelines built once → Op = dispatch, replayed
//! cpu        the plain-Rust twin of every kernel: the specification the GPU is tested against
//! params     one flat buffer per device for params / grads / Adam moments, named (offset, len) views
//! model      GPT config and blocks (embedding, transformer blocks, head + loss), each with an
//!            explicit forward/backward pair; a stage owns any contiguous range of blocks
//! data       built-in addition corpus and byte-level text files; seeded batches; dataset version
//! train      one-device training loop: microbatch accumulation, clipping, AdamW
//! checkpoint params + Adam moments + step + data cursor in one safetensors file, written atomically
//! record     the run record: config, adapter, shader hashes, dataset version, losses, checksum
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
pub mod flags;
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
pub mod plot;
pub mod progress;
pub mod record;
pub mod rng;
pub mod runtime_dir;
pub mod session;
pub mod train;

pub use error::{Error, Result};
pub use gpu::{Gpu, View};
