//! The runtime's communication measured by bytes on this machine: host staging (a device's
//! download and upload, with 1, 2 and 4 devices staging at once, as a group's ranks do), the in-process communicator's ring all-reduce over 2 and 4 ranks and
//! its point-to-point message, each fitted to a fixed cost plus seconds per byte
//! ([`Links`]); then checked on what the fit never saw: staged all-reduces over 3 virtual
//! devices (download → all-reduce → upload on every rank at once, as the runtime's workers run
//! one) at sizes between the fitted ones.
//!
//! ```text
//! staging   1, 2, 4 devices at once, sizes 4 KiB … 16 MiB: download + upload + wait
//!                                               → α, s/B of the bytes all of them stage
//! ring      2, 4 ranks   sizes 4 KiB … 16 MiB   all-reduce of host buffers    → α per step, s/B
//! message   2 ranks      sizes 4 KiB … 16 MiB   ping-pong, half a round trip  → α, s/B
//! held out  3 devices    128 KiB, 8 MiB         staged all-reduce, all ranks  ─ predicted vs measured
//! ```
//!
//! A call's time is its slowest rank's; the ranks line up on a barrier before every call; each
//! figure is the median of [`REPS`] calls after one untimed call.

use std::time::Instant;

use anyhow::Context;
use triaxis::collective::Algo;
use triaxis::comm::{local_group, Communicator, GroupOptions, Tag};
use triaxis::gpu::Gpu;
use triaxis::sim::report::seconds;
use triaxis::sim::{Fit, Links, Terms};

/// Buffer sizes the fits are made from, bytes: 4 KiB to 16 MiB, ×8 apart.
const SIZES: [usize; 5] = [1 << 12, 1 << 15, 1 << 18, 1 << 21, 1 << 24];
/// Sizes the fits never saw, for the held-out check.
const HELD_OUT: [usize; 2] = [1 << 17, 1 << 23];
/// Timed calls per figure.
const REPS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `k` devices' download and upload of `bytes` each, all at once and waited on, with the
/// group's ring all-reduce between them when `reduce` (as a worker runs one): the median of
/// [`REPS`] of the slowest device's time.
fn staged(gpus: &[Gpu], k: usize, bytes: usize, reduce: bool) -> anyhow::Result<f64> {
    let views: Vec<_> = gpus[..k]
        .iter()
        .map(|g| g.buffer("staging probe", bytes / 4))
        .collect();
    group_median(k, |r, c| {
        let mut host: Vec<f32> = gpus[r].download(&views[r])?;
        if reduce {
            c.all_reduce(&mut host, Algo::Ring, None, false)?;
        }
        gpus[r].upload(&views[r], &host)?;
        gpus[r].sync()
    })
}

/// Runs `call` on every rank of an in-process group of `d` (rank, its communicator) at once,
/// [`REPS`] + 1 times after a barrier each; the median over calls of the slowest rank's time.
fn group_median<F>(d: usize, call: F) -> anyhow::Result<f64>
where
    F: Fn(usize, &mut dyn Communicator) -> triaxis::Result<()> + Sync,
{
    let ranks: Vec<usize> = (0..d).collect();
    let comms = local_group(&ranks, &GroupOptions::default());
    let per_rank: Vec<triaxis::Result<Vec<f64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, mut c)| {
                let call = &call;
                s.spawn(move || {
                    let mut times = Vec::new();
                    for k in 0..=REPS {
                        c.all_gather_bytes(Vec::new())?;
                        let t = Instant::now();
                        if let Err(e) = call(r, &mut c) {
                            c.abort(&e.to_string());
                            return Err(e);
                        }
                        if k > 0 {
                            times.push(t.elapsed().as_secs_f64());
                        }
                    }
                    Ok(times)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a measuring rank panicked"))
            .collect()
    });
    let per_rank = per_rank.into_iter().collect::<triaxis::Result<Vec<_>>>()?;
    let slowest = (0..REPS)
        .map(|k| per_rank.iter().map(|t| t[k]).fold(0.0, f64::max))
        .collect();
    Ok(median(slowest))
}

/// The ring all-reduce of `bytes` of host buffers over `d` ranks.
fn ring(d: usize, bytes: usize) -> anyhow::Result<f64> {
    let bufs: Vec<std::sync::Mutex<Vec<f32>>> = (0..d)
        .map(|_| std::sync::Mutex::new(vec![0.0; bytes / 4]))
        .collect();
    group_median(d, |r, c| {
        let mut buf = bufs[r].lock().expect("a rank's buffer");
        c.all_reduce(&mut buf, Algo::Ring, None, false)
    })
}

/// Half a ping-pong of `bytes` between two ranks: one message's time.
fn message(bytes: usize) -> anyhow::Result<f64> {
    let bufs: Vec<std::sync::Mutex<Vec<f32>>> = (0..2)
        .map(|_| std::sync::Mutex::new(vec![0.0; bytes / 4]))
        .collect();
    let tag = Tag {
        flow: 0,
        micro: 0,
        stage: 0,
    };
    let round_trip = group_median(2, |r, c| {
        let mut buf = bufs[r].lock().expect("a rank's buffer");
        let sent = std::mem::take(&mut *buf);
        if r == 0 {
            c.send(1, tag, sent)?;
            *buf = c.recv(1, tag)?;
        } else {
            let got = c.recv(0, tag)?;
            c.send(0, tag, got)?;
            *buf = sent;
        }
        Ok(())
    })?;
    Ok(round_trip / 2.0)
}

/// A fit's bytes per second, in words (a message between threads moves no bytes).
pub fn rate(f: &Fit) -> String {
    match f.per_unit > 0.0 {
        true => format!("{:.2} GB/s", 1e-9 / f.per_unit),
        false => "no cost per byte".into(),
    }
}

/// Fits each kind, prints the fits and the held-out check, and returns the fits.
pub fn measure(gpus: &[Gpu]) -> anyhow::Result<Links> {
    anyhow::ensure!(
        gpus.len() >= 4,
        "the link measurement needs 4 virtual devices"
    );
    let mut stage_pts: Vec<(Terms, f64)> = Vec::new();
    let mut ring_pts: Vec<(Terms, f64)> = Vec::new();
    let mut msg_pts: Vec<(Terms, f64)> = Vec::new();
    println!(
        "  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "bytes", "staging ×1", "×2", "×4", "ring d=2", "d=4", "message"
    );
    for &b in &SIZES {
        let st = [1, 2, 4].map(|k| staged(gpus, k, b, false));
        let (r2, r4, msg) = (ring(2, b)?, ring(4, b)?, message(b)?);
        let mut row = format!("  {b:>10}");
        for (k, t) in [1, 2, 4].into_iter().zip(st) {
            let t = t?;
            row += &format!(" {:>10}", seconds(t));
            stage_pts.push((Links::staging_terms(b as f64, k), t));
        }
        println!(
            "{row} {:>10} {:>10} {:>10}",
            seconds(r2),
            seconds(r4),
            seconds(msg)
        );
        msg_pts.push((Links::bytes_terms(b as f64), msg));
        ring_pts.push((Links::ring_terms(b as f64, 2), r2));
        ring_pts.push((Links::ring_terms(b as f64, 4), r4));
    }
    let fit = |what: &str, pts: &[(Terms, f64)]| Fit::of(pts).with_context(|| what.to_string());
    let links = Links {
        transport: "in-process ring (threads of one process), 2 and 4 ranks; staging on 1, 2 and 4 devices at once".into(),
        staging: fit("staging", &stage_pts)?,
        ring: fit("ring all-reduce", &ring_pts)?,
        message: fit("message", &msg_pts)?,
    };
    for (name, f) in [
        ("staging", &links.staging),
        ("ring", &links.ring),
        ("message", &links.message),
    ] {
        println!(
            "  {name:<8} {:>9} {} + {}   ({} points, worst miss {:.1} %)",
            seconds(f.per_segment),
            if name == "ring" {
                "per step"
            } else {
                "per call"
            },
            rate(f),
            f.points,
            100.0 * f.max_miss
        );
    }
    println!("  held out: staged all-reduce over 3 devices, every rank at once (download → ring → upload)");
    for &b in &HELD_OUT {
        let measured = staged(gpus, 3, b, true)?;
        let predicted = links.staged_all_reduce(b as f64, 3);
        println!(
            "    {:>6} KiB   measured {:>9}   predicted {:>9}   {:+.1} %",
            b >> 10,
            seconds(measured),
            seconds(predicted),
            100.0 * (predicted / measured - 1.0)
        );
    }
    Ok(links)
}
