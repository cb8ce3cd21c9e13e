//! The one runtime, against figures of the runners it replaced (measured when it replaced
//! them), in one run, medians over several steps.
//!
//! 1. **Exposed data-parallel communication on the device clock** (dp = 2 × pp = 2, 1F1B,
//!    m = 8, a small GPT, devices one at a time for clean kernel times, a 1 GB/s + 10 µs link:
//!    slow enough that a stage's ≈ 0.4 MB of gradients is a visible share of a backward pass).
//!    *Before* (the replaced `DpPipeline` runner, measured when the runtime replaced it:
//!    0.427 of 0.427 ms exposed, 100 %) all-reduced each stage after the whole schedule. The
//!    runtime reduces each gradient bucket right after the segment of the stage's last
//!    backward that finishes it, on a comm stream beside the compute; the replay of every
//!    program gives `comm` (link-model seconds of the busiest device's comm stream) and
//!    `exposed` (how much longer the step is than with that comm free). Two rows: the engine
//!    as the trainer builds it (25 MiB buckets — one bucket per stage of this model, so the
//!    first stage's reduction can only start after its last backward: nothing to hide it),
//!    and the runtime with 32 KiB buckets (about a tensor each, the share of a stage a 25 MiB
//!    bucket is of a ~300 MB stage; only the embedding's bucket, final at the very end of the
//!    backward, is left exposed). `exp/comm` is the figure of merit (goal ≤ 10 %); `step` is
//!    the device-clock step, the norm and AdamW included.
//! 2. **Executor overhead per action** (pp = 4, 1F1B, m = 8, the tiny model of
//!    `benches/pipeline.rs`, devices concurrent): (wall of a runtime step − wall of one
//!    device's `Trainer` step over the same microbatches) / passes per step (2·p·m), the two
//!    run in turn step by step so that load on the shared machine falls on both alike;
//!    `(best)` is the same from each one's fastest step. (The replaced
//!    `pipeline::executor::Pipeline` is gone from the library, and its row from this table.)
//!    Virtual devices share one CPU, so kernels cost what they cost on one device and the
//!    difference is the executor's: threads, communicators, host staging, timing (goal
//!    ≤ 100 µs). Concurrent devices now overlap on the shared cores, so that row can read
//!    below zero; the serial row runs them one at a time (a wait per pass included), and the
//!    third row isolates the executor: the runtime on one device over the same microbatches,
//!    (its step − the `Trainer`'s) / its 2·m passes, no overlap and no transfers, and under it
//!    the part of that step's wall its own device clock does not cover (host work between
//!    passes, the norm and its wait), per pass. The last
//!    line is the floor the device primitives set: wall per call of an upload, an untimed and
//!    a timed empty pass, and a download on one idle device.
//!
//! 3. **ZeRO-3 prefetch** (dp = 2, the model of 1., the same link): the device-clock step when
//!    each block's parameter gather is issued one block ahead of its compute (the runtime's
//!    lowering) and when it is issued right before it; the comm stream runs the gathers and
//!    the reduce-scatters, a block's compute waits for its gather.
//!
//! Run: `cargo bench --bench runtime` (prints `SKIP:` without an adapter).

use std::time::Instant;

use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::engine::Engine;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::link::Link;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::{Schedule, ScheduleKind};
use triaxis::runtime::{Runtime, RuntimeOptions};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;

type Batches = Vec<(Vec<u32>, Vec<u32>)>;

/// Steps before measuring (pipelines built, caches warm), and steps measured.
const WARM: usize = 2;
const STEPS: usize = 9;
const STEPS_OVERHEAD: usize = 31;

fn config(model: GptConfig, micro: Micro, m: usize) -> TrainConfig {
    TrainConfig {
        model,
        micro,
        grad_accum: m,
        steps: 1,
        adam: AdamW::default(),
        warmup: 1,
        min_lr_frac: 1.0,
        seed: 1,
    }
}

fn batches(corpus: &Corpus, micro: Micro, n: usize) -> Batches {
    let mut b = Batcher::new(3);
    (0..n)
        .map(|_| corpus.train_batch(&mut b, micro).expect("batch"))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians of one layout's steps on the device clock.
struct Exposure {
    step: f64,
    comm: f64,
    exposed: f64,
    share: f64,
}

impl Exposure {
    /// From per-step (device step, comm, exposed) seconds.
    fn of(v: &[(f64, f64, f64)]) -> Exposure {
        let col = |f: fn(&(f64, f64, f64)) -> f64| median(v.iter().map(f).collect());
        Exposure {
            step: col(|x| x.0),
            comm: col(|x| x.1),
            exposed: col(|x| x.2),
            share: col(|x| x.2 / x.1.max(1e-12)),
        }
    }
    fn row(&self, name: &str) {
        println!(
            "{name:<38} {:>9.2} {:>9.3} {:>9.3} {:>8.1} %",
            self.step * 1e3,
            self.comm * 1e3,
            self.exposed * 1e3,
            self.share * 100.0
        );
    }
}

fn exposure(gpus: &[Gpu], corpus: &Corpus, link: &Link) -> anyhow::Result<()> {
    let (dp, p, m) = (2, 2, 8);
    let micro = Micro { b: 2, t: 16 };
    let model = GptConfig {
        vocab: 13,
        ctx: 16,
        channels: 64,
        heads: 4,
        layers: 4,
    };
    let cfg = config(model, micro, m);
    let data = batches(corpus, micro, dp * m);
    let mesh = Mesh {
        dp,
        pp: p,
        microbatches: m,
        ..Mesh::default()
    };
    let eopts = RuntimeOptions {
        link: *link,
        serial: true,
        ..RuntimeOptions::default()
    };
    let mut engine = Engine::new(gpus, cfg.clone(), mesh, eopts)?;
    let ropts = RuntimeOptions {
        link: *link,
        serial: true,
        bucket_bytes: 32 << 10,
        ..RuntimeOptions::default()
    };
    let mut rt = Runtime::new(gpus, cfg.clone(), mesh, ropts)?;
    let (mut after, mut small) = (Vec::new(), Vec::new());
    for s in 0..WARM + STEPS {
        let c = engine.step(&data, s)?;
        let run = rt.step(&data, s)?;
        let clock = rt.clock(&run)?;
        let rt_comm = clock.dp_comm.iter().copied().fold(0.0, f64::max);
        if s >= WARM {
            after.push((c.device_step, c.dp_comm, c.dp_exposed));
            small.push((clock.makespan, rt_comm, clock.exposed_dp));
        }
    }
    println!(
        "\n1. exposed dp comm, device clock: dp {dp} × pp {p}, 1F1B, m = {m}, C = {}, L = {}, \
         {}×{} tokens, link {:.1} GB/s + {:.0} µs, serial",
        model.channels,
        model.layers,
        micro.b,
        micro.t,
        link.bandwidth_bytes_per_s / 1e9,
        link.latency_s * 1e6
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>10}",
        "", "step ms", "comm ms", "exposed", "exp/comm"
    );
    Exposure::of(&after).row("after: Engine (25 MiB buckets)");
    Exposure::of(&small).row("after: runtime (32 KiB buckets)");
    Ok(())
}

/// ZeRO-3 (dp 2, block by block) on the device clock, each block's gather issued one block
/// ahead of its compute vs right before it.
fn zero3_prefetch(gpus: &[Gpu], corpus: &Corpus, link: &Link) -> anyhow::Result<()> {
    let (dp, m) = (2, 2);
    let micro = Micro { b: 2, t: 16 };
    let model = GptConfig {
        vocab: 13,
        ctx: 16,
        channels: 64,
        heads: 4,
        layers: 4,
    };
    let cfg = config(model, micro, m);
    let data = batches(corpus, micro, dp * m);
    let mesh = Mesh {
        dp,
        zero: 3,
        microbatches: m,
        ..Mesh::default()
    };
    let mut runs = Vec::new();
    for prefetch in [false, true] {
        let opts = RuntimeOptions {
            link: *link,
            serial: true,
            prefetch,
            ..RuntimeOptions::default()
        };
        runs.push(Runtime::new(&gpus[..dp], cfg.clone(), mesh, opts)?);
    }
    let mut rows = vec![Vec::new(), Vec::new()];
    for s in 0..WARM + STEPS {
        for (rt, row) in runs.iter_mut().zip(&mut rows) {
            let run = rt.step(&data, s)?;
            let clock = rt.clock(&run)?;
            let comm = clock.dp_comm.iter().copied().fold(0.0, f64::max);
            if s >= WARM {
                row.push((clock.makespan, comm, clock.exposed_dp));
            }
        }
    }
    println!(
        "\n3. ZeRO-3 on the device clock: dp {dp}, m = {m}, C = {}, L = {}, link {:.1} GB/s + \
         {:.0} µs, serial",
        model.channels,
        model.layers,
        link.bandwidth_bytes_per_s / 1e9,
        link.latency_s * 1e6
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>10}",
        "", "step ms", "comm ms", "exposed", "exp/comm"
    );
    Exposure::of(&rows[0]).row("gather right before each block");
    Exposure::of(&rows[1]).row("gather one block ahead (prefetch)");
    Ok(())
}

fn overhead(gpus: &[Gpu], corpus: &Corpus) -> anyhow::Result<()> {
    let (p, m) = (4, 8);
    let micro = Micro { b: 2, t: 8 };
    let model = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 4,
    };
    let cfg = config(model, micro, m);
    let data = batches(corpus, micro, m);
    let sched = Schedule::new(ScheduleKind::OneFOneB, p, m, 1)?;
    let actions: usize = sched.actions.iter().map(Vec::len).sum();
    let mesh = Mesh {
        pp: p,
        microbatches: m,
        ..Mesh::default()
    };
    let mut one = Trainer::new(&gpus[0], cfg.clone())?;
    let mut rt = Runtime::new(gpus, cfg.clone(), mesh, RuntimeOptions::default())?;
    // one device at a time: the devices' work cannot overlap, so what the step adds to one
    // device's is the executor's (threads, channels, staging, a wait per pass)
    let serial = RuntimeOptions {
        serial: true,
        ..RuntimeOptions::default()
    };
    let mut rt_serial = Runtime::new(gpus, cfg.clone(), mesh, serial)?;
    // the runtime on one device over the same microbatches: no overlap and no pipeline
    // transfers, so what it adds to the Trainer's step is the executor's own work per pass
    // (worker thread, op list, records, timing)
    let single = Mesh {
        microbatches: m,
        ..Mesh::default()
    };
    let mut rt_one = Runtime::new(&gpus[..1], cfg, single, RuntimeOptions::default())?;
    let (mut t_one, mut t_rt, mut t_serial) = (Vec::new(), Vec::new(), Vec::new());
    let (mut t_rt_one, mut off_clock) = (Vec::new(), Vec::new());
    let time = |v: &mut Vec<f64>, s: usize, f: &mut dyn FnMut() -> anyhow::Result<()>| {
        let t = Instant::now();
        f()?;
        if s >= WARM {
            v.push(t.elapsed().as_secs_f64());
        }
        anyhow::Ok(())
    };
    for s in 0..WARM + STEPS_OVERHEAD {
        time(&mut t_one, s, &mut || Ok(one.step(&data, 0).map(drop)?))?;
        time(&mut t_rt, s, &mut || Ok(rt.step(&data, 0).map(drop)?))?;
        time(&mut t_serial, s, &mut || {
            Ok(rt_serial.step(&data, 0).map(drop)?)
        })?;
        let t = Instant::now();
        let run = rt_one.step(&data, 0)?;
        let wall = t.elapsed().as_secs_f64();
        if s >= WARM {
            t_rt_one.push(wall);
            // the wall the device clock does not account for: host work between the passes
            off_clock.push(wall - rt_one.clock(&run)?.makespan);
        }
    }
    let base = median(t_one.clone());
    let best = t_one.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "\n2. executor overhead: pp {p}, 1F1B, m = {m}, C = {}, L = {}, {}×{} tokens, \
         {actions} passes per step (concurrent devices overlap on the cores; one at a time \
         they cannot)",
        model.channels, model.layers, micro.b, micro.t
    );
    println!(
        "{:<38} {:>9} {:>14} {:>9}",
        "", "step ms", "µs per action", "(best)"
    );
    println!("{:<38} {:>9.2}", "one device (Trainer)", base * 1e3);
    let per = |a: f64, b: f64, n: usize| (a - b) / n as f64 * 1e6;
    // the pipeline runs its work in 2·p·m passes, one device in 2·m (m forwards, m backwards)
    for (name, v, actions) in [
        ("after: runtime", t_rt, actions),
        ("after: runtime, one device at a time", t_serial, actions),
        ("runtime on one device (executor alone)", t_rt_one, 2 * m),
    ] {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let t = median(v);
        println!(
            "{:<38} {:>9.2} {:>14.0} {:>9.0}",
            name,
            t * 1e3,
            per(t, base, actions),
            per(min, best, actions)
        );
    }
    println!(
        "{:<38} {:>9.2} {:>14.0}   (its wall − its device clock, per pass)",
        "  of it off the device clock",
        median(off_clock.clone()) * 1e3,
        median(off_clock) / (2 * m) as f64 * 1e6
    );
    // the floor the device primitives set: what one pass's host staging and timing cost
    let g = &gpus[0];
    let probe = g.buffer("probe", 256);
    let host = vec![0f32; 256];
    let floor = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let mut v = Vec::new();
        for _ in 0..41 {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(median(v))
    };
    let up = floor(&mut || Ok(g.upload(&probe, &host).and_then(|_| g.sync())?))?;
    let none: &[triaxis::kernels::Dispatch] = &[];
    let run = floor(&mut || Ok(g.run(none).and_then(|_| g.sync())?))?;
    let timed = floor(&mut || Ok(g.run_timed(none).map(drop)?))?;
    let down = floor(&mut || Ok(g.download::<f32>(&probe).map(drop)?))?;
    println!(
        "one idle device, wall per call: upload 1 KiB + wait {up:.0} µs, empty pass + wait \
         {run:.0} µs, empty timed pass {timed:.0} µs, download 1 KiB {down:.0} µs"
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let gpus = match AdapterChoice::from_env().and_then(|ch| Gpu::open_virtual(&ch, 4)) {
        Ok(g) => g,
        Err(e) => {
            println!("SKIP: no GPU adapter ({e})");
            return Ok(());
        }
    };
    let corpus = Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 500,
        val_problems: 10,
        seed: 1,
        reverse: true,
        pad: false,
    })?;
    println!(
        "runtime bench on {} (4 virtual devices; medians of {STEPS} / {STEPS_OVERHEAD} steps \
         after {WARM})",
        gpus[0].adapter_name()
    );
    // slow enough that a stage's gradients take a visible share of a backward pass
    exposure(&gpus, &corpus, &Link::measured(1e9, 10e-6))?;
    overhead(&gpus, &corpus)?;
    zero3_prefetch(&gpus, &corpus, &Link::measured(1e9, 10e-6))?;
    Ok(())
}
