//! Gradient buckets for data parallelism, and the timing of their all-reduce on both clocks.
//!
//! Backward finishes parameter gradients group by group (a linear's weight and bias, a
//! layernorm's gain and bias, …: `GpuModel::grad_ready`), and the layout places them so that
//! what is final is always one contiguous range. A bucket is a run of such groups in backward
//! order (as PyTorch DDP's reverse-order buckets), up to a byte limit; its all-reduce starts as
//! soon as its last group is final, while backward continues:
//!
//! ```text
//! backward    [head][fcproj fc ln2 attproj qkv ln1 (h3)] … [(h0)][emb]
//! buckets      '-b0------''-b1-----------''-b2--'   …   '-bk---------'
//! comm                  [ar b0]        [ar b1]  [ar b2] …      [ar bk] ← exposed: past backward
//! ```

use std::ops::Range;

use crate::params::Layout;

/// Default bucket size (PyTorch DDP's 25 MB).
pub const BUCKET_BYTES: usize = 25 << 20;

/// One bucket: a contiguous flat range of parameter tensors whose gradients become final
/// together or one after another.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub range: Range<usize>,
    /// Its tensors, in the order backward finishes them.
    pub tensors: Vec<String>,
    /// Index into `GpuModel::grad_ready` of the point that completes it.
    pub ready_point: usize,
}

/// Buckets of at most `bytes` (a larger group is a bucket of its own) over the groups of
/// `ready` (the model's `grad_ready`, in backward order). Groups must be contiguous and lie
/// downwards in the flat buffer, which the layout guarantees.
pub fn buckets(layout: &Layout, ready: &[(usize, Vec<String>)], bytes: usize) -> Vec<Bucket> {
    let limit = (bytes / 4).max(1);
    let mut out: Vec<Bucket> = Vec::new();
    for (point, (_, names)) in ready.iter().enumerate() {
        let idx: Vec<usize> = names
            .iter()
            .filter_map(|n| layout.tensors.iter().position(|t| &t.name == n))
            .collect();
        let (Some(&lo), Some(&hi)) = (idx.iter().min(), idx.iter().max()) else {
            continue;
        };
        let r = layout.tensors[lo].offset
            ..layout
                .tensors
                .get(hi + 1)
                .map_or(layout.total, |t| t.offset);
        match out.last_mut() {
            Some(last) if last.range.len() + r.len() <= limit && r.end == last.range.start => {
                last.range.start = r.start;
                last.tensors.extend(names.iter().cloned());
                last.ready_point = point;
            }
            _ => out.push(Bucket {
                range: r,
                tensors: names.clone(),
                ready_point: point,
            }),
        }
    }
    out
}
