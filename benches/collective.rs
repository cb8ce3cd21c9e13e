//! Host-staged all-reduce bandwidth next to host memcpy bandwidth, measured in one run.
//!
//! What is measured, for S ∈ {1, 4, 16, 64} MiB of f32 (n = S/4 elements per rank) and
//! d ∈ {2, 4, 8} ranks:
//!
//! - `memcpy`: one `copy_from_slice` of S bytes between two pre-touched host buffers on one
//!   thread. memcpy GB/s = S / t_memcpy (median).
//! - `ring`: [`triaxis::collective::host::ring_all_reduce`] (sum, default [`Opts`]) over d
//!   host buffers of n elements: one OS thread per rank, 2(d−1) rounds, the time includes
//!   spawning and joining the rank threads (they are part of every call).
//! - `device`: [`triaxis::collective::all_reduce`] with [`Algo::Ring`] at 16 MiB on d virtual
//!   devices of one adapter (`WGPU_BACKEND` picks it): download → host ring → upload, waiting
//!   for the uploads to land. Staging (download + upload wall time, from the [`Ledger`]) is
//!   reported separately as the mean over ranks. Skipped with a `SKIP` line without an adapter.
//!
//! Bus bandwidth follows NCCL's definition (nccl-tests, `PERFORMANCE.md`): an all-reduce of S
//! bytes over d ranks must move 2(d−1)/d · S bytes in and out of every rank (the ring's
//! reduce-scatter + all-gather volume, also what the ledger records), so
//!
//! ```text
//!   bus bandwidth = 2(d−1)/d · S / t        (algorithm bandwidth S / t, scaled by 2(d−1)/d)
//! ```
//!
//! which makes the number comparable across d and with the hardware's link/memory bandwidth.
//! The goal under test: ring bus bandwidth ≥ 0.5 × single-thread memcpy bandwidth. The summary
//! table prints the ratio and whether each row meets it.
//!
//! Timing: every call is timed on its own (`Instant`) inside criterion's `iter_custom`; tables
//! use the median over all timed calls (criterion's warm-up included — the median is robust to
//! it). Buffers are allocated and touched once, outside the timed closure, and never reset: rank
//! r starts filled with `r − (d−1)/2` (d is even here), so every element sums to exactly 0 and
//! after the first call all buffers hold zeros, forever — no growth to inf, and f32 adds on
//! zeros and normal numbers cost the same on x86/ARM (no denormals appear). GB/s = 1e9 bytes/s.
//!
//! Run: `cargo bench --bench collective` (about two minutes on two cores).

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, SamplingMode};
use triaxis::collective::{self, host, Algo, Ledger, Opts};
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::pipeline::simulate::Link;

const SIZES_MIB: [usize; 4] = [1, 4, 16, 64];
const RANKS: [usize; 3] = [2, 4, 8];
const DEVICE_MIB: usize = 16;
const GOAL: f64 = 0.5;
const MIB: usize = 1 << 20;

/// Times each of `iters` calls of `f` on its own, appends the seconds to `samples`, and returns
/// the total for criterion.
fn timed(samples: &mut Vec<f64>, iters: u64, mut f: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        f();
        let e = t.elapsed();
        samples.push(e.as_secs_f64());
        total += e;
    }
    total
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// NCCL bus bandwidth in GB/s of an all-reduce of `bytes` over `d` ranks taking `t` seconds.
fn bus_gbs(bytes: usize, d: usize, t: f64) -> f64 {
    2.0 * (d - 1) as f64 / d as f64 * bytes as f64 / t / 1e9
}

/// d buffers of n elements whose per-element sum over ranks is exactly 0 (d even).
fn zero_sum_bufs(d: usize, n: usize) -> Vec<Vec<f32>> {
    (0..d)
        .map(|r| vec![r as f32 - (d - 1) as f32 / 2.0; n])
        .collect()
}

struct HostRow {
    mib: usize,
    d: usize,
    ring: f64,
    memcpy: f64,
}

struct DeviceRow {
    d: usize,
    total: f64,
    /// Mean over ranks of one rank's download + upload wall time.
    staging: f64,
}

fn bench(c: &mut Criterion) {
    let link = Link::ideal();
    let opts = Opts::default();
    let mut rows = Vec::new();
    let mut memcpy_med = Vec::new();

    for &mib in &SIZES_MIB {
        let bytes = mib * MIB;
        let n = bytes / 4;
        let mut g = c.benchmark_group(format!("allreduce_{mib}MiB"));
        g.sampling_mode(SamplingMode::Flat);

        let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut dst = vec![1.0f32; n];
        let mut t_copy = Vec::new();
        g.bench_function("memcpy", |b| {
            b.iter_custom(|iters| {
                timed(&mut t_copy, iters, || {
                    black_box(&mut dst).copy_from_slice(black_box(&src));
                })
            })
        });
        drop((src, dst));
        let memcpy = median(&mut t_copy);
        memcpy_med.push((mib, memcpy));

        for &d in &RANKS {
            let mut bufs = zero_sum_bufs(d, n);
            let mut t_ring = Vec::new();
            g.bench_function(format!("ring_d{d}"), |b| {
                b.iter_custom(|iters| {
                    timed(&mut t_ring, iters, || {
                        let mut ledger = Ledger::new();
                        host::ring_all_reduce(&mut bufs, &opts, &mut ledger, &link)
                            .expect("ring all-reduce");
                        black_box(&ledger);
                    })
                })
            });
            assert!(
                bufs.iter().all(|b| b.iter().all(|&x| x == 0.0)),
                "ring all-reduce of a zero-sum input did not give zeros"
            );
            rows.push(HostRow {
                mib,
                d,
                ring: median(&mut t_ring),
                memcpy,
            });
        }
        g.finish();
    }

    let device = device_rows(c, &link, &opts);

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "host ring all-reduce (sum, one thread per rank, {cores} cores) vs single-thread memcpy; \
         bus GB/s = 2(d−1)/d·S/t; goal: bus ≥ {GOAL}× memcpy"
    );
    println!(
        "{:>7} {:>2} {:>13} {:>9} {:>11} {:>10} {:>5}",
        "S", "d", "ring median", "bus GB/s", "memcpy GB/s", "bus/memcpy", "goal"
    );
    let mut met = 0;
    for r in &rows {
        let bytes = r.mib * MIB;
        let bus = bus_gbs(bytes, r.d, r.ring);
        let mem = bytes as f64 / r.memcpy / 1e9;
        let ratio = bus / mem;
        met += usize::from(ratio >= GOAL);
        println!(
            "{:>4}MiB {:>2} {:>10.3} ms {:>9.2} {:>11.2} {:>9.2}× {:>5}",
            r.mib,
            r.d,
            r.ring * 1e3,
            bus,
            mem,
            ratio,
            if ratio >= GOAL { "met" } else { "MISS" }
        );
    }
    println!(
        "goal bus ≥ {GOAL}× memcpy met in {met} of {} rows",
        rows.len()
    );
    for (mib, t) in &memcpy_med {
        println!(
            "memcpy {mib:>2}MiB: {:.3} ms median ({:.2} GB/s)",
            t * 1e3,
            (mib * MIB) as f64 / t / 1e9
        );
    }

    match device {
        Ok((adapter, rows)) => {
            let bytes = DEVICE_MIB * MIB;
            println!();
            println!(
                "device-staged ring all-reduce, {DEVICE_MIB} MiB per device, virtual devices on {adapter} \
                 (staging = one rank's download + upload, mean over ranks)"
            );
            println!(
                "{:>2} {:>13} {:>9} {:>13} {:>13}",
                "d", "total median", "bus GB/s", "staging", "host part"
            );
            for r in &rows {
                println!(
                    "{:>2} {:>10.3} ms {:>9.2} {:>10.3} ms {:>10.3} ms",
                    r.d,
                    r.total * 1e3,
                    bus_gbs(bytes, r.d, r.total),
                    r.staging * 1e3,
                    (r.total - r.staging) * 1e3
                );
            }
        }
        Err(e) => println!("SKIP: device-staged all-reduce: no GPU adapter ({e})"),
    }
}

/// The device-staged all-reduce at [`DEVICE_MIB`] for every d; Err when no adapter opens.
fn device_rows(
    c: &mut Criterion,
    link: &Link,
    opts: &Opts,
) -> Result<(String, Vec<DeviceRow>), String> {
    let dmax = *RANKS.iter().max().expect("ranks");
    let gpus = AdapterChoice::from_env()
        .and_then(|ch| Gpu::open_virtual(&ch, dmax))
        .map_err(|e| e.to_string())?;
    let adapter = gpus[0].adapter_name();
    let n = DEVICE_MIB * MIB / 4;
    let mut g = c.benchmark_group(format!("device_allreduce_{DEVICE_MIB}MiB"));
    g.sampling_mode(SamplingMode::Flat);
    let mut rows = Vec::new();
    for &d in &RANKS {
        let gpus = &gpus[..d];
        let views: Vec<_> = gpus.iter().map(|g| g.buffer("grad", n)).collect();
        for ((g, v), x) in gpus.iter().zip(&views).zip(zero_sum_bufs(d, n)) {
            g.upload(v, &x).expect("upload");
            g.sync().expect("sync");
        }
        let mut t_total = Vec::new();
        let mut t_stage = Vec::new();
        g.bench_function(format!("ring_d{d}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut ledger = Ledger::new();
                    let t = Instant::now();
                    collective::all_reduce(gpus, &views, Algo::Ring, opts, &mut ledger, link)
                        .expect("device all-reduce");
                    let e = t.elapsed();
                    total += e;
                    t_total.push(e.as_secs_f64());
                    t_stage.push(ledger.staged_wall() / d as f64);
                }
                total
            })
        });
        rows.push(DeviceRow {
            d,
            total: median(&mut t_total),
            staging: median(&mut t_stage),
        });
    }
    g.finish();
    Ok((adapter, rows))
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
