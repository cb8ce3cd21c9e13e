//! Gradient buckets for data parallelism, and the timing of their all-reduce on both clocks.
//!
//! The parameter layout lies in block order, so every block's gradients are one contiguous
//! range. A bucket is a run of whole blocks in *backward* order (head first, embedding last, as
//! PyTorch DDP's reverse-order buckets), up to a byte limit; it is ready as soon as the backward
//! of its last block is done, and its all-reduce can run while backward continues:
//!
//! ```text
//! backward    [head][h3][h2][h1][h0][emb]
//! buckets      '-b0-----''-b1---''-b2----'          ready at the end of h3, h1, emb
//! comm                   [ar b0]   [ar b1]  [ar b2]  ← exposed: only what runs past backward
//! ```

use std::ops::Range;

use crate::model::{Block, GptConfig};
use crate::params::Layout;

/// One bucket: a contiguous flat range made of whole blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub range: Range<usize>,
    /// Its blocks, in backward order; the last one completes it.
    pub blocks: Vec<Block>,
}

/// The flat range of every block of `cfg`, in model order.
pub fn block_ranges(cfg: &GptConfig, layout: &Layout) -> Vec<(Block, Range<usize>)> {
    let blocks = cfg.blocks();
    let first: Vec<usize> = blocks
        .iter()
        .map(|b| {
            let name = &cfg.specs(&[*b])[0].name;
            layout.get(name).map_or(0, |t| t.offset)
        })
        .collect();
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                *b,
                first[i]..first.get(i + 1).copied().unwrap_or(layout.total),
            )
        })
        .collect()
}

/// Buckets of at most `bytes` (a larger block is a bucket of its own), in backward order.
pub fn buckets(cfg: &GptConfig, layout: &Layout, bytes: usize) -> Vec<Bucket> {
    let limit = (bytes / 4).max(1);
    let mut out: Vec<Bucket> = Vec::new();
    for (b, r) in block_ranges(cfg, layout).into_iter().rev() {
        match out.last_mut() {
            // backward order walks the flat buffer downwards: r ends where the bucket starts
            Some(last) if last.range.len() + r.len() <= limit && r.end == last.range.start => {
                last.range.start = r.start;
                last.blocks.push(b);
            }
            _ => out.push(Bucket {
                range: r,
                blocks: vec![b],
            }),
        }
    }
    out
}

/// One bucket's all-reduce on both clocks (seconds from the step's start).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BucketTiming {
    pub bytes: u64,
    /// Device clock: when the slowest replica finished the bucket's backward.
    pub ready_device: f64,
    pub start_device: f64,
    pub end_device: f64,
    pub start_wall: f64,
    pub end_wall: f64,
}

/// Schedules the buckets' all-reduces on the device clock: bucket b costs `link[b]` seconds,
/// one at a time, starting when ready (`overlap`) or when the whole backward is done.
/// Returns the end of the last all-reduce.
pub fn device_schedule(
    t: &mut [BucketTiming],
    link: &[f64],
    compute_end: f64,
    overlap: bool,
) -> f64 {
    let mut free = 0.0f64;
    for (b, cost) in t.iter_mut().zip(link) {
        let ready = if overlap { b.ready_device } else { compute_end };
        b.start_device = ready.max(free);
        b.end_device = b.start_device + cost;
        free = b.end_device;
    }
    free
}
