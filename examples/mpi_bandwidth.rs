//! All-reduce bus bandwidth of the three ways this crate sums a buffer over d ranks, side by
//! side: MPI `ordered` (the project's ring on MPI point-to-point messages), MPI `native`
//! (the library's own all-reduce, MPI_Iallreduce waited on by the communicator) and the
//! in-process ring (`local_group`: the ranks are threads of one process), each through the
//! `Communicator` trait as the trainer calls it. With `--train`, also data-parallel training
//! tokens/s at dp = 2: the train example as two MPI processes against two virtual devices in
//! one process.
//!
//! `cargo run --release --features mpi --example mpi_bandwidth [-- --train]`, without mpirun:
//! it measures the in-process ring itself and starts itself under `mpirun -n d` (the hidden
//! `--child` mode: rank 0 prints one JSON line per measurement) for every d of `--ranks`, then
//! prints one table and writes `<out>/mpi_bandwidth.json`.
//!
//! With `--calibration FILE` (a calibration `simulate --calibrate` wrote on this machine's
//! adapter), it also fits MPI ordered's all-reduces to the simulator's ring model,
//! 2(d−1)·α + 2(d−1)/d · S / β, and writes `<out>/calibration_mpi.json`: FILE with its ring
//! and point-to-point message priced by that fit (a ring step is one message of S/d bytes;
//! the host staging stays FILE's), for `simulate --calibration … --comm calibrated`. FILE
//! itself is only read.
//!
//! busbw = 2(d−1)/d · S / t (nccl-tests' all-reduce convention), S the buffer in bytes, t the
//! median over `--iters` timed calls after `--warmup` untimed ones; a call's time is its
//! slowest rank's, and the ranks line up on a barrier before every call. Every flag is checked
//! before any work (exit 2).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use indicatif::ProgressBar;
use serde_json::{json, Value};
use triaxis::collective::Algo;
use triaxis::comm::mpi::{self, Reduction};
use triaxis::comm::{launched_by_mpirun, local_group, Communicator, GroupOptions};
use triaxis::sim::{Calibration, Fit, Links, Terms};

#[path = "support/flags.rs"]
mod flags;
#[path = "support/mpirun.rs"]
mod mpirun;
#[path = "support/progress.rs"]
mod progress;
use mpirun::mpirun;

/// The goal: ordered reaches this fraction of native at sizes of at least `GOAL_MIB`.
const GOAL_RATIO: f64 = 0.8;
const GOAL_MIB: usize = 16;

/// The training comparison's model and batch: small enough for a few seconds per run.
const TRAIN_ARGS: &str = "--channels 64 --heads 4 --layers 2 --batch 4 --seq 32 --dp 2 \
    --microbatches 2 --eval-every 1000 --eval-batches 1 --log-every 0 --no-checkpoint";

#[derive(Parser, Debug)]
#[command(about = "Measure all-reduce bus bandwidth: MPI ordered, MPI native, in-process ring")]
struct Args {
    /// Message sizes in MiB of f32 (comma list, each 1 to 256).
    #[arg(long, default_value = "1,4,16,64")]
    sizes_mib: String,
    /// Group sizes d (comma list, each 2 to 8).
    #[arg(long, default_value = "2,4")]
    ranks: String,
    /// Timed calls per measurement (1 to 1000); the median is reported.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Untimed calls before them (1 to 100); the first checks the sum.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Also compare training tokens/s at dp = 2: mpirun -n 2 against one process.
    #[arg(long)]
    train: bool,
    /// Optimizer steps of each training run (1 to 100000).
    #[arg(long, default_value_t = 30)]
    train_steps: usize,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/mpi_bandwidth")]
    out: PathBuf,
    /// A calibration with communication measured (`simulate --calibrate FILE`): write it again
    /// with MPI ordered's ring fit to `<out>/calibration_mpi.json`.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Internal: one rank of the job this program starts under mpirun.
    #[arg(long, hide = true)]
    child: bool,
}

/// The checked flags: sizes in MiB, group sizes, the train binary (with `--train`), the
/// calibration to price MPI into (with `--calibration`).
type Checked = (Vec<usize>, Vec<usize>, Option<PathBuf>, Option<Calibration>);

fn main() {
    let a = Args::parse();
    flags::exit_status(validate(&a), |checked| match a.child {
        true => child(&a, &checked.0),
        false => parent(&a, checked),
    });
}

/// Every flag, and what the mode needs (mpirun, the train binary); the output directory last.
fn validate(a: &Args) -> anyhow::Result<Checked> {
    let sizes: Vec<usize> = flags::list("--sizes-mib", &a.sizes_mib)?;
    flags::list_in_range("--sizes-mib", &sizes, 1, 256)?;
    let ranks: Vec<usize> = flags::list("--ranks", &a.ranks)?;
    flags::list_in_range("--ranks", &ranks, 2, 8)?;
    flags::in_range("--iters", a.iters, 1, 1000)?;
    flags::in_range("--warmup", a.warmup, 1, 100)?;
    flags::in_range("--train-steps", a.train_steps, 1, 100_000)?;
    if a.child {
        if !launched_by_mpirun() {
            bail!("--child is this program's own mode under mpirun: run it without --child");
        }
        return Ok((sizes, ranks, None, None));
    }
    if launched_by_mpirun() {
        bail!("run mpi_bandwidth without mpirun: it starts mpirun -n d itself for every --ranks");
    }
    if !mpirun::found() {
        bail!("mpirun is not on PATH: install Open MPI (apt install openmpi-bin libopenmpi-dev)");
    }
    let train_bin = if a.train { Some(train_binary()?) } else { None };
    let calibration = match &a.calibration {
        Some(path) => {
            flags::input_file("--calibration", path)?;
            let c = Calibration::load(path)?;
            if c.links.is_none() {
                bail!(
                    "--calibration {} has no communication measured: make it with \
                     `cargo run --release --example simulate -- --calibrate FILE`",
                    path.display()
                );
            }
            Some(c)
        }
        None => None,
    };
    flags::output_dir("--out", &a.out)?;
    Ok((sizes, ranks, train_bin, calibration))
}

/// The train example beside this one (`target/<profile>/examples/train`), or how to build it.
fn train_binary() -> anyhow::Result<PathBuf> {
    let here = std::env::current_exe().context("this program's path")?;
    let dir = here.parent().context("this program's directory")?;
    let bin = dir.join(format!("train{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        let release = dir.parent().is_some_and(|p| p.ends_with("release"));
        bail!(
            "--train needs the train example at {}: build it with cargo build{} --features mpi \
             --example train",
            bin.display(),
            if release { " --release" } else { "" }
        );
    }
    Ok(bin)
}

/// This rank's all-reduces of `mib` MiB: the slowest rank's seconds of each timed call (every
/// rank gets the same list). On any error the group is aborted, so no peer waits for this rank.
fn measure(comm: &mut dyn Communicator, mib: usize, a: &Args) -> anyhow::Result<Vec<f64>> {
    let r = timed(comm, mib << 18, a);
    if let Err(e) = &r {
        comm.abort(&format!("rank {}: {e}", comm.rank()));
    }
    r
}

fn timed(comm: &mut dyn Communicator, n: usize, a: &Args) -> anyhow::Result<Vec<f64>> {
    let (d, warmup, iters) = (comm.size(), a.warmup, a.iters);
    // the first warm-up checks the sum of ones; the rest reduce zeros, which stay zeros over
    // any number of calls (no overflow, no denormals: f32 adds take the same time)
    let mut buf = vec![1f32; n];
    comm.all_reduce(&mut buf, Algo::Ring, None, false)?;
    if let Some(i) = [0, n / 2, n - 1].into_iter().find(|&i| buf[i] != d as f32) {
        let got = buf[i];
        bail!("element {i} is {got} after summing ones over {d} ranks");
    }
    buf.fill(0.0);
    let mut times = Vec::with_capacity(iters);
    for k in 1..warmup + iters {
        // a byte all-gather is a barrier: no rank leaves before every rank has entered
        comm.all_gather_bytes(Vec::new())?;
        let t = Instant::now();
        comm.all_reduce(&mut buf, Algo::Ring, None, false)?;
        if k >= warmup {
            times.push(t.elapsed().as_secs_f64());
        }
        comm.ledger_mut().entries.clear();
    }
    // every rank's times on every rank: a call took as long as its slowest rank
    let all = comm.all_gather_bytes(times.iter().flat_map(|t| t.to_le_bytes()).collect())?;
    let at = |b: &[u8], k: usize| f64::from_le_bytes(b[8 * k..][..8].try_into().unwrap());
    let slowest = |k| all.iter().map(|b| at(b, k)).fold(0.0, f64::max);
    Ok((0..iters).map(slowest).collect())
}

/// One measurement (a row of the JSON): an implementation at group size d and `mib` MiB, from
/// every timed call's slowest-rank seconds.
fn row(imp: &str, d: usize, mib: usize, times: Vec<f64>) -> Value {
    let mut t = times.clone();
    t.sort_by(f64::total_cmp);
    let median = (t[(t.len() - 1) / 2] + t[t.len() / 2]) / 2.0;
    let busbw = 2.0 * (d - 1) as f64 / d as f64 * (mib << 20) as f64 / median / 1e9;
    json!({"impl": imp, "d": d, "mib": mib, "median_s": median, "busbw_gb_s": busbw,
        "times_s": times})
}

/// The `--child` mode: one rank of `mpirun -n d`; rank 0 prints a JSON line per measurement.
fn child(a: &Args, sizes: &[usize]) -> anyhow::Result<()> {
    let universe = mpi::init()?; // first in, last dropped: it finalises MPI
    let world = universe.world();
    let (rank, d) = (mpi::world_rank(&world), mpi::world_size(&world));
    let all: Vec<usize> = (0..d).collect();
    for reduction in [Reduction::Ordered, Reduction::Native] {
        let mut comm = mpi::mpi_group(&world, &all, &GroupOptions::default(), reduction)?
            .ok_or_else(|| anyhow!("rank {rank} is not in the world group"))?;
        for &mib in sizes {
            let r = row(reduction.name(), d, mib, measure(&mut comm, mib, a)?);
            if rank == 0 {
                println!("{}", serde_json::to_string(&r)?);
            }
        }
    }
    Ok(())
}

/// The in-process ring at group size d: one thread per rank.
fn local_rows(a: &Args, d: usize, sizes: &[usize]) -> anyhow::Result<Vec<Value>> {
    let devices: Vec<usize> = (0..d).collect();
    let mut rows = Vec::new();
    for &mib in sizes {
        let comms = local_group(&devices, &GroupOptions::default());
        let results: Vec<_> = std::thread::scope(|s| {
            let ranks: Vec<_> = (comms.into_iter())
                .map(|mut c| s.spawn(move || measure(&mut c, mib, a)))
                .collect();
            let panicked = || Err(anyhow!("an in-process rank panicked"));
            ranks
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| panicked()))
                .collect()
        });
        // every rank returns the same slowest-rank times: keep rank 0's
        let mut times = results.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        rows.push(row("in-process", d, mib, times.swap_remove(0)));
    }
    Ok(rows)
}

/// Starts this program under `mpirun -n d` with its own (checked) flags and reads its rows.
fn mpi_rows(d: usize, sizes: usize) -> anyhow::Result<Vec<Value>> {
    let me = std::env::current_exe().context("this program's path")?;
    let out = mpirun(d)
        .arg(me)
        .args(std::env::args_os().skip(1))
        .arg("--child")
        .stderr(Stdio::inherit())
        .output()
        .context("starting mpirun")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("mpirun -n {d} failed ({}):\n{text}", out.status);
    }
    // mpirun may add lines of its own: keep those that are rows
    let rows: Vec<Value> = text.lines().flat_map(serde_json::from_str).collect();
    let rows: Vec<Value> = rows.into_iter().filter(|r| r["impl"].is_string()).collect();
    if rows.len() != 2 * sizes {
        let (got, want) = (rows.len(), 2 * sizes);
        bail!("mpirun -n {d} printed {got} rows, not {want}:\n{text}");
    }
    Ok(rows)
}

fn parent(a: &Args, (sizes, ranks, train_bin, calibration): Checked) -> anyhow::Result<()> {
    let bar = progress::bar((2 * ranks.len() + 2 * train_bin.is_some() as usize) as u64);
    let mut rows = Vec::new();
    for &d in &ranks {
        bar.set_message(format!("in-process ring, d = {d}"));
        rows.extend(local_rows(a, d, &sizes)?);
        bar.inc(1);
        bar.set_message(format!("mpirun -n {d}"));
        rows.extend(mpi_rows(d, sizes.len())?);
        bar.inc(1);
    }
    let train = train_bin.map(|b| train_compare(a, &b, &bar)).transpose()?;
    bar.finish_and_clear();
    let (ratios, goal) = table(a, &rows, &ranks, &sizes);
    if let Some(t) = &train {
        let steps = a.train_steps;
        println!("\ntraining tokens/s, dp = 2, {steps} steps of: train {TRAIN_ARGS}");
        let r = |i: usize, k: &str| t["runs"][i][k].as_f64().unwrap_or(f64::NAN);
        let names = ["in-process (2 virtual devices)", "mpirun -n 2"];
        for (i, name) in names.iter().enumerate() {
            let (tps, wall) = (r(i, "tokens_per_s"), r(i, "wall_s"));
            println!("  {name:<31} {tps:>9.0} tokens/s   {wall:>6.1} s wall clock");
        }
        let ratio = r(1, "tokens_per_s") / r(0, "tokens_per_s");
        println!("  mpirun / in-process: {ratio:.2}× tokens/s");
    }
    let path = a.out.join("mpi_bandwidth.json");
    let report = json!({
        "busbw": "2(d-1)/d * S / t, GB/s (1e9 bytes/s); t: median over iters of the slowest rank",
        "iters": a.iters, "warmup": a.warmup,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "goal": {"ratio": GOAL_RATIO, "min_mib": GOAL_MIB, "met": goal},
        "rows": rows, "ratios": ratios, "train": train,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", path.display());
    if let Some(c) = calibration {
        let c = with_mpi_ring(c, &rows, &ranks)?;
        let path = a.out.join("calibration_mpi.json");
        triaxis::record::write_text(&path, &c.to_json())?;
        println!(
            "wrote {} (simulate --calibration {0} --comm calibrated)",
            path.display()
        );
    }
    Ok(())
}

/// `c` with its ring and message priced by MPI ordered's all-reduces in `rows`: the ring
/// model's α per step and β fitted to every (d, size); a message is one ring step.
fn with_mpi_ring(
    mut c: Calibration,
    rows: &[Value],
    ranks: &[usize],
) -> anyhow::Result<Calibration> {
    let points: Vec<(Terms, f64)> = rows
        .iter()
        .filter(|r| r["impl"] == "ordered")
        .filter_map(|r| {
            let (d, mib, t) = (
                r["d"].as_u64()?,
                r["mib"].as_u64()?,
                r["median_s"].as_f64()?,
            );
            Some((Links::ring_terms((mib << 20) as f64, d as usize), t))
        })
        .collect();
    let ring = Fit::of(&points).context("fitting MPI ordered's all-reduces")?;
    println!(
        "MPI ordered as the simulator's ring: {:.1} µs per step + {:.2} GB/s ({} points, worst miss {:.1} %)",
        ring.per_segment * 1e6,
        1e-9 / ring.per_unit.max(1e-300),
        ring.points,
        100.0 * ring.max_miss
    );
    let links = c
        .links
        .as_mut()
        .context("the calibration has no communication")?;
    links.transport = format!(
        "ring and message: MPI ordered, mpirun -n {ranks:?} on one host over shared memory; \
         staging: measured on the adapter by simulate --calibrate"
    );
    links.ring = ring;
    links.message = ring;
    Ok(c)
}

/// Prints the table; the ordered/native ratios and whether the goal is met (`None`: no size
/// of at least `GOAL_MIB` measured).
fn table(a: &Args, rows: &[Value], ranks: &[usize], sizes: &[usize]) -> (Vec<Value>, Option<bool>) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let (iters, warmup) = (a.iters, a.warmup);
    println!("all-reduce busbw = 2(d−1)/d · S / t in GB/s; t: median of {iters} calls after");
    println!("{warmup} warm-up, each the slowest rank's; {cores} cores here");
    println!(" d size MiB  in-process  mpi ordered  mpi native  ordered/native     goal");
    let (mut ratios, mut goal) = (Vec::new(), None::<bool>);
    for (&d, &mib) in ranks.iter().flat_map(|d| sizes.iter().map(move |m| (d, m))) {
        let of = |imp: &str| {
            rows.iter()
                .find(|r| r["impl"] == imp && r["d"] == d && r["mib"] == mib)
        };
        let [local, ordered, native] = ["in-process", "ordered", "native"]
            .map(|i| of(i).and_then(|r| r["busbw_gb_s"].as_f64()));
        let ratio = ordered.zip(native).map(|(o, n)| o / n);
        let met = ratio.filter(|_| mib >= GOAL_MIB).map(|r| r >= GOAL_RATIO);
        goal = met.map_or(goal, |m| Some(goal.unwrap_or(true) && m));
        let cell = |v: Option<f64>, w| v.map_or(format!("{:>w$}", "-"), |v| format!("{v:>w$.3}"));
        let mark = met.map_or("-", |m| if m { "met" } else { "NOT met" });
        let cells =
            [(local, 11), (ordered, 12), (native, 11), (ratio, 15)].map(|(v, w)| cell(v, w));
        println!("{d:>2} {mib:>8} {} {mark:>8}", cells.join(" "));
        ratios.push(json!({"d": d, "mib": mib, "ordered_over_native": ratio, "goal_met": met}));
    }
    let verdict = match goal {
        Some(true) => "met at every such size",
        Some(false) => "NOT met (rows marked NOT met)",
        None => "not measured (no size that large)",
    };
    println!("goal ordered ≥ {GOAL_RATIO}× native at ≥ {GOAL_MIB} MiB: {verdict}");
    (ratios, goal)
}

/// Training tokens/s at dp = 2: two MPI processes against two virtual devices in one process,
/// each run's record `tokens_per_s` and its wall clock.
fn train_compare(a: &Args, bin: &Path, bar: &ProgressBar) -> anyhow::Result<Value> {
    let steps = a.train_steps.to_string();
    let mut got = Vec::new();
    for name in ["in_process", "mpi"] {
        bar.set_message(format!("train, {name}"));
        let record = a.out.join(format!("train_{name}.json"));
        // the same command line, in one process or as rank 0 and 1 of mpirun -n 2
        let mut c = Command::new(bin);
        if name == "mpi" {
            c = mpirun(2);
            c.arg(bin);
        }
        let t = Instant::now();
        let args = TRAIN_ARGS.split_whitespace().chain(["--steps", &steps]);
        let out = c.args(args).arg("--record").arg(&record).output()?;
        let wall = t.elapsed().as_secs_f64();
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            bail!("train ({name}) failed: {err}");
        }
        let rec: Value = serde_json::from_str(&std::fs::read_to_string(&record)?)?;
        let no_tps = || anyhow!("{} has no tokens_per_s", record.display());
        let tps = rec["tokens_per_s"].as_f64().ok_or_else(no_tps)?;
        got.push(json!({"run": name, "tokens_per_s": tps, "wall_s": wall, "record": record}));
        bar.inc(1);
    }
    Ok(json!({"args": TRAIN_ARGS, "steps": a.train_steps, "runs": got}))
}
