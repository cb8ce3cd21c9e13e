//! The bytes a chunk's buffers and rings must show, by precision: model state (P, G whole or a
//! shard, K = the optimizer's per-element state) and what each rank sends in the runtime's
//! gradient collectives, on the runtime's own shard grid.
//!
//! ```text
//!            P, G bytes   K bytes (per element)         grid alignment
//! f32        4            8   (Adam m, v)               64 elements
//! bf16       2            12  (f32 master, m, v)        128 elements (a word view on 256 B)
//! ```
//! Elements are those of the storage layout (`Layout::packed` under bf16); the bf16 ring moves
//! words of two elements, so a chunk of 2k elements is 4k bytes either way per word.

use crate::collective::ring_all_reduce_rank_bytes;
use crate::error::Result;
use crate::model::{GptConfig, Precision};
use crate::parallel::shard::Grid;

/// (P and G bytes per element, K bytes per element, shard alignment in elements).
fn of(prec: Precision) -> (u64, u64, usize) {
    let (_, _, k) = prec.pgk();
    (prec.element_bytes() as u64, k as u64, prec.align())
}

/// The shard grid the runtime cuts a chunk of `n` gradients into over `d` ranks when they fit
/// one bucket; `None` for a chunk of several buckets, whose bucket plan only a built model
/// knows.
pub(super) fn one_bucket_grid(n: usize, d: usize, prec: Precision) -> Option<Grid> {
    // (buckets are sized in 4-byte elements whatever the precision)
    if d <= 1 || 4 * n > crate::parallel::bucket::BUCKET_BYTES {
        return None;
    }
    Grid::aligned(std::slice::from_ref(&(0..n)), n, d, of(prec).2).ok()
}

/// Model-state bytes of rank `r` holding a chunk of `n` parameters under ZeRO `zero` over `d`
/// ranks: P and K whole or as the rank's shard, G whole (every stage accumulates into it), and
/// under ZeRO-3 two gather slots of `slot` elements (the largest block).
pub(super) fn zero_state(
    n: usize,
    d: usize,
    r: usize,
    zero: usize,
    slot: usize,
    prec: Precision,
) -> u64 {
    let shard = match one_bucket_grid(n, d, prec) {
        Some(g) if zero > 0 => g.shard_len(r),
        _ if zero > 0 => crate::collective::chunk(n, d, r).len(),
        _ => n,
    };
    // the gradients stay whole: the backward accumulates every microbatch into them
    let p = if zero >= 3 { shard } else { n };
    let k = if zero >= 1 { shard } else { n };
    let (pg, kb, _) = of(prec);
    let slots = if zero >= 3 && d > 1 { 2 * slot } else { 0 };
    pg * (p + n + slots) as u64 + kb * k as u64
}

/// Bytes rank `r` sends in one step of ZeRO-3 over a flat group: the gradients' reduce-scatter
/// (every chunk but its own) and, per microbatch, two gathers of every block (forward and
/// backward), each block's parts all-gathered over their chunk bounds (every part's chunk but
/// rank r + 1's).
pub(super) fn zero3_rank(
    model: &GptConfig,
    n: usize,
    d: usize,
    r: usize,
    m: usize,
    prec: Precision,
) -> Result<u64> {
    let (pg, _, align) = of(prec);
    let g = match one_bucket_grid(n, d, prec) {
        Some(g) => g,
        None => Grid::aligned(std::slice::from_ref(&(0..n)), n, d, align)?,
    };
    let rs = pg * (n - g.shard_len(r)) as u64;
    let mut gather = 0u64;
    let stored = prec.storage(model.layout(&model.blocks()));
    for span in model.block_spans(&model.blocks(), 1, &stored)? {
        for part in g.parts(span) {
            let next = (r + 1) % d;
            let len = part.bounds[next + 1] - part.bounds[next];
            gather += pg * (part.sub.len() - len) as u64;
        }
    }
    Ok(rs + 2 * m as u64 * gather)
}

/// Bytes rank `r` sends all-reducing a stage's `n` gradients the way the runtime does: one
/// bucket cut into aligned chunks ([`Grid`]), so rank r sends `e·(2n − |c_r| − |c_(r+1)|)` at
/// e bytes per element. A stage larger than one bucket is cut by its backward's bucket plan,
/// which only a built model knows: counted by even chunks then (of words under bf16; exact when
/// d divides each bucket's blocks).
pub(super) fn aligned_ring_rank(n: usize, d: usize, r: usize, prec: Precision) -> u64 {
    match one_bucket_grid(n, d, prec) {
        Some(g) => {
            let c = |q: usize| g.chunk(0, q).len();
            of(prec).0 * (2 * n - c(r) - c((r + 1) % d)) as u64
        }
        None => ring_all_reduce_rank_bytes(prec.words(n), d, r),
    }
}
