//! Host-staged all-reduce bandwidth next to host memcpy bandwidth, measured in one run.
//!
//! What is measured, for S ∈ {1, 4, 16, 64} MiB of f32 (n = S/4 elements per rank) and
//! d ∈ {2, 4, 8} ranks:
//!
//! - `memcpy`: one `copy_from_slice` of S bytes between two pre-touched host buffers on one
//!   thread. memcpy GB/s = S / t_memcpy (median).
//! - `memcpy2`: two threads each copying S bytes between their own pair of buffers at once;
//!   `P_eff` = aggregate GB/s over memcpy GB/s: how many cores' worth of memory bandwidth the
//!   host really has at that size (about 1 once S leaves the caches on a 2-vCPU VM; at 1 MiB
//!   the two thread spawns dominate).
//! - `ring`: [`triaxis::collective::host::ring_all_reduce`] (sum, default [`Opts`]) over d
//!   host buffers of n elements: the zero-copy ring, pipelined per slice on min(cores, d)
//!   workers (the calling thread and scoped threads spawned per call, their spawn and join
//!   included): each hop reads its chunk from the left neighbour's buffer, no copy of any sent
//!   chunk, each slice carried through all 2(d−1) rounds one L1-sized block at a time.
//! - two floors, not the library, doing the same chunk schedule (which chunk rank r adds or
//!   copies in which round) in place and in lock-step — rank r reads the chunk straight out of
//!   its left neighbour's buffer, a whole round at a time — with no allocation, no channel and
//!   no copy of the sent chunk; both are checked bitwise against the library ring before
//!   timing, at a small n and at one large enough for several workers and slices:
//!   - `inplace1`: all ranks on the calling thread, no threads at all: what the lock-step
//!     schedule's arithmetic and memory traffic alone cost on one core;
//!   - `inplaced`: one scoped thread per rank spawned per call, a `Barrier` between rounds:
//!     the lock-step ring with a thread per rank.
//!
//!   `ring / floor` below 1 is what pipelining the rounds per slice buys over lock-step.
//! - `device`: the host ring at 16 MiB on d virtual devices of one adapter (`WGPU_BACKEND`
//!   picks it), staged as the runtime's workers stage it: download → host ring → upload,
//!   waiting for the uploads to land (ranks one after another, as on one adapter). Staging
//!   (download + upload wall time) is reported separately as the mean over ranks. Skipped with a `SKIP` line without an adapter.
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
//! Ceiling on one host. NCCL's ranks each have their own link; here all d ranks share one
//! memory system, so the group's traffic adds up. Counting a memcpy of B bytes as B
//! "memcpy-bytes" (it reads B and writes B), a zero-copy ring round costs a rank 1.5·S/d
//! (reduce-scatter add: read two chunks, write one) or 1·S/d (all-gather copy), so the whole
//! all-reduce is 2.5(d−1)·S memcpy-bytes, and with P cores each copying at memcpy speed M:
//!
//! ```text
//!   t ≥ 2.5(d−1)·S / (P·M)   ⇒   bus / memcpy ≤ 0.8·P/d,   P = min(cores, d)
//! ```
//!
//! (0.8 at d = 2, 0.4 at d = 4, 0.2 at d = 8 on two cores, and less where the cores share the
//! memory bandwidth: P is really `P_eff`). Copying every sent chunk once more (as a ring of
//! channel messages does) makes it 4.5(d−1)·S and the bound 0.44·P/d. The table prints the
//! lock-step zero-copy bound as `ceil` and the ring's share of it as `/ceil`; the restated goal
//! for d > 2 is `/ceil` ≥ 0.5.
//!
//! The pipelined ring is not bound by the lock-step count: a slice's rounds run in L1, so each
//! rank's data is read from memory once and written once, d·S memcpy-bytes in all, and
//!
//! ```text
//!   t ≥ d·S / (P·M)   ⇒   bus / memcpy ≤ 2(d−1)·P/d²        (pipelined bound)
//! ```
//!
//! (1.0, 0.75, 0.44 at d = 2, 4, 8 with P = 2; half that with P_eff = 1). Single-thread memcpy
//! also reads each destination line before writing it, which the ring's adds do anyway, so a
//! measured row can sit somewhat above this bound.
//!
//! Timing: every call is timed on its own (`Instant`) inside criterion's `iter_custom`; tables
//! use the median over all timed calls (criterion's warm-up included — the median is robust to
//! it). Buffers are allocated and touched once, outside the timed closure, and never reset: rank
//! r starts filled with `r − (d−1)/2` (d is even here), so every element sums to exactly 0 and
//! after the first call all buffers hold zeros, forever (the floors run on the same buffers,
//! after the ring) — no growth to inf, and f32 adds on zeros and normal numbers cost the same
//! on x86/ARM (no denormals appear). GB/s = 1e9 bytes/s.
//!
//! Run: `cargo bench --bench collective` (about 90 s on two cores). A criterion filter runs a
//! subset, e.g. `cargo bench --bench collective -- '^allreduce_16MiB/'`; what it skipped prints
//! as NaN (rows without a ring time are left out).

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, SamplingMode};
use triaxis::collective::{self, host, Ledger, Opts};
use triaxis::gpu::{AdapterChoice, Gpu, View};
use triaxis::link::Link;

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

/// The median; NaN when nothing was timed (the bench was filtered out on the command line).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
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

/// Mutable `bufs[a]` and shared `bufs[b]`, a ≠ b.
fn pair(bufs: &mut [Vec<f32>], a: usize, b: usize) -> (&mut [f32], &[f32]) {
    if a < b {
        let (lo, hi) = bufs.split_at_mut(b);
        (&mut lo[a], &hi[0])
    } else {
        let (lo, hi) = bufs.split_at_mut(a);
        (&mut hi[0], &lo[b])
    }
}

/// The ring all-reduce's chunk schedule, in place on one thread (see the `inplace` floor in the
/// file's doc). Reduce-scatter round s: rank r adds chunk (r−s−2) mod d of its left neighbour
/// into its own; all-gather round s: copies chunk (r−s−1) mod d. Within a round rank r writes
/// chunk k_r and its left neighbour writes k_r − 1 ≠ k_r, so the rank order does not matter.
fn inplace_ring(bufs: &mut [Vec<f32>]) {
    let (d, n) = (bufs.len(), bufs[0].len());
    for add in [true, false] {
        let lag = if add { 2 } else { 1 };
        for s in 0..d - 1 {
            for r in 0..d {
                let k = (r + 2 * d - s - lag) % d;
                let range = collective::chunk(n, d, k);
                let (own, left) = pair(bufs, r, (r + d - 1) % d);
                let (own, left) = (&mut own[range.clone()], &left[range]);
                if add {
                    own.iter_mut().zip(left).for_each(|(x, acc)| *x += *acc);
                } else {
                    own.copy_from_slice(left);
                }
            }
        }
    }
}

/// `buf` cut into its d ring chunks.
fn chunks_mut(buf: &mut [f32], d: usize) -> Vec<&mut [f32]> {
    let n = buf.len();
    let mut rest = buf;
    let mut out = Vec::with_capacity(d);
    for k in 0..d {
        let (head, tail) = rest.split_at_mut(collective::chunk(n, d, k).len());
        out.push(head);
        rest = tail;
    }
    out
}

/// [`inplace_ring`] with one scoped thread per rank and a barrier after every round. Each chunk
/// sits behind its own mutex; in a round rank r locks its chunk k_r and its left neighbour's
/// chunk k_r, and no other rank touches either in that round, so the locks never contend.
fn inplace_ring_threads(bufs: &mut [Vec<f32>]) {
    let d = bufs.len();
    let cells: Vec<Vec<Mutex<&mut [f32]>>> = bufs
        .iter_mut()
        .map(|b| chunks_mut(b, d).into_iter().map(Mutex::new).collect())
        .collect();
    let barrier = Barrier::new(d);
    std::thread::scope(|scope| {
        for r in 0..d {
            let (cells, barrier) = (&cells, &barrier);
            scope.spawn(move || {
                let left = (r + d - 1) % d;
                for add in [true, false] {
                    let lag = if add { 2 } else { 1 };
                    for s in 0..d - 1 {
                        let k = (r + 2 * d - s - lag) % d;
                        {
                            let mut own = cells[r][k].lock().expect("own chunk");
                            let src = cells[left][k].lock().expect("left chunk");
                            if add {
                                own.iter_mut().zip(src.iter()).for_each(|(x, a)| *x += *a);
                            } else {
                                own.copy_from_slice(&src);
                            }
                        }
                        barrier.wait();
                    }
                }
            });
        }
    });
}

/// The floors do the library ring's additions in the library ring's order: same bits, at `n`
/// elements per rank (make it odd for chunks of unequal lengths).
fn check_inplace_matches_ring(d: usize, n: usize) {
    let mut a: Vec<Vec<f32>> = (0..d)
        .map(|r| {
            (0..n)
                .map(|i| ((i * 7 + r * 13) % 17) as f32 * 0.1)
                .collect()
        })
        .collect();
    let mut b = a.clone();
    host::ring_all_reduce(&mut a, &Opts::default(), &mut Ledger::new(), &Link::ideal())
        .expect("ring all-reduce");
    let mut c = b.clone();
    inplace_ring(&mut b);
    assert_eq!(a, b, "one-thread floor and library ring differ at d = {d}");
    inplace_ring_threads(&mut c);
    assert_eq!(a, c, "threaded floor and library ring differ at d = {d}");
}

struct HostRow {
    mib: usize,
    d: usize,
    ring: f64,
    inplace1: f64,
    inplaced: f64,
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
    for &d in &RANKS {
        check_inplace_matches_ring(d, 1000 + d / 2);
        check_inplace_matches_ring(d, 3 * MIB / 4 + 2 * d + 1); // several workers and slices
    }

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
        let mut pairs = [(src.clone(), dst.clone()), (src, dst)];
        let mut t_copy2 = Vec::new();
        g.bench_function("memcpy2", |b| {
            b.iter_custom(|iters| {
                timed(&mut t_copy2, iters, || {
                    std::thread::scope(|scope| {
                        for (s, d) in pairs.iter_mut() {
                            scope.spawn(move || black_box(d).copy_from_slice(black_box(s)));
                        }
                    })
                })
            })
        });
        drop(pairs);
        let memcpy = median(&mut t_copy);
        memcpy_med.push((mib, memcpy, median(&mut t_copy2)));

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
                t_ring.is_empty() || bufs.iter().all(|b| b.iter().all(|&x| x == 0.0)),
                "ring all-reduce of a zero-sum input did not give zeros"
            );
            let mut t_inplace1 = Vec::new();
            g.bench_function(format!("inplace1_d{d}"), |b| {
                b.iter_custom(|iters| {
                    timed(&mut t_inplace1, iters, || {
                        inplace_ring(black_box(&mut bufs))
                    })
                })
            });
            let mut t_inplaced = Vec::new();
            g.bench_function(format!("inplaced_d{d}"), |b| {
                b.iter_custom(|iters| {
                    timed(&mut t_inplaced, iters, || {
                        inplace_ring_threads(black_box(&mut bufs))
                    })
                })
            });
            drop(bufs);
            rows.push(HostRow {
                mib,
                d,
                ring: median(&mut t_ring),
                inplace1: median(&mut t_inplace1),
                inplaced: median(&mut t_inplaced),
                memcpy,
            });
        }
        g.finish();
    }

    let device = device_rows(c, &link, &opts);

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "host ring all-reduce (sum, zero-copy, pipelined on min(cores, d) workers, {cores} cores) \
         vs single-thread memcpy; bus GB/s = 2(d−1)/d·S/t; goal: bus ≥ {GOAL}× memcpy"
    );
    println!(
        "{:>6} {:>2} {:>11} {:>8} {:>8} {:>7} {:>4} {:>5} {:>6} {:>9} {:>9} {:>10}",
        "S",
        "d",
        "ring (med)",
        "bus GB/s",
        "mcpyGB/s",
        "bus/mc",
        "goal",
        "ceil",
        "/ceil",
        "floor1 GB",
        "floord GB",
        "ring/floor"
    );
    let (mut met, mut shown) = (0, 0);
    for r in rows.iter().filter(|r| r.ring.is_finite()) {
        let bytes = r.mib * MIB;
        let bus = bus_gbs(bytes, r.d, r.ring);
        let mem = bytes as f64 / r.memcpy / 1e9;
        let ratio = bus / mem;
        let ceil = 0.8 * r.d.min(cores) as f64 / r.d as f64;
        met += usize::from(ratio >= GOAL);
        shown += 1;
        println!(
            "{:>3}MiB {:>2} {:>8.3} ms {:>8.2} {:>8.2} {:>6.2}× {:>4} {:>4.2}× {:>5.2}× {:>9.2} {:>9.2} {:>9.2}×",
            r.mib,
            r.d,
            r.ring * 1e3,
            bus,
            mem,
            ratio,
            if ratio >= GOAL { "met" } else { "MISS" },
            ceil,
            ratio / ceil,
            bus_gbs(bytes, r.d, r.inplace1),
            bus_gbs(bytes, r.d, r.inplaced),
            r.ring / r.inplace1.min(r.inplaced)
        );
    }
    println!(
        "goal bus ≥ {GOAL}× memcpy met in {met} of {shown} rows; ceil = lock-step zero-copy bound \
         0.8·min(cores, d)/d, /ceil = bus/mc over it (restated goal ≥ 0.5; see the file's doc); \
         floor1/floord = bus GB/s of the lock-step zero-copy schedule on 1 thread / d threads; \
         ring/floor = ring time over the faster floor"
    );
    for (mib, t, t2) in memcpy_med.iter().filter(|(_, t, _)| t.is_finite()) {
        println!(
            "memcpy {mib:>2}MiB: {:.3} ms median ({:.2} GB/s); two threads at once: {:.2} GB/s \
             together, P_eff = {:.2}",
            t * 1e3,
            (mib * MIB) as f64 / t / 1e9,
            2.0 * (mib * MIB) as f64 / t2 / 1e9,
            2.0 * t / t2
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
            for r in rows.iter().filter(|r| r.total.is_finite()) {
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

/// One device-staged ring all-reduce as the runtime's workers stage it: every rank downloads
/// its view, the host ring sums, every rank uploads and waits for it to land. Wall time, and
/// the staging seconds summed over ranks (downloads and uploads).
fn device_all_reduce(gpus: &[Gpu], views: &[View], opts: &Opts, link: &Link) -> (Duration, f64) {
    let t = Instant::now();
    let mut staged = 0.0;
    let mut bufs: Vec<Vec<f32>> = gpus
        .iter()
        .zip(views)
        .map(|(g, v)| {
            let t = Instant::now();
            let x = g.download(v).expect("download");
            staged += t.elapsed().as_secs_f64();
            x
        })
        .collect();
    host::ring_all_reduce(&mut bufs, opts, &mut Ledger::new(), link).expect("host ring");
    for ((g, v), x) in gpus.iter().zip(views).zip(&bufs) {
        let t = Instant::now();
        g.upload(v, x).expect("upload");
        g.sync().expect("sync");
        staged += t.elapsed().as_secs_f64();
    }
    (t.elapsed(), staged)
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
                    let (e, staged) = device_all_reduce(gpus, &views, opts, link);
                    total += e;
                    t_total.push(e.as_secs_f64());
                    t_stage.push(staged / d as f64);
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
