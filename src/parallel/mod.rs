//! The parallel axes built on the single-device model: data parallelism (replicas + gradient
//! all-reduce) and tensor parallelism (Megatron splits of every layer). Pipeline parallelism
//! lives in [`crate::pipeline`], whose executor runs each stage as a tensor-parallel group.

pub mod accumulate;
pub mod bucket;
pub mod chain;
pub mod data;
pub mod replica;
pub mod shard;
pub mod tensor;
pub mod zero;
