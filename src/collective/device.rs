//! Collectives over devices, host-staged and spelled out: each rank's thread downloads its view,
//! the host algorithm runs ([`super::host`]), each rank's thread uploads the result and waits
//! for it to land, so the collective is complete on every device when the call returns.
//!
//! ```text
//!   ring:   all ranks download (a thread each) ─▶ zero-copy ring (min(cores, d) workers)
//!           ─▶ all ranks upload (a thread each)
//!   naive:  all ranks download (parallel) ─▶ host sum in rank order ─▶ all upload (parallel)
//! ```
//!
//! Staging moves only what the collective needs: reduce-scatter uploads only the owned chunk
//! (the rest of the view keeps its input values), all-gather downloads only the owned chunk.

use std::ops::Range;
use std::time::Instant;

use super::host::{broadcast_copy, check_root, naive_sum, tree_sum};
use super::ledger::{Entry, Kind, Ledger, Stamp};
use super::ring::{even_bounds, per_rank, Phases, Ring};
use super::{Algo, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::link::Link;

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
    let (d, n) = check_views(ring_name(phases), gpus, views)?;
    if d == 1 {
        ledger.begin(ring_name(phases), d, link)?;
        return Ok(()); // one rank: nothing to move, the sum (and the mean) is its own view
    }
    let bounds = even_bounds(n, d);
    let own = |r: usize| views[r].slice(bounds[r], bounds[r + 1] - bounds[r]);
    let (ins, outs): (Vec<View>, Vec<View>) = match phases {
        Phases::Both => (views.to_vec(), views.to_vec()),
        Phases::ReduceScatter => (views.to_vec(), (0..d).map(own).collect()),
        Phases::AllGather => ((0..d).map(own).collect(), views.to_vec()),
    };
    ring_io(gpus, &ins, &outs, n, bounds, phases, opts, ledger, link)
}

fn ring_name(phases: Phases) -> &'static str {
    match phases {
        Phases::Both => "ring_all_reduce",
        Phases::ReduceScatter => "ring_reduce_scatter",
        Phases::AllGather => "ring_all_gather",
    }
}

/// Ring all-reduce of `views` whose chunk k is `bounds[k]..bounds[k+1]` (d + 1 offsets from 0
/// to the view length) instead of the even split: chunk k is summed in the order
/// `x(k+1) + … + x(k)`, so a later [`reduce_scatter_to`] with the same bounds gives the same
/// bits (ZeRO's shard boundaries).
pub fn all_reduce_in(
    gpus: &[Gpu],
    views: &[View],
    bounds: &[usize],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = ring_name(Phases::Both);
    let (d, n) = check_views(name, gpus, views)?;
    check_bounds(name, bounds, d, n)?;
    ring_io(
        gpus,
        views,
        views,
        n,
        bounds.to_vec(),
        Phases::Both,
        opts,
        ledger,
        link,
    )
}

/// Ring reduce-scatter of the full `views` with chunk k = `bounds[k]..bounds[k+1]`; rank r's
/// reduced chunk is written to `outs[r]` (length `|chunk r|`, any buffer: a gradient shard).
/// The views themselves are only read.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter_to(
    gpus: &[Gpu],
    views: &[View],
    bounds: &[usize],
    outs: &[View],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = ring_name(Phases::ReduceScatter);
    let (d, n) = check_views(name, gpus, views)?;
    check_bounds(name, bounds, d, n)?;
    check_chunks(name, outs, bounds)?;
    ring_io(
        gpus,
        views,
        outs,
        n,
        bounds.to_vec(),
        Phases::ReduceScatter,
        opts,
        ledger,
        link,
    )
}

/// Ring all-gather into the full `views` from `ins[r]` (rank r's chunk `bounds[r]..bounds[r+1]`,
/// any buffer: a parameter shard); every view ends holding every chunk.
#[allow(clippy::too_many_arguments)]
pub fn all_gather_from(
    gpus: &[Gpu],
    ins: &[View],
    bounds: &[usize],
    views: &[View],
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let name = ring_name(Phases::AllGather);
    let (d, n) = check_views(name, gpus, views)?;
    check_bounds(name, bounds, d, n)?;
    check_chunks(name, ins, bounds)?;
    ring_io(
        gpus,
        ins,
        views,
        n,
        bounds.to_vec(),
        Phases::AllGather,
        opts,
        ledger,
        link,
    )
}

/// d + 1 non-decreasing offsets from 0 to n.
fn check_bounds(name: &str, bounds: &[usize], d: usize, n: usize) -> Result<()> {
    let ok = bounds.len() == d + 1
        && bounds.first() == Some(&0)
        && bounds.last() == Some(&n)
        && bounds.windows(2).all(|w| w[0] <= w[1]);
    if !ok {
        return Err(Error::Config(format!(
            "{name}: chunk bounds {bounds:?} are not {} non-decreasing offsets from 0 to {n}",
            d + 1
        )));
    }
    Ok(())
}

/// One view per rank, of its chunk's length.
fn check_chunks(name: &str, views: &[View], bounds: &[usize]) -> Result<()> {
    let d = bounds.len() - 1;
    if views.len() != d {
        return Err(Error::Config(format!(
            "{name}: {} shard views for {d} ranks",
            views.len()
        )));
    }
    for (r, v) in views.iter().enumerate() {
        if v.len != bounds[r + 1] - bounds[r] {
            return Err(Error::Config(format!(
                "{name}: rank {r}'s shard view has {} elements, its chunk {}",
                v.len,
                bounds[r + 1] - bounds[r]
            )));
        }
    }
    Ok(())
}

/// The ring over host copies: rank r stages in from `ins[r]` (the full view, or only its chunk
/// for an all-gather) and out to `outs[r]` (the full view, or only its chunk for a
/// reduce-scatter).
#[allow(clippy::too_many_arguments)]
fn ring_io(
    gpus: &[Gpu],
    ins: &[View],
    outs: &[View],
    n: usize,
    bounds: Vec<usize>,
    phases: Phases,
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    let d = gpus.len();
    let stamp = ledger.begin(ring_name(phases), d, link)?;
    if d == 1 {
        // one rank: the sum (and the mean) is its own data; only a copy between buffers remains
        // (chunk 0 is everything, so input and output have the same length)
        if phases != Phases::Both && ins[0].len > 0 {
            let data: Vec<f32> = gpus[0].download(&ins[0])?;
            gpus[0].upload(&outs[0], &data)?;
        }
        return Ok(());
    }
    let chunk = |r: usize| bounds[r]..bounds[r + 1];
    let stage_in = |r: usize, buf: &mut Vec<f32>| -> Result<Vec<Entry>> {
        let range = match phases {
            Phases::AllGather => chunk(r),
            _ => 0..n,
        };
        let (part, e) = download(&gpus[r], &ins[r], 0..range.len(), r, &stamp)?;
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
            Phases::ReduceScatter => chunk(r),
            _ => 0..n,
        };
        let data = &buf[range];
        Ok(vec![upload(
            &gpus[r],
            &outs[r],
            0..data.len(),
            data,
            r,
            &stamp,
        )?])
    };
    let ring = Ring {
        phases,
        opts,
        stamp: &stamp,
        n,
        d,
        bounds: bounds.clone(),
    };
    let mut bufs = vec![Vec::new(); d];
    let entries = ring.run_staged(&mut bufs, &stage_in, &stage_out)?;
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
