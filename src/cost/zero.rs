//! ZeRO's figures for this crate's f32 training, the ones the `zero` example and the tests put
//! next to the memory ledger and the communicators' ledgers: model-state bytes per device and
//! bytes the group sends per step, by stage.

use super::memory::ZeroStage;
use crate::error::{Error, Result};
use crate::precision::Precision;

/// The ZeRO stage with index `stage`, or a clear error.
pub fn stage(stage: usize) -> Result<ZeroStage> {
    ZeroStage::from_index(stage).ok_or_else(|| {
        Error::Config(format!(
            "ZeRO stage {stage} does not exist: 0 (replicated), 1 (optimizer state sharded), \
             2 (+ gradients), 3 (+ parameters)"
        ))
    })
}

/// Model-state bytes per device this crate's runtime holds for `n` parameters over `d` ranks,
/// with P, G, K bytes per parameter: stage 0 `P+G+K`, stages 1 and 2 `P+G+K/d`, stage 3
/// `P/d+G+K/d` plus its two gather slots of `slot` parameters each (the largest block). The
/// gradients stay whole at every stage: each microbatch's backward
/// accumulates into one full buffer built once for the run, the sum plain data parallelism
/// reduces, so every stage gives its bits; stage 2 reduce-scatters each bucket into this
/// buffer's own range as stage 1 does. The planner's reference formula
/// ([`super::memory::zero_state_bytes`]: DeepSpeed's, which frees each reduced bucket) is lower at stages 2
/// and 3 by `G·(1 − 1/d)`.
pub fn runtime_state_bytes(
    st: ZeroStage,
    n: usize,
    d: usize,
    slot: usize,
    pgk: (f64, f64, f64),
) -> f64 {
    let (p, g, k) = pgk;
    let (d, n) = (d.max(1) as f64, n as f64);
    match st {
        ZeroStage::Stage0 => (p + g + k) * n,
        ZeroStage::Stage1 | ZeroStage::Stage2 => (p + g + k / d) * n,
        ZeroStage::Stage3 => (p / d + g + k / d) * n + 2.0 * p * slot as f64,
    }
}

/// [`runtime_state_bytes`] in f32 Adam.
pub fn formula_bytes(st: ZeroStage, n: usize, d: usize, slot: usize) -> f64 {
    runtime_state_bytes(st, n, d, slot, Precision::F32.pgk())
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
