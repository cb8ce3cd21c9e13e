//! What the parallel axes are made of, below the runtime that runs them
//! ([`crate::runtime`]): gradient buckets in the order backward finishes them, ZeRO's shard
//! grid over the flat buffers, the Megatron split of
//! every layer, and the layout-invariant pairwise-tree accumulation of microbatch gradients.

pub mod accumulate;
pub mod bucket;
pub mod shard;
pub mod tensor;
