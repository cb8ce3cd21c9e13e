//! Memory per device: model states under ZeRO stages 0–3, and GPT activations.
//!
//! ZeRO (Rajbhandari et al. 2020) with P, G, K bytes per parameter for parameters, gradients
//! and optimizer state, N parameters, sharded over the p devices of the data-parallel group:
//!
//! ```text
//! stage 0   P + G + K             replicated                 mixed Adam (2,2,12): 16N
//! stage 1   P + G + K/p           optimizer state sharded                         4N + 12N/p
//! stage 2   P + (G + K)/p         + gradients sharded                             2N + 14N/p
//! stage 3   (P + G + K)/p         + parameters sharded                            16N/p
//! ```
//!
//! N = 7e9, p = 8: 112 GB (stage 0) vs 14 GB (stage 3).
//!
//! Activations of one GPT block, per microbatch of b sequences of s tokens, hidden h, a heads,
//! t-way tensor parallel, 16-bit activations with 1-byte dropout masks, no recomputation and no
//! sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation"):
//!
//! ```text
//! bytes = s·b·h · (10 + 24/t + 5·a·s/(h·t))          t = 1: s·b·h·(34 + 5·a·s/h)
//! ```
//!
//! For other activation widths the count is scaled by `act_bytes / 2` (an approximation: the
//! masks stay 1 byte in reality). Embedding and logit activations are not counted.

use std::fmt;

/// A ZeRO stage: what the data-parallel group shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ZeroStage {
    /// Nothing sharded: plain data parallel.
    Stage0,
    /// Optimizer state sharded.
    Stage1,
    /// Optimizer state and gradients sharded.
    Stage2,
    /// Optimizer state, gradients and parameters sharded (FSDP).
    Stage3,
}

impl ZeroStage {
    /// All four stages, in order.
    pub const ALL: [ZeroStage; 4] = [
        ZeroStage::Stage0,
        ZeroStage::Stage1,
        ZeroStage::Stage2,
        ZeroStage::Stage3,
    ];

    /// The stage for 0..=3; `None` otherwise.
    pub fn from_index(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
    }

    /// 0, 1, 2 or 3.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The row of the table as a formula in P, G, K.
    pub fn formula(self) -> &'static str {
        match self {
            ZeroStage::Stage0 => "P+G+K",
            ZeroStage::Stage1 => "P+G+K/p",
            ZeroStage::Stage2 => "P+(G+K)/p",
            ZeroStage::Stage3 => "(P+G+K)/p",
        }
    }
}

impl fmt::Display for ZeroStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.index())
    }
}

/// Model-state bytes per device for N parameters sharded over p devices at `stage`, with
/// P, G, K bytes per parameter (see the module table). p = 1 gives `(P+G+K)·N` for any stage.
pub fn zero_state_bytes(n: f64, p: usize, stage: ZeroStage, pgk: (f64, f64, f64)) -> f64 {
    let (pb, gb, kb) = pgk;
    let p = p.max(1) as f64;
    let per_param = match stage {
        ZeroStage::Stage0 => pb + gb + kb,
        ZeroStage::Stage1 => pb + gb + kb / p,
        ZeroStage::Stage2 => pb + (gb + kb) / p,
        ZeroStage::Stage3 => (pb + gb + kb) / p,
    };
    per_param * n
}

/// Activation bytes of one GPT block for one microbatch of `b` sequences of `s` tokens,
/// hidden `h`, `a` heads, `t`-way tensor parallel: `s·b·h·(10 + 24/t + 5·a·s/(h·t)) · act/2`.
pub fn activation_bytes_per_layer(
    b: usize,
    s: usize,
    h: usize,
    a: usize,
    t: usize,
    act: f64,
) -> f64 {
    let (b, s, h, a, t) = (b as f64, s as f64, h as f64, a as f64, t.max(1) as f64);
    s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)) * act / 2.0
}

/// What one device holds for a layout, in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryBreakdown {
    /// Parameters of the heaviest stage held by this device before ZeRO: stage 0's blocks and
    /// the embeddings, over tp: `(L/pp · block + (V + ctx)·d) / tp`.
    pub params: f64,
    /// Parameters, gradients and optimizer state under the ZeRO stage over dp.
    pub states: f64,
    /// ZeRO-3 working buffer: one block's gathered parameters and unsharded gradients,
    /// `(P + G)·block/tp`; 0 for stages 0–2.
    pub gather_buffer: f64,
    /// Activations held at the peak: held microbatches × L/pp layers × per-layer bytes.
    pub activations: f64,
    /// The sum of the three.
    pub total: f64,
}

impl MemoryBreakdown {
    /// Assembles a breakdown; `total` is the sum of states, buffer and activations.
    pub fn new(params: f64, states: f64, gather_buffer: f64, activations: f64) -> Self {
        MemoryBreakdown {
            params,
            states,
            gather_buffer,
            activations,
            total: states + gather_buffer + activations,
        }
    }
}
