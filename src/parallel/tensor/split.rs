//! Sharding a one-device parameter buffer into t tensor-parallel ranks and gathering it back:
//! index arithmetic between the full layout (`cfg.layout(blocks)`) and each rank's local
//! layout (`cfg.layout_tp(blocks, t)`), the same names with local shapes.
//!
//! ```text
//! qkvw [3C, C]  rows: q | k | v, each C rows  →  rank r: rows [r·C/t, (r+1)·C/t) of q, of k, of v
//! fcw  [4C, C], fcb [4C]                      →  rank r: rows [r·4C/t, (r+1)·4C/t)
//! attprojw [C, C], fcprojw [C, 4C]            →  rank r: columns [r·K/t, (r+1)·K/t) of every row
//! everything else                             →  replicated (gathered from rank 0)
//! ```
//!
//! The same maps serve parameters, gradients and optimizer moments (any per-parameter buffer).

use crate::error::{Error, Result};
use crate::model::{Block, GptConfig};

/// How one tensor is split across the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Replicated on every rank.
    Whole,
    /// 1/t of each of the 3 row parts q, k, v.
    Qkv,
    /// 1/t of the rows (column-parallel weight or its bias).
    Rows,
    /// 1/t of the columns (row-parallel weight).
    Cols,
}

/// The split of tensor `name` (`h3.qkvw` → `Qkv`).
pub fn split_of(name: &str) -> Split {
    match name.rsplit('.').next().unwrap_or(name) {
        "qkvw" | "qkvb" => Split::Qkv,
        "fcw" | "fcb" => Split::Rows,
        "attprojw" | "fcprojw" => Split::Cols,
        _ => Split::Whole,
    }
}

/// For each element of rank `r`'s local tensor (in local order), its index in the full tensor
/// of `shape`.
fn local_indices(split: Split, shape: &[usize], t: usize, r: usize) -> Vec<usize> {
    let rows = shape[0];
    let cols = shape.get(1).copied().unwrap_or(1);
    let row_range = |lo: usize, len: usize| (lo * cols..(lo + len) * cols).collect::<Vec<_>>();
    match split {
        Split::Whole => (0..rows * cols).collect(),
        Split::Rows => row_range(r * rows / t, rows / t),
        Split::Qkv => {
            let part = rows / 3;
            (0..3)
                .flat_map(|p| row_range(p * part + r * part / t, part / t))
                .collect()
        }
        Split::Cols => {
            let w = cols / t;
            (0..rows)
                .flat_map(|i| (0..w).map(move |j| i * cols + r * w + j))
                .collect()
        }
    }
}

/// Splits `full` (laid out by `cfg.layout(blocks)`) into `t` rank-local buffers laid out by
/// `cfg.layout_tp(blocks, t)`.
pub fn shard(cfg: &GptConfig, blocks: &[Block], full: &[f32], t: usize) -> Result<Vec<Vec<f32>>> {
    cfg.check_tp(t)?;
    let layout = cfg.layout(blocks);
    let local = cfg.layout_tp(blocks, t);
    if full.len() != layout.total {
        return Err(Error::Config(format!(
            "a buffer of {} elements cannot be sharded: the blocks' layout has {}",
            full.len(),
            layout.total
        )));
    }
    let mut out = vec![vec![0.0f32; local.total]; t];
    for x in &layout.tensors {
        let src = &full[x.offset..x.offset + x.len];
        for (r, dst) in out.iter_mut().enumerate() {
            let d = local.slice_mut(dst, &x.name)?;
            for (k, i) in local_indices(split_of(&x.name), &x.shape, t, r)
                .into_iter()
                .enumerate()
            {
                d[k] = src[i];
            }
        }
    }
    Ok(out)
}

/// The inverse of [`shard`]: the full buffer of `blocks` from the ranks' local buffers.
/// Replicated tensors come from rank 0.
pub fn gather(cfg: &GptConfig, blocks: &[Block], ranks: &[Vec<f32>]) -> Result<Vec<f32>> {
    let t = ranks.len();
    cfg.check_tp(t)?;
    let layout = cfg.layout(blocks);
    let local = cfg.layout_tp(blocks, t);
    if let Some(r) = ranks.iter().position(|b| b.len() != local.total) {
        return Err(Error::Config(format!(
            "tensor-parallel rank {r} buffer has {} elements but the local layout needs {}",
            ranks[r].len(),
            local.total
        )));
    }
    let mut full = vec![0.0f32; layout.total];
    for x in &layout.tensors {
        let split = split_of(&x.name);
        let dst = &mut full[x.offset..x.offset + x.len];
        for (r, src) in ranks.iter().enumerate() {
            if split == Split::Whole && r > 0 {
                continue;
            }
            let s = local.slice(src, &x.name)?;
            for (k, i) in local_indices(split, &x.shape, t, r).into_iter().enumerate() {
                dst[i] = s[k];
            }
        }
    }
    Ok(full)
}
