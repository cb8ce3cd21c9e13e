//! Collectives over devices, host-staged and spelled out: each rank's thread downloads its view,
//! the host algorithm runs ([`super::host`]), each rank's thread uploads the result and waits
//! for it to land, so the collective is complete on every device when the call returns.
//!
//! ```text
//!   ring:   rank r thread:  download view r ─▶ 2(d−1) ring rounds ─▶ upload view r
//!   naive:  all ranks download (parallel) ─▶ host sum in rank order ─▶ all upload (parallel)
//! ```
//!
//! Staging moves only what the collective needs: reduce-scatter uploads only the owned chunk
//! (the rest of the view keeps its input values), all-gather downloads only the owned chunk.

use std::ops::Range;
use std::time::Instant;

use super::host::{broadcast_copy, check_root, naive_sum, tree_sum};
use super::ledger::{chunk, Entry, Kind, Ledger, Stamp};
use super::ring::{per_rank, Phases, Ring};
use super::{Algo, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::pipeline::simulate::Link;

/// All-reduce `views` (one per device, equal lengths) in place with `algo`; every view ends
/// holding the sum (the mean when `opts.average`).
pub fn all_reduce(
    gpus: &[Gpu],
    views: &[View],
    algo: Algo,
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    match algo {
        Algo::Ring => ring(gpus, views, Phases::Both, opts, ledger, link),
        Algo::Naive => naive(gpus, views, opts, ledger, link, false),
        Algo::Tree => naive(gpus, views, opts, ledger, link, true),
    }
}

/// Ring reduce-scatter: afterwards `views[r].slice(chunk(n, d, r))` holds the sum over ranks
/// (the mean when `opts.average`); the rest of each view is unchanged.
pub fn reduce_scatter(
    gpus: &[Gpu],
    views: &[View],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    ring(gpus, views, Phases::ReduceScatter, opts, ledger, link)
}

/// Ring all-gather: chunk r of `views[r]` is the input; afterwards every view holds every
/// rank's chunk.
pub fn all_gather(
    gpus: &[Gpu],
    views: &[View],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    ring(gpus, views, Phases::AllGather, opts, ledger, link)
}

/// Copies `views[root]` into every other view.
pub fn broadcast(
    gpus: &[Gpu],
    views: &[View],
    root: usize,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = "broadcast";
    let (d, n) = check_views(name, gpus, views)?;
    check_root(name, root, d)?;
    let stamp = ledger.begin(name, d, link)?;
    if d == 1 {
        return Ok(());
    }
    let (src, down) = download(&gpus[root], &views[root], 0..n, root, &stamp)
        .map_err(|e| super::ring::worker_error(&stamp, root, "download", e.to_string()))?;
    let mut bufs = vec![vec![0.0f32; n]; d];
    bufs[root] = src;
    let mut entries = vec![down];
    entries.extend(broadcast_copy(&mut bufs, root, &stamp));
    let ups = per_rank(d, &stamp, "upload", |r| {
        if r == root {
            return Ok(None);
        }
        upload(&gpus[r], &views[r], 0..n, &bufs[r], r, &stamp).map(Some)
    })?;
    entries.extend(ups.into_iter().flatten());
    ledger.record(entries);
    Ok(())
}

fn ring(
    gpus: &[Gpu],
    views: &[View],
    phases: Phases,
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = match phases {
        Phases::Both => "ring_all_reduce",
        Phases::ReduceScatter => "ring_reduce_scatter",
        Phases::AllGather => "ring_all_gather",
    };
    let (d, n) = check_views(name, gpus, views)?;
    let stamp = ledger.begin(name, d, link)?;
    if d == 1 {
        return Ok(()); // one rank: nothing to move, the sum (and the mean) is its own view
    }
    let ring = Ring {
        phases,
        opts,
        stamp: &stamp,
        n,
        d,
    };
    let stage_in = |r: usize, buf: &mut Vec<f32>| -> Result<Vec<Entry>> {
        let range = match phases {
            Phases::AllGather => chunk(n, d, r),
            _ => 0..n,
        };
        let (part, e) = download(&gpus[r], &views[r], range.clone(), r, &stamp)?;
        if range.len() == n {
            *buf = part;
        } else {
            *buf = vec![0.0; n];
            buf[range].copy_from_slice(&part);
        }
        Ok(vec![e])
    };
    let stage_out = |r: usize, buf: &[f32]| -> Result<Vec<Entry>> {
        let range = match phases {
            Phases::ReduceScatter => chunk(n, d, r),
            _ => 0..n,
        };
        let data = &buf[range.clone()];
        Ok(vec![upload(&gpus[r], &views[r], range, data, r, &stamp)?])
    };
    let mut bufs = vec![Vec::new(); d];
    let entries = ring.run(&mut bufs, &stage_in, &stage_out)?;
    ledger.record(entries);
    Ok(())
}

/// Gather → sum on the host (rank order, or the pairwise `tree`) → broadcast.
fn naive(
    gpus: &[Gpu],
    views: &[View],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
    tree: bool,
) -> Result<()> {
    let name = if tree {
        "tree_all_reduce"
    } else {
        "naive_all_reduce"
    };
    let (d, n) = check_views(name, gpus, views)?;
    let stamp = ledger.begin(name, d, link)?;
    if d == 1 {
        return Ok(());
    }
    let downs = per_rank(d, &stamp, "download", |r| {
        download(&gpus[r], &views[r], 0..n, r, &stamp)
    })?;
    let (mut bufs, mut entries): (Vec<Vec<f32>>, Vec<Entry>) = downs.into_iter().unzip();
    entries.extend(if tree {
        tree_sum(&mut bufs, opts.average, &stamp)
    } else {
        naive_sum(&mut bufs, opts.average, &stamp)
    });
    let ups = per_rank(d, &stamp, "upload", |r| {
        upload(&gpus[r], &views[r], 0..n, &bufs[r], r, &stamp)
    })?;
    entries.extend(ups);
    ledger.record(entries);
    Ok(())
}

/// Downloads `range` of `view`; returns the data and its ledger entry.
fn download(
    gpu: &Gpu,
    view: &View,
    range: Range<usize>,
    rank: usize,
    stamp: &Stamp,
) -> Result<(Vec<f32>, Entry)> {
    let t = Instant::now();
    let len = range.len();
    let data: Vec<f32> = gpu.download(&view.slice(range.start, len))?;
    let wall = t.elapsed().as_secs_f64();
    Ok((
        data,
        stamp.entry(rank, Kind::Download, 4 * len as u64, wall),
    ))
}

/// Uploads `data` into `range` of `view` and waits for it; returns the ledger entry.
fn upload(
    gpu: &Gpu,
    view: &View,
    range: Range<usize>,
    data: &[f32],
    rank: usize,
    stamp: &Stamp,
) -> Result<Entry> {
    let t = Instant::now();
    gpu.upload(&view.slice(range.start, range.len()), data)?;
    gpu.sync()?;
    let wall = t.elapsed().as_secs_f64();
    Ok(stamp.entry(rank, Kind::Upload, 4 * data.len() as u64, wall))
}

/// (d, n): one view per device, at least one, all of the same length.
fn check_views(name: &str, gpus: &[Gpu], views: &[View]) -> Result<(usize, usize)> {
    if gpus.len() != views.len() {
        return Err(Error::Config(format!(
            "{name}: {} devices but {} views (one view per device)",
            gpus.len(),
            views.len()
        )));
    }
    let lens: Vec<usize> = views.iter().map(|v| v.len).collect();
    super::check_lens(name, &lens)
}
