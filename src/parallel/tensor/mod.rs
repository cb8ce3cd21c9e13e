//! Megatron tensor parallelism: each transformer layer's matrices are split over t devices, so
//! each rank holds 1/t of the layer weights and does 1/t of its matmul and attention work, at
//! the price of 2 all-reduces of the [B·T, C] activations forward and 2 backward per layer.
//!
//! ```text
//! rank r of t (heads [r·nh/t, (r+1)·nh/t), MLP units [r·4C/t, (r+1)·4C/t)):
//!   x ─▶ ln1 ─f─▶ qkv_r (column) ─▶ attention (nh/t heads) ─▶ attproj_r (row) ─g─▶ +x ─▶ x2
//!   x2 ─▶ ln2 ─f─▶ fc_r (column) ─▶ gelu ─▶ fcproj_r (row) ─g─▶ +x2 ─▶ out
//! f = copy_to_tp:     identity forward, all-reduce (sum) of its input gradient backward
//! g = reduce_from_tp: all-reduce (sum) of the partial products forward, identity backward
//! ```
//!
//! The embedding, the layernorms, the row-parallel biases and the head are **replicated**:
//! every rank holds them and computes identical gradients for them, because their inputs are
//! identical after each all-reduce (a row-parallel bias is added once, by rank 0, before the
//! all-reduce). Replicating the embedding and head costs 2·V·C parameters per rank and the
//! head's V·C·B·T matmul on every rank; a vocabulary-parallel head would save both but adds an
//! all-reduce of the softmax statistics per microbatch. At this project's vocabularies (256
//! bytes) the head is a small share of the work, so replication is the simpler, cheaper choice.
//!
//! The layer ops come from [`crate::model::gpu_model::GpuModel`] built for a
//! [`crate::model::TpRank`]: its passes carry the cut points where the all-reduces go. The
//! runtime lowers each cut to a `TpAllReduce` op over the device's tensor-parallel group
//! ([`crate::runtime`]), so tensor parallelism composes with pipeline and data parallelism
//! (dp × tp × pp). This module holds the split itself: which rows or columns of which tensor
//! a rank owns, and the shard / gather between the one-device and the rank-local layouts.

pub mod split;

pub use split::{gather, shard, split_of, Split};
