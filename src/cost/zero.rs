//! ZeRO's figures for this crate's f32 training, the ones the `zero` example and the tests put
//! next to the memory ledger and the communicators' ledgers: model-state bytes per device and
//! bytes the group sends per step, by stage.

use super::memory::{zero_state_bytes, ZeroStage};
use crate::error::{Error, Result};

/// Bytes per parameter of this crate's f32 Adam: P = 4, G = 4, K = 8 (m and v).
pub const F32_ADAM: (f64, f64, f64) = (4.0, 4.0, 8.0);

/// The ZeRO stage with index `stage`, or a clear error.
pub fn stage(stage: usize) -> Result<ZeroStage> {
    ZeroStage::from_index(stage).ok_or_else(|| {
        Error::Config(format!(
            "ZeRO stage {stage} does not exist: 0 (replicated), 1 (optimizer state sharded), \
             2 (+ gradients), 3 (+ parameters)"
        ))
    })
}

/// Model-state bytes per device the ZeRO formula predicts for `n` parameters over `d` ranks in
/// f32 Adam (the same function the planner uses).
pub fn formula_bytes(st: ZeroStage, n: usize, d: usize) -> f64 {
    zero_state_bytes(n as f64, d, st, F32_ADAM)
}

/// Bytes the whole group sends rank to rank in one step of `stage` over a flat buffer of `n`
/// f32s, `d` ranks, `k` microbatches per rank: every ring reduce-scatter or all-gather of n
/// elements sends exactly (d−1)·4n bytes in total, whatever the chunk bounds. Stage 0: an
/// all-reduce (2); stages 1, 2: reduce-scatter + parameter all-gather (2); stage 3:
/// reduce-scatter + a gather before every forward and every backward (1 + 2k).
pub fn predicted_comm_bytes(st: ZeroStage, n: usize, d: usize, k: usize) -> u64 {
    let once = 4 * n as u64 * d.saturating_sub(1) as u64;
    match st {
        ZeroStage::Stage0 | ZeroStage::Stage1 | ZeroStage::Stage2 => 2 * once,
        ZeroStage::Stage3 => (1 + 2 * k as u64) * once,
    }
}
