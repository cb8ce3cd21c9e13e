//! How a model is built beyond its blocks and shape: the split backward, the tensor-parallel
//! rank, recomputation and precision.

use super::Workspace;
use crate::model::{Precision, TpRank};

/// How a model is built beyond its blocks and shape.
#[derive(Clone)]
pub struct BuildOptions {
    /// Zero-bubble split backward (B and a deferred W).
    pub split: bool,
    /// Tensor-parallel rank of this replica.
    pub tp: TpRank,
    /// Recomputation, with the workspace shared by the chunk's slots (`None`: keep all).
    pub workspace: Option<Workspace>,
    /// f32, or bf16 mixed precision (packed activations; `buffers` made by
    /// [`crate::params::Buffers::alloc`]).
    pub precision: Precision,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            split: false,
            tp: TpRank::SINGLE,
            workspace: None,
            precision: Precision::F32,
        }
    }
}
