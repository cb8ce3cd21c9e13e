//! `--calibrate` and `--validate`: per-op costs measured on this machine's adapter, and the
//! simulator checked against measured steps.
//!
//! ```text
//! calibrate  model A (4 × 128, 4 heads, seq 32) on virtual devices, serial (one device's
//!            compute at a time: clean device-clock times): pp 1, 2 and 4 under 1F1B, pp 2
//!            and 4 under ZB-H1, tp 2, m = 4, microbatches of 2 and 4 sequences: each
//!            chunk's F, B, W and whole backward (the 10th percentile of its kind over the
//!            pooled steps) beside the simulator's ops, layers, ends and FLOPs for that chunk
//!            ─▶ a least-squares fit per pass class; the optimizer per call and parameter
//!            + communication by bytes (`links.rs`): staging, ring all-reduce, message
//! validate   model A's runs and ≥ 8 layouts of model B (8 × 128) on 4 virtual devices, all
//!            built first and then stepped in rounds (one step of each per round, the order
//!            rotating), so a host whose speed drifts slows every run alike; the calibration
//!            fitted to A, then each layout of B's device clock replayed from its own pooled
//!            op costs (measured) beside its simulation from the calibration and the link
//!            model (simulated); the same again at each pass's median
//! ```
//!
//! Communication on virtual devices is costed by the link model on both sides (the device
//! clock charges a transfer its link-model seconds), so the misses are the compute model's:
//! one rate per pass class beside a fixed cost per op, layer and end.

use anyhow::Context;
use std::path::Path;
use triaxis::cost::{Cluster, GB};
use triaxis::data::{Batcher, Corpus};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::link::Link;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro, Recompute};
use triaxis::parallel::bucket::BUCKET_BYTES;
use triaxis::pipeline::schedule::Schedule;
use triaxis::pipeline::ScheduleKind;
use triaxis::precision::Precision;
use triaxis::runtime::ir::{Op, Plan};
use triaxis::runtime::replay::{replay, replay_free, Clock, Free};
use triaxis::sim::calibration::CLASSES;
use triaxis::sim::report::seconds;
use triaxis::sim::{chunks, op_terms, simulate, Calibration, CommSource, Fit, Spec, Terms};
use triaxis::step::TrainConfig;

/// One layout being trained here: its engine, shape and data cursor, and the device-clock
/// seconds of each of its measured steps.
pub(crate) struct Run {
    engine: Engine,
    model: GptConfig,
    pub(crate) mesh: Mesh,
    pub(crate) micro_b: usize,
    batcher: Batcher,
    steps: Vec<f64>,
}

/// One layout measured: its plan, its pooled per-op seconds and their replay, and the spread
/// (min, max) of its steps' own device-clock seconds.
pub(crate) struct Measured {
    plan: Plan,
    cost: Vec<Vec<f64>>,
    pub(crate) clock: Clock,
    pub(crate) spread: (f64, f64),
}

/// Each pass at the 10th percentile of its kind on its device over the pooled steps, on both
/// sides (calibration and measured): the quiet host's figure. A shared host's interference only
/// ever adds time and slows some rounds by 40 % and more, which moves a median by more than the
/// model's own error; `--validate` prints the median's errors too.
pub(crate) const QUIET: f64 = 0.1;
/// The device clock's own figure (what the pipeline example replays).
const MEDIAN: f64 = 0.5;

pub(crate) fn model(corpus: &Corpus, layers: usize) -> GptConfig {
    GptConfig {
        vocab: corpus.vocab.size(),
        ctx: 32,
        channels: 128,
        heads: 4,
        layers,
    }
}

/// Builds `mesh` (serial, communication on `link`) and runs its warm-up step.
fn start(
    gpus: &[Gpu],
    corpus: &Corpus,
    model: &GptConfig,
    mesh: Mesh,
    micro_b: usize,
    link: Link,
    steps: usize,
) -> anyhow::Result<Run> {
    let (cfg, opts) = setup(model, mesh, micro_b, link, steps);
    let engine = Engine::new(&gpus[..mesh.devices()], cfg, mesh, opts)?;
    warm(engine, corpus, model, mesh, micro_b)
}

/// The training configuration and serial runtime options of a measured run.
pub(crate) fn setup(
    model: &GptConfig,
    mesh: Mesh,
    micro_b: usize,
    link: Link,
    steps: usize,
) -> (TrainConfig, RuntimeOptions) {
    let cfg = TrainConfig {
        model: *model,
        micro: Micro {
            b: micro_b,
            t: model.ctx,
        },
        grad_accum: mesh.microbatches,
        steps: steps + 1,
        adam: triaxis::cpu::AdamW::default(),
        warmup: 1,
        min_lr_frac: 1.0,
        seed: 1,
    };
    let opts = RuntimeOptions {
        link,
        tp_link: link,
        serial: true,
        ..RuntimeOptions::default()
    };
    (cfg, opts)
}

/// `engine`'s warm-up step, then pooling from the next step on.
pub(crate) fn warm(
    engine: Engine,
    corpus: &Corpus,
    model: &GptConfig,
    mesh: Mesh,
    micro_b: usize,
) -> anyhow::Result<Run> {
    let mut run = Run {
        engine,
        model: *model,
        mesh,
        micro_b,
        batcher: Batcher::new(1),
        steps: Vec::new(),
    };
    step(&mut run, corpus)?;
    run.engine.pool_steps(true);
    run.steps.clear();
    Ok(run)
}

fn step(run: &mut Run, corpus: &Corpus) -> anyhow::Result<()> {
    let micro = Micro {
        b: run.micro_b,
        t: run.model.ctx,
    };
    let batches = (0..run.engine.batches_per_step())
        .map(|_| corpus.train_batch(&mut run.batcher, micro))
        .collect::<triaxis::Result<Vec<_>>>()?;
    let s = run.steps.len();
    let c = run.engine.step(&batches, s)?;
    run.steps.push(c.device_step);
    Ok(())
}

/// `steps` rounds, each one step of every run, in an order that rotates from round to round:
/// a host whose speed drifts (a shared VM) slows every layout alike instead of whichever ran
/// during the slow minute.
pub(crate) fn rounds(runs: &mut [Run], corpus: &Corpus, steps: usize) -> anyhow::Result<()> {
    let n = runs.len();
    for r in 0..steps {
        for i in 0..n {
            step(&mut runs[(r + i) % n], corpus)?;
        }
    }
    Ok(())
}

/// A run's op costs at `quantile` over its pooled steps, and their replay.
pub(crate) fn measured(run: &Run, quantile: f64) -> anyhow::Result<Measured> {
    let plan = run.engine.plan().context("the engine has no plan")?.clone();
    let cost = run
        .engine
        .pooled_costs(quantile)?
        .context("no pooled step")?;
    let clock = replay(&plan, &run.mesh, &cost)?;
    let lo = run.steps.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = run.steps.iter().copied().fold(0.0, f64::max);
    Ok(Measured {
        plan,
        cost,
        clock,
        spread: (lo, hi),
    })
}

/// The calibration's terms and the measured seconds of microbatch 0's pass of every (device,
/// chunk, kind) of `m` by class, and of every device's optimizer (index 4).
fn points(run: &Run, m: &Measured, out: &mut [Vec<(Terms, f64)>; 5]) -> anyhow::Result<()> {
    let (model, mesh, micro_b) = (&run.model, &run.mesh, run.micro_b);
    let schedule = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks)?;
    let sims = chunks(
        model,
        mesh,
        &schedule,
        micro_b,
        model.ctx,
        Recompute::None,
        BUCKET_BYTES,
        4,
    )?;
    for (p, costs) in m.plan.programs.iter().zip(&m.cost) {
        let cs = &sims[p.place.stage];
        // microbatch 0's pass of each (chunk, kind): its ops' terms and seconds, summed
        let mut pass = std::collections::BTreeMap::<(usize, usize), (Terms, f64)>::new();
        for (op, &secs) in p.ops.iter().zip(costs) {
            match op {
                Op::Compute { action, segs } if action.micro == 0 => {
                    let c = &cs[action.chunk];
                    let class = Calibration::class(action.kind, c.shape.split);
                    let t = op_terms(&c.work[action.kind.index()][segs.clone()]);
                    let e = pass.entry((action.chunk, class)).or_default();
                    for (a, b) in e.0.iter_mut().zip(t) {
                        *a += b;
                    }
                    e.1 += secs;
                }
                Op::Optimizer => {
                    let params: usize = cs.iter().map(|c| c.params).sum();
                    out[4].push(([1.0, 0.0, 0.0, params as f64, 0.0], secs));
                }
                _ => {}
            }
        }
        for ((_, class), point) in pass {
            out[class].push(point);
        }
    }
    Ok(())
}

/// Model A's runs, so that every constant is pinned: the whole model, halves and quarters
/// (layers with and without an end beside them), whole and split backward, one op per pass
/// and two per layer (tensor parallel), two microbatch sizes.
fn calibration_runs(gpus: &[Gpu], corpus: &Corpus, steps: usize) -> anyhow::Result<Vec<Run>> {
    let model = model(corpus, 4);
    let mut runs = Vec::new();
    for (tp, pp, kind) in [
        (1, 1, ScheduleKind::OneFOneB),
        (1, 2, ScheduleKind::OneFOneB),
        (1, 4, ScheduleKind::OneFOneB),
        (1, 2, ScheduleKind::ZeroBubbleH1),
        (1, 4, ScheduleKind::ZeroBubbleH1),
        (2, 1, ScheduleKind::OneFOneB),
    ] {
        for b in [2, 4] {
            let mesh = Mesh {
                tp,
                pp,
                schedule: kind,
                microbatches: 4,
                ..Mesh::default()
            };
            runs.push(start(gpus, corpus, &model, mesh, b, Link::ideal(), steps)?);
        }
    }
    Ok(runs)
}

/// The calibration fitted to model A's measured runs.
fn fit(gpus: &[Gpu], runs: &[Run], quantile: f64) -> anyhow::Result<Calibration> {
    let mut pts: [Vec<(Terms, f64)>; 5] = Default::default();
    for run in runs {
        points(run, &measured(run, quantile)?, &mut pts)?;
    }
    let model = runs.first().context("no calibration run")?.model;
    let fit = |i: usize| Fit::of(&pts[i]);
    let info = &gpus[0].info;
    Ok(Calibration {
        adapter: gpus[0].adapter_name(),
        driver: format!("{} {}", info.driver, info.driver_info),
        model: format!(
            "{} × {} ({} heads, seq {}, vocab {}), f32; pp 1, 2, 4 1f1b, pp 2, 4 zb-h1, tp 2, m 4, microbatch 2 and 4",
            model.layers, model.channels, model.heads, model.ctx, model.vocab
        ),
        precision: "f32".into(),
        date: today(),
        passes: [fit(0)?, fit(1)?, fit(2)?, fit(3)?],
        optimizer: fit(4)?,
        links: None,
    })
}

fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0) as i64;
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn open(n: usize) -> anyhow::Result<(Vec<Gpu>, Corpus)> {
    let gpus = Gpu::open_virtual(&AdapterChoice::from_flags(None, None, false)?, n)?;
    Ok((gpus, Corpus::throughput()?))
}

fn print_fits(c: &Calibration) {
    for (i, f) in c.passes.iter().enumerate() {
        let split = match f.per_split {
            Some(s) => format!(" ({:.2} split over tp)", 1e-9 / s.max(1e-300)),
            None => String::new(),
        };
        println!(
            "  {:<3} {:>7.2} GFLOP/s{split} + {:>9} per layer + {:>9} per end + {:>9} per op   ({} points, worst miss {:.1} %)",
            CLASSES[i],
            1e-9 / f.per_unit.max(1e-300),
            seconds(f.per_block),
            seconds(f.per_end),
            seconds(f.per_segment),
            f.points,
            100.0 * f.max_miss
        );
    }
    let o = &c.optimizer;
    println!(
        "  optimizer {:.2} ns per parameter + {} per call   ({} points, worst miss {:.1} %)",
        o.per_unit * 1e9,
        seconds(o.per_segment),
        o.points,
        100.0 * o.max_miss
    );
}

/// `--calibrate FILE`.
pub fn calibrate_command(out: &Path, steps: usize) -> anyhow::Result<()> {
    let (gpus, corpus) = open(4)?;
    println!("calibrating on {} …", gpus[0].adapter_name());
    let mut runs = calibration_runs(&gpus, &corpus, steps)?;
    rounds(&mut runs, &corpus, steps)?;
    let mut c = fit(&gpus, &runs, QUIET)?;
    print_fits(&c);
    println!("communication by bytes (the runtime's host-staged path):");
    c.links = Some(crate::links::measure(&gpus)?);
    triaxis::record::write_text(out, &c.to_json())?;
    println!("wrote {}", out.display());
    Ok(())
}

/// The layouts `--validate` runs on model B: (mesh, microbatch sequences).
fn layouts() -> Vec<(Mesh, usize)> {
    use ScheduleKind::*;
    let m = |dp, tp, pp, zero, schedule, microbatches, chunks| Mesh {
        dp,
        tp,
        pp,
        zero,
        schedule,
        microbatches,
        chunks,
    };
    vec![
        (m(1, 1, 1, 0, OneFOneB, 4, 1), 4),
        (m(1, 1, 2, 0, GPipe, 4, 1), 4),
        (m(1, 1, 2, 0, OneFOneB, 8, 1), 2),
        (m(1, 1, 4, 0, OneFOneB, 8, 1), 2),
        (m(1, 1, 2, 0, Interleaved, 4, 2), 4),
        (m(1, 1, 2, 0, ZeroBubbleH1, 4, 1), 4),
        (m(1, 1, 2, 0, ZeroBubbleV, 4, 2), 4),
        (m(1, 1, 2, 0, DualPipeV, 4, 2), 4),
        (m(1, 2, 1, 0, OneFOneB, 4, 1), 4),
        (m(2, 1, 1, 0, OneFOneB, 4, 1), 2),
        (m(2, 1, 2, 1, OneFOneB, 4, 1), 2),
        (m(1, 2, 2, 0, OneFOneB, 4, 1), 4),
    ]
}

/// `--validate`.
pub fn validate(link: Link, steps: usize) -> anyhow::Result<()> {
    let (gpus, corpus) = open(4)?;
    let model_b = model(&corpus, 8);
    println!(
        "measuring model A (4 × 128: calibration) and model B ({} × {}: {} layouts) on {}, {} rounds of one step each …",
        model_b.layers,
        model_b.channels,
        layouts().len(),
        gpus[0].adapter_name(),
        steps
    );
    // every run built first, then stepped in rounds: calibration and validation see the same host
    let mut runs = calibration_runs(&gpus, &corpus, steps)?;
    let cal_runs = runs.len();
    for (mesh, b) in layouts() {
        runs.push(start(&gpus, &corpus, &model_b, mesh, b, link, steps)?);
    }
    rounds(&mut runs, &corpus, steps)?;
    let cal = fit(&gpus, &runs[..cal_runs], QUIET)?;
    print_fits(&cal);
    println!("communication by bytes (the runtime's host-staged path; the device clock below prices transfers by the link model instead):");
    crate::links::measure(&gpus)?;
    let cluster = Cluster::new(1, 4, 1e3, link, link, 1.0)?;
    println!(
        "\nvalidating on model B ({} × {}, {} heads, seq {}), f32, 4 virtual devices, links {} ({:.0} GB/s, {:.0} µs); {} pooled steps each, every pass at its 10th percentile",
        model_b.layers,
        model_b.channels,
        model_b.heads,
        model_b.ctx,
        link.name,
        link.bandwidth_bytes_per_s / GB,
        link.latency_s * 1e6,
        steps
    );
    println!(
        "{:<40} {:>10} {:>19} {:>10} {:>7} {:>13} {:>15} {:>15} {:>10}",
        "layout",
        "measured",
        "steps min–max",
        "simulated",
        "error",
        "bubble m/s",
        "exposed dp m/s",
        "exposed tp m/s",
        "passes m/c"
    );
    let spec = |(mesh, micro_b): (Mesh, usize), calibration: &Calibration| Spec {
        model: model_b,
        micro_b,
        mesh,
        cluster: cluster.clone(),
        calibration: calibration.clone(),
        precision: Precision::F32,
        recompute: Recompute::None,
        bucket_bytes: BUCKET_BYTES,
        every_replica: false,
        comm: CommSource::Cluster,
    };
    let mut errors = Vec::new();
    // model B's passes by class, to say which class the calibration misses
    let mut pts: [Vec<(Terms, f64)>; 5] = Default::default();
    for run in &runs[cal_runs..] {
        let (mesh, b) = (run.mesh, run.micro_b);
        let m = measured(run, QUIET)?;
        // this layout's passes alone: how far the calibration misses its compute
        let mut own: [Vec<(Terms, f64)>; 5] = Default::default();
        points(run, &m, &mut own)?;
        let passes = pass_ratio(&cal, &own);
        for (all, o) in pts.iter_mut().zip(own) {
            all.extend(o);
        }
        let exposed = |f: Free| -> anyhow::Result<f64> {
            Ok((m.clock.makespan - replay_free(&m.plan, &mesh, &m.cost, f)?.makespan).max(0.0))
        };
        let sim = simulate(&spec((mesh, b), &cal))?;
        let err = sim.step() / m.clock.makespan - 1.0;
        errors.push(err.abs());
        println!(
            "{:<40} {:>10} {:>19} {:>10} {:>+6.1}% {:>5.1}/{:>5.1} % {:>7}/{:<7} {:>7}/{:<7} {:>6.2}",
            format!("{} b={b}", mesh.describe()),
            seconds(m.clock.makespan),
            format!("{}–{}", seconds(m.spread.0), seconds(m.spread.1)),
            seconds(sim.step()),
            100.0 * err,
            100.0 * m.clock.bubble(0..mesh.pp * mesh.tp),
            100.0 * sim.bubble,
            seconds(m.clock.exposed_dp),
            seconds(sim.exposed.dp),
            seconds(exposed(Free::TP)?),
            seconds(sim.exposed.tp),
            passes,
        );
    }
    // the same model's layouts as mpirun ranks, one process per device
    let virtual_devices = errors.len();
    if let Some(rows) = crate::mpi_ranks::measure(steps, link.name)? {
        for r in rows {
            let (mesh, b) = crate::mpi_ranks::layouts()[r.layout];
            let sim = simulate(&spec((mesh, b), &cal))?;
            let err = sim.step() / r.step - 1.0;
            errors.push(err.abs());
            println!(
                "{:<40} {:>10} {:>19} {:>10} {:>+6.1}% {:>5.1}/{:>5.1} %",
                format!("{} b={b}, mpirun", mesh.describe()),
                seconds(r.step),
                format!("{}–{}", seconds(r.lo), seconds(r.hi)),
                seconds(sim.step()),
                100.0 * err,
                100.0 * r.bubble,
                100.0 * sim.bubble,
            );
        }
    }
    print!("\nmodel B's passes, measured / calibrated (median, min–max):");
    let names = CLASSES.iter().copied().chain(std::iter::once("optimizer"));
    for (name, r) in names.zip(ratios(&cal, &pts)) {
        if let (Some(lo), Some(hi)) = (r.first(), r.last()) {
            print!("  {name} {:.2} ({lo:.2}–{hi:.2})", r[r.len() / 2]);
        }
    }
    println!();
    let (mean, max) = summary(&errors);
    println!(
        "\nstep-time error over {} layouts: mean {:.1} %, max {:.1} % (goal: mean ≤ 5 %, max ≤ 10 %)",
        errors.len(),
        100.0 * mean,
        100.0 * max
    );
    if errors.len() > virtual_devices {
        let (mean, max) = summary(&errors[..virtual_devices]);
        println!(
            "  the {virtual_devices} on virtual devices alone: mean {:.1} %, max {:.1} %",
            100.0 * mean,
            100.0 * max
        );
    }
    // the same runs with every pass at its median, calibration included
    let cal = fit(&gpus, &runs[..cal_runs], MEDIAN)?;
    let mut errors = Vec::new();
    for run in &runs[cal_runs..] {
        let m = measured(run, MEDIAN)?;
        errors.push(
            (simulate(&spec((run.mesh, run.micro_b), &cal))?.step() / m.clock.makespan - 1.0).abs(),
        );
    }
    let (mean, max) = summary(&errors);
    println!(
        "at the median of each pass instead (the device clock the pipeline example prints), virtual devices: mean {:.1} %, max {:.1} %",
        100.0 * mean,
        100.0 * max
    );
    Ok(())
}

/// Measured over calibrated seconds of every point, by class (the passes', then the
/// optimizer's), each sorted.
fn ratios(cal: &Calibration, pts: &[Vec<(Terms, f64)>; 5]) -> Vec<Vec<f64>> {
    let fits = cal.passes.iter().chain(std::iter::once(&cal.optimizer));
    fits.zip(pts)
        .map(|(fit, p)| {
            let mut r: Vec<f64> = p.iter().map(|&(x, t)| t / fit.seconds(x)).collect();
            r.sort_by(f64::total_cmp);
            r
        })
        .collect()
}

/// The median over a layout's passes (every class, the optimizer's calls included) of measured
/// over calibrated seconds: above 1, the calibration prices this layout's compute short.
fn pass_ratio(cal: &Calibration, pts: &[Vec<(Terms, f64)>; 5]) -> f64 {
    let mut r: Vec<f64> = ratios(cal, pts).concat();
    r.sort_by(f64::total_cmp);
    r.get(r.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Mean and largest of `errors`.
fn summary(errors: &[f64]) -> (f64, f64) {
    let mean = errors.iter().sum::<f64>() / errors.len().max(1) as f64;
    (mean, errors.iter().copied().fold(0.0, f64::max))
}
