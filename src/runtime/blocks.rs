//! ZeRO-2/3 chunks: the model run block by block ([`Chain`]), so each block's parameters and
//! gradients can live in buffers that exist only during a step.
//!
//! ```text
//!            persistent (per rank)            step-scoped (allocated at the step's start)
//! ZeRO-2     P full, G shard, K shard         G full (backward accumulates into it)
//! ZeRO-3     P shard, G shard, K shard        G full, two block slots (block i in slot i % 2)
//! ```
//!
//! Under bf16 mixed precision P and G are packed words (2 bytes per element) and the f32 master
//! weights are a shard next to m and v (see [`super::chunk`]'s `by_blocks`).
//!
//! Reductions reduce-scatter a bucket of the full G into the G shard; ZeRO-2 all-gathers the
//! updated parameters after AdamW, ZeRO-3 gathers each block into its slot before it runs (the
//! next gather of the same slot reshards it). The chain computes the whole model's arithmetic,
//! so the bits are those of every other layout of the same data-parallel group.

use std::ops::Range;

use super::ir::{ChunkShape, Mark};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::memory::Category;
use crate::model::{GptConfig, Micro, Precision, Recompute};
use crate::parallel::bucket::Bucket;
use crate::parallel::chain::{Chain, Span};

/// What a ZeRO-2/3 chunk allocates for one step and frees after it.
pub(super) struct Work {
    pub grads: View,
    pub slots: Vec<View>,
    pub chain: Chain,
}

/// The block-by-block part of a ZeRO-2/3 chunk.
pub(super) struct Blocks {
    pub spans: Vec<Span>,
    /// ZeRO-3: parameters sharded, gathered per block.
    pub gather: bool,
    /// The step's buffers and chain, while a step runs.
    pub work: Option<Work>,
    pub model: GptConfig,
    pub micro: Micro,
    pub dloss: f32,
    pub recompute: Recompute,
    /// bf16: the step's gradients and block slots are packed words.
    pub precision: Precision,
}

impl Blocks {
    /// Allocates the step's full gradient buffer, the block slots (ZeRO-3) and the chain over
    /// them; `params` is the full parameter buffer (ZeRO-2). `total` is in elements of the
    /// storage layout; under bf16 every buffer and view is in packed words (spans start on
    /// 128 elements).
    pub fn begin(&mut self, gpu: &Gpu, total: usize, params: &View) -> Result<()> {
        let prec = self.precision;
        let words = |n: usize| prec.words(n);
        let longest = self.spans.iter().map(|s| s.range.len()).max().unwrap_or(1);
        let (grads_name, slot_name) = match self.precision {
            Precision::F32 => ("grads.backward", "params.slot"),
            Precision::Bf16 => ("grads.backward.bf16", "params.bf16.slot"),
        };
        let grads = gpu.buffer_in(Category::Gradients, grads_name, words(total));
        let slots: Vec<View> = if self.gather {
            (0..2)
                .map(|i| {
                    gpu.buffer_in(
                        Category::Parameters,
                        &format!("{slot_name}{i}"),
                        words(longest),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        let spans = &self.spans;
        let at = |s: &Span| (words(s.range.start), words(s.range.len()));
        let chain = Chain::new(
            gpu,
            self.model,
            self.micro,
            self.dloss,
            self.recompute,
            self.precision,
            spans,
            |i| {
                let (a, n) = at(&spans[i]);
                match slots.get(i % 2) {
                    Some(s) => s.slice(0, n),
                    None => params.slice(a, n),
                }
            },
            |i| {
                let (a, n) = at(&spans[i]);
                grads.slice(a, n)
            },
        )?;
        self.work = Some(Work {
            grads,
            slots,
            chain,
        });
        Ok(())
    }

    /// The step's buffers, or an error outside a step.
    pub fn work(&self) -> Result<&Work> {
        self.work
            .as_ref()
            .ok_or_else(|| Error::Config("a ZeRO-2/3 chunk ran outside a step".into()))
    }

    /// The kernels of block segments `segs` of the forward (`backward` false) or backward.
    pub fn ops(&self, backward: bool, segs: &Range<usize>) -> Result<Vec<crate::kernels::Op>> {
        let w = self.work()?;
        let n = self.spans.len();
        let mut out = Vec::new();
        for seg in segs.clone() {
            if backward {
                out.extend(w.chain.backward[n - 1 - seg].iter().cloned());
            } else {
                out.extend(w.chain.forward[seg].iter().cloned());
            }
        }
        Ok(out)
    }
}

/// The shape of a block-by-block chunk: a mark at every block boundary; in the backward, the
/// buckets final once the blocks above a boundary are done (every gradient of a bucket lies in
/// blocks at or after its start).
pub(super) fn shape(spans: &[Span], buckets: &[Bucket], gather: bool) -> ChunkShape {
    let n = spans.len();
    let mut done = vec![false; buckets.len()];
    let backward = (1..n)
        .map(|seg| {
            // after backward segment seg − 1: blocks n − seg .. n are done
            let from = spans[n - seg].range.start;
            let ready: Vec<usize> = (0..buckets.len())
                .filter(|&b| !done[b] && buckets[b].range.start >= from)
                .collect();
            for &b in &ready {
                done[b] = true;
            }
            if ready.is_empty() {
                Mark::Block
            } else {
                Mark::Ready(ready)
            }
        })
        .collect();
    ChunkShape {
        forward: vec![Mark::Block; n.saturating_sub(1)],
        backward,
        weight: Vec::new(),
        buckets: buckets.len(),
        split: false,
        gather,
    }
}
