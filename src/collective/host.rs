//! Collectives on host buffers, one `Vec<f32>` per rank: the algorithms themselves, pure and
//! testable without a GPU. The device wrappers in [`super`] download into these, call them (or
//! the same ring workers), and upload.
//!
//! Summation orders (fixed by the algorithm, never by arrival time):
//! - [`naive_all_reduce`]: `((x0 + x1) + x2) + … + x(d−1)` for every element.
//! - [`ring_all_reduce`] / [`ring_reduce_scatter`]: chunk c is summed around the ring starting
//!   after its owner, `((x(c+1) + x(c+2)) + …) + x(c)` (indices mod d). For d ≤ 2 both orders
//!   give the same bits (addition is commutative); for d > 2 they differ by rounding only.

use std::time::Instant;

use super::ledger::{Entry, EntryKind, Ledger, Stamp};
use super::ring::{even_bounds, Phases, Ring};
use super::{check_bufs, Opts};
use crate::error::{Error, Result};
use crate::link::Link;

/// Gather to rank 0, sum in rank order 0, 1, …, d−1 (divided by d once at the end when
/// `opts.average`), broadcast. Ledger: a gather hop r → 0 (round 0) and a broadcast hop
/// 0 → r (round 1) of S bytes for every rank r > 0. Runs on the calling thread, so
/// `opts.jitter_us` and `opts.fault` do not apply.
pub fn naive_all_reduce(
    bufs: &mut [Vec<f32>],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = "naive_all_reduce";
    let (d, _) = check_bufs(name, bufs)?;
    let stamp = ledger.begin(name, d, link)?;
    let entries = naive_sum(bufs, opts.average, &stamp);
    ledger.record(entries);
    Ok(())
}

/// The naive all-reduce on checked buffers; returns its hop entries.
/// Sums the ranks' buffers in a pairwise tree over rank index — level ℓ adds rank r + 2^ℓ into
/// rank r for r a multiple of 2^(ℓ+1): ((x0+x1)+(x2+x3))+… — then copies the result to every
/// rank. With power-of-two groups and per-rank pairwise accumulation this is one fixed tree over
/// the global microbatch index, whatever the number of ranks (layout-invariant sums).
pub(super) fn tree_sum(bufs: &mut [Vec<f32>], average: bool, stamp: &Stamp) -> Vec<Entry> {
    let d = bufs.len();
    let bytes = 4 * bufs[0].len() as u64;
    let mut entries = Vec::with_capacity(2 * d);
    let mut stride = 1;
    let mut level = 0;
    while stride < d {
        for r in (0..d).step_by(2 * stride) {
            if r + stride < d {
                let t = Instant::now();
                let (lo, hi) = bufs.split_at_mut(r + stride);
                for (a, x) in lo[r].iter_mut().zip(&hi[0]) {
                    *a += *x;
                }
                let kind = EntryKind::Hop {
                    to: r,
                    round: level,
                };
                entries.push(stamp.entry(r + stride, kind, bytes, t.elapsed().as_secs_f64()));
            }
        }
        stride *= 2;
        level += 1;
    }
    if average {
        let dd = d as f32;
        bufs[0].iter_mut().for_each(|a| *a /= dd);
    }
    let (first, rest) = bufs.split_at_mut(1);
    for (i, x) in rest.iter_mut().enumerate() {
        let t = Instant::now();
        x.copy_from_slice(&first[0]);
        let kind = EntryKind::Hop {
            to: i + 1,
            round: level,
        };
        entries.push(stamp.entry(0, kind, bytes, t.elapsed().as_secs_f64()));
    }
    entries
}

pub(super) fn naive_sum(bufs: &mut [Vec<f32>], average: bool, stamp: &Stamp) -> Vec<Entry> {
    let d = bufs.len();
    let bytes = 4 * bufs[0].len() as u64;
    let mut entries = Vec::with_capacity(2 * d);
    let mut acc = bufs[0].clone();
    for (r, x) in bufs.iter().enumerate().skip(1) {
        let t = Instant::now();
        for (a, x) in acc.iter_mut().zip(x) {
            *a += *x;
        }
        let kind = EntryKind::Hop { to: 0, round: 0 };
        entries.push(stamp.entry(r, kind, bytes, t.elapsed().as_secs_f64()));
    }
    if average {
        let dd = d as f32;
        acc.iter_mut().for_each(|a| *a /= dd);
    }
    for (r, x) in bufs.iter_mut().enumerate().skip(1) {
        let t = Instant::now();
        x.copy_from_slice(&acc);
        let kind = EntryKind::Hop { to: r, round: 1 };
        entries.push(stamp.entry(0, kind, bytes, t.elapsed().as_secs_f64()));
    }
    bufs[0] = acc;
    entries
}

/// Ring all-reduce: [`ring_reduce_scatter`] then [`ring_all_gather`] in one ring of 2(d−1)
/// rounds; every buffer ends holding the sum (or the mean when `opts.average`, divided once
/// on each chunk's full sum).
pub fn ring_all_reduce(
    bufs: &mut [Vec<f32>],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    ring(bufs, Phases::Both, opts, ledger, link)
}

/// Ring reduce-scatter in d−1 rounds: afterwards chunk r of `bufs[r]` (see
/// [`super::chunk`]) holds the sum over ranks (the mean when `opts.average`). The other chunks
/// of `bufs[r]` are left holding partial sums: unspecified.
pub fn ring_reduce_scatter(
    bufs: &mut [Vec<f32>],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    ring(bufs, Phases::ReduceScatter, opts, ledger, link)
}

/// Ring all-gather in d−1 rounds: chunk r of `bufs[r]` is the input; afterwards every buffer
/// holds every rank's chunk. Other chunks of the input are overwritten (never read).
/// `opts.average` does not apply.
pub fn ring_all_gather(
    bufs: &mut [Vec<f32>],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    ring(bufs, Phases::AllGather, opts, ledger, link)
}

/// Copies `bufs[root]` into every other buffer. Ledger: one hop root → r of S bytes per r.
pub fn broadcast(
    bufs: &mut [Vec<f32>],
    root: usize,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = "broadcast";
    let (d, _) = check_bufs(name, bufs)?;
    check_root(name, root, d)?;
    let stamp = ledger.begin(name, d, link)?;
    let entries = broadcast_copy(bufs, root, &stamp);
    ledger.record(entries);
    Ok(())
}

/// The broadcast on checked buffers; returns its hop entries.
pub(super) fn broadcast_copy(bufs: &mut [Vec<f32>], root: usize, stamp: &Stamp) -> Vec<Entry> {
    let (before, rest) = bufs.split_at_mut(root);
    let (src, after) = rest.split_at_mut(1);
    let src = &src[0];
    let bytes = 4 * src.len() as u64;
    let mut entries = Vec::with_capacity(before.len() + after.len());
    let others = before.iter_mut().enumerate();
    let others = others.chain(after.iter_mut().enumerate().map(|(i, x)| (root + 1 + i, x)));
    for (r, x) in others {
        let t = Instant::now();
        x.copy_from_slice(src);
        let kind = EntryKind::Hop { to: r, round: 0 };
        entries.push(stamp.entry(root, kind, bytes, t.elapsed().as_secs_f64()));
    }
    entries
}

pub(crate) fn check_root(name: &str, root: usize, d: usize) -> Result<()> {
    if root >= d {
        return Err(Error::Config(format!(
            "{name}: root rank {root} is outside the group of {d} ranks"
        )));
    }
    Ok(())
}

/// The ring with the even split of [`even_bounds`].
fn ring(
    bufs: &mut [Vec<f32>],
    phases: Phases,
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let n = bufs.first().map_or(0, Vec::len);
    let bounds = even_bounds(n, bufs.len().max(1));
    ring_in(bufs, phases, &bounds, opts, ledger, link)
}

/// The ring over host buffers with chunk k = `bounds[k]..bounds[k+1]` (d + 1 non-decreasing
/// offsets from 0 to n) instead of the even split: the summation order of the device
/// collectives called with the same bounds (ZeRO's shard boundaries), so the bits agree.
pub fn ring_in(
    bufs: &mut [Vec<f32>],
    phases: Phases,
    bounds: &[usize],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = match phases {
        Phases::Both => "ring_all_reduce",
        Phases::ReduceScatter => "ring_reduce_scatter",
        Phases::AllGather => "ring_all_gather",
    };
    let (d, n) = check_bufs(name, bufs)?;
    super::check_bounds(name, bounds, d, n)?;
    let stamp = ledger.begin(name, d, link)?;
    if d == 1 {
        return Ok(());
    }
    let ring = Ring {
        phases,
        opts,
        stamp: &stamp,
        n,
        d,
        bounds: bounds.to_vec(),
    };
    let entries = ring.run(bufs)?;
    ledger.record(entries);
    Ok(())
}

/// Sums the buffers in a pairwise tree over rank index (see `tree_sum`) and copies the sum
/// to every rank; the mean when `opts.average`.
pub fn tree_all_reduce(
    bufs: &mut [Vec<f32>],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = "tree_all_reduce";
    let (d, _) = check_bufs(name, bufs)?;
    let stamp = ledger.begin(name, d, link)?;
    if d == 1 {
        return Ok(());
    }
    let entries = tree_sum(bufs, opts.average, &stamp);
    ledger.record(entries);
    Ok(())
}
