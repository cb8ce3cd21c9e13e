//! Activation recomputation: what a layer keeps from its forward for its backward.
//!
//! ```text
//! none       every layer keeps all it computes (ln1, qkv, att, atty, … fch_gelu) per microbatch
//! selective  attention's probabilities att [B, NH, T, T] (the s²-sized tensor) are recomputed
//!            from the kept qkv just before attention's backward (Megatron's `core_attn`)
//! full       a layer keeps only its input x; its backward first re-runs its forward up to the
//!            MLP's activation (ln1 … gelu: everything its backward reads) into one workspace
//!            shared by every layer and microbatch of the chunk (torchgpipe / Megatron full)
//! ```
//!
//! Recomputation replays the forward's own ops (the same kernels, bind groups and order), so a
//! recomputed tensor has the bits the forward gave it and the parameters after a step are
//! bit-identical to `none`. Under tensor parallelism `full` repeats the attention output's
//! all-reduce (its sum order is fixed, so the bits are too).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// How much of a layer's forward its backward recomputes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Keep every activation (fastest, most memory).
    #[default]
    None,
    /// Recompute attention's score/probability tensor only.
    Selective,
    /// Keep each layer's input only; recompute the layer inside backward.
    Full,
}

impl Recompute {
    pub const ALL: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];

    pub fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Recompute {
    type Err = Error;

    fn from_str(s: &str) -> Result<Recompute> {
        Recompute::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown recompute mode {s:?}: use none, selective or full"
                ))
            })
    }
}
