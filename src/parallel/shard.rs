//! ZeRO shard geometry as range arithmetic over the flat buffer.
//!
//! The flat buffer is tiled by *units* (the data-parallel gradient buckets, each a run of whole
//! tensors). Every unit is split over the d ranks of the group into 64-element-aligned chunks
//! (FSDP shards each flat parameter the same way), so a reduce-scatter of a bucket is the ring
//! reduce-scatter of that bucket with these chunk bounds, and sums each element in the same
//! order as the ring all-reduce with the same bounds (stage 0):
//!
//! ```text
//! unit u = [s, s + 64·m):  chunk k = [s + 64·⌊(k·m + u mod d)/d⌋, s + 64·⌊((k+1)·m + u mod d)/d⌋)
//! flat     | unit 0 (bucket)              | unit 1                  |
//! d = 3    | r0      | r1       | r2      | r0     | r1     | r2     |
//! shard r1 storage:   [u0.r1 | u1.r1]                  (rank r's chunks, concatenated in flat order)
//! ```
//!
//! Chunks differ by at most 64 elements within a unit, and a rank's shard holds at most
//! 64 elements per unit more than `total / d` (the alignment padding). A rank's chunk of a unit may be empty (a unit of fewer than
//! d·64 elements).

use std::ops::Range;

use crate::error::{Error, Result};
use crate::optim::Piece;
use crate::params::ALIGN;

/// One unit of the grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub range: Range<usize>,
    /// d + 1 absolute chunk boundaries.
    pub bounds: Vec<usize>,
    /// Per rank: where its chunk of this unit starts in its shard storage.
    pub storage: Vec<usize>,
}

/// A collective's share of one unit: `sub` (a sub-range of the unit), its d + 1 chunk bounds
/// relative to `sub.start`, and per rank the storage offset of its part of `sub`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub sub: Range<usize>,
    pub bounds: Vec<usize>,
    pub storage: Vec<usize>,
}

/// The shard geometry of one data-parallel group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    pub d: usize,
    pub total: usize,
    /// Units in ascending flat order, tiling `[0, total)`.
    pub units: Vec<Unit>,
}

impl Grid {
    /// The grid of `units` (ranges tiling `[0, total)` in any order, each starting and ending on
    /// a multiple of 64) over `d` ranks.
    pub fn new(units: &[Range<usize>], total: usize, d: usize) -> Result<Grid> {
        Grid::aligned(units, total, d, ALIGN)
    }

    /// [`Grid::new`] with every unit and chunk boundary on a multiple of `align` elements
    /// (128 for packed bf16 buffers: a chunk of words then starts on a 256-byte boundary).
    pub fn aligned(units: &[Range<usize>], total: usize, d: usize, align: usize) -> Result<Grid> {
        if d == 0 {
            return Err(Error::Config(
                "a shard grid needs at least one rank (d = 0)".into(),
            ));
        }
        let mut sorted = units.to_vec();
        sorted.sort_by_key(|r| r.start);
        let mut at = 0;
        for r in &sorted {
            if r.start != at || r.end <= r.start || r.start % align != 0 || r.end % align != 0 {
                return Err(Error::Config(format!(
                    "shard units must tile [0, {total}) in {align}-aligned ranges; got {r:?} at \
                     {at}"
                )));
            }
            at = r.end;
        }
        if at != total {
            return Err(Error::Config(format!(
                "shard units end at {at}, the buffer at {total}"
            )));
        }
        let mut next = vec![0usize; d];
        let units = sorted
            .into_iter()
            .enumerate()
            .map(|(u, range)| {
                // ⌊(k·m + u mod d)/d⌋: the units' remainders go to different ranks in turn
                let m = range.len() / align;
                let bounds: Vec<usize> = (0..=d)
                    .map(|k| range.start + align * ((k * m + u % d) / d))
                    .collect();
                let storage = next.clone();
                for (r, n) in next.iter_mut().enumerate() {
                    *n += bounds[r + 1] - bounds[r];
                }
                Unit {
                    range,
                    bounds,
                    storage,
                }
            })
            .collect();
        Ok(Grid { d, total, units })
    }

    /// Rank `r`'s chunk of unit `u`.
    pub fn chunk(&self, u: usize, r: usize) -> Range<usize> {
        let b = &self.units[u].bounds;
        b[r]..b[r + 1]
    }

    /// Elements of rank `r`'s shard.
    pub fn shard_len(&self, r: usize) -> usize {
        (0..self.units.len()).map(|u| self.chunk(u, r).len()).sum()
    }

    /// Rank `r`'s chunks of a host copy of the flat buffer, each at its shard storage offset:
    /// the rank's shard as its buffers hold it (at least one element, as they are allocated).
    pub fn shard_of(&self, r: usize, flat: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0f32; self.shard_len(r).max(1)];
        for (u, unit) in self.units.iter().enumerate() {
            let c = self.chunk(u, r);
            let at = unit.storage[r];
            out[at..at + c.len()].copy_from_slice(&flat[c]);
        }
        out
    }

    /// Every chunk boundary (the cuts of the norm parts).
    pub fn cuts(&self) -> Vec<usize> {
        let mut c: Vec<usize> = self.units.iter().flat_map(|u| u.bounds.clone()).collect();
        c.dedup();
        c
    }

    /// Rank `r`'s chunks as optimizer pieces: each stored at its shard offset in the buffers
    /// that are sharded (`params`, `grads`: true = shard storage, false = full flat buffer);
    /// moments always live in shard storage. Empty chunks are left out.
    pub fn pieces(&self, r: usize, params_sharded: bool, grads_sharded: bool) -> Vec<Piece> {
        (0..self.units.len())
            .filter_map(|u| {
                let flat = self.chunk(u, r);
                let at = self.units[u].storage[r];
                (!flat.is_empty()).then_some(Piece {
                    params: if params_sharded { at } else { flat.start },
                    grads: if grads_sharded { at } else { flat.start },
                    moments: at,
                    flat,
                })
            })
            .collect()
    }

    /// The parts of `range` for collectives: one per unit it meets, with chunk bounds clipped
    /// to the part and each rank's storage offset of its piece of it.
    pub fn parts(&self, range: Range<usize>) -> Vec<Part> {
        self.units
            .iter()
            .filter_map(|u| {
                let sub = u.range.start.max(range.start)..u.range.end.min(range.end);
                if sub.is_empty() {
                    return None;
                }
                let clip = |x: usize| x.clamp(sub.start, sub.end);
                let bounds = u.bounds.iter().map(|&b| clip(b) - sub.start).collect();
                // (an empty piece past its chunk points at the chunk's end, never beyond)
                let storage = (0..self.d)
                    .map(|r| {
                        let (b0, b1) = (u.bounds[r], u.bounds[r + 1]);
                        u.storage[r] + clip(b0).saturating_sub(b0).min(b1 - b0)
                    })
                    .collect();
                Some(Part {
                    sub,
                    bounds,
                    storage,
                })
            })
            .collect()
    }
}
