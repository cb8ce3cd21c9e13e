//! `--calibrate` and `--validate`: per-op costs measured on this machine's adapter, and the
//! simulator checked against measured steps.
//!
//! ```text
//! calibrate  model A (4 × 128, 4 heads, seq 32) on 2 virtual devices, serial (one device's
//!            compute at a time: clean device-clock times): pp 1 and 2 under 1F1B, pp 2 under
//!            ZB-H1, m = 4, microbatches of 2 and 4 sequences: each chunk's F, B, W and whole backward (the
//!            median of its kind over the pooled steps) beside the simulator's FLOPs and blocks
//!            for that chunk ─▶ a least-squares fit per pass class; the optimizer per parameter
//! validate   calibrate on A, then ≥ 8 layouts of model B (8 × 128) on 4 virtual devices:
//!            each trained, its device clock replayed from its own pooled op costs (measured),
//!            and simulated from the calibration and the link model (simulated)
//! ```
//!
//! Communication on virtual devices is costed by the link model on both sides (the device
//! clock charges a transfer its link-model seconds), so the misses are the compute model's:
//! FLOPs at one rate per pass class, a fixed cost per block.

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
use triaxis::pipeline::schedule::{Kind, Schedule};
use triaxis::pipeline::ScheduleKind;
use triaxis::precision::Precision;
use triaxis::runtime::ir::{Op, Plan};
use triaxis::runtime::replay::{replay, replay_free, Clock, Free};
use triaxis::sim::report::seconds;
use triaxis::sim::{chunks, simulate, Calibration, Fit, Spec};
use triaxis::step::TrainConfig;

/// One layout trained here: its plan, its pooled per-op seconds and their replay.
struct Measured {
    plan: Plan,
    cost: Vec<Vec<f64>>,
    clock: Clock,
}

fn model(corpus: &Corpus, layers: usize) -> GptConfig {
    GptConfig {
        vocab: corpus.vocab.size(),
        ctx: 32,
        channels: 128,
        heads: 4,
        layers,
    }
}

/// Trains `mesh` for one warm-up and `steps` pooled steps, serial, communication on `link`.
fn measure(
    gpus: &[Gpu],
    corpus: &Corpus,
    model: &GptConfig,
    mesh: Mesh,
    micro_b: usize,
    link: Link,
    steps: usize,
) -> anyhow::Result<Measured> {
    let micro = Micro {
        b: micro_b,
        t: model.ctx,
    };
    let cfg = TrainConfig {
        model: *model,
        micro,
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
    let mut engine = Engine::new(&gpus[..mesh.devices()], cfg, mesh, opts)?;
    let mut batcher = Batcher::new(1);
    for s in 0..=steps {
        if s == 1 {
            engine.pool_steps(true);
        }
        let batches = (0..engine.batches_per_step())
            .map(|_| corpus.train_batch(&mut batcher, micro))
            .collect::<triaxis::Result<Vec<_>>>()?;
        engine.step(&batches, s)?;
    }
    let plan = engine.plan().context("the engine has no plan")?.clone();
    let cost = engine.pooled_costs().context("no pooled step")?;
    let clock = replay(&plan, &mesh, &cost)?;
    Ok(Measured { plan, cost, clock })
}

/// The (blocks, FLOPs, seconds) of every pass of `m` by class, and (1, parameters, seconds) of
/// every device's optimizer.
fn points(
    m: &Measured,
    model: &GptConfig,
    mesh: &Mesh,
    micro_b: usize,
    out: &mut [Vec<(f64, f64, f64)>; 5],
) -> anyhow::Result<()> {
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
        // seconds of microbatch 0's pass of each (chunk, kind)
        let mut pass = std::collections::HashMap::<(usize, Kind), f64>::new();
        for (op, &c) in p.ops.iter().zip(costs) {
            match op {
                Op::Compute { action, .. } if action.micro == 0 => {
                    *pass.entry((action.chunk, action.kind)).or_default() += c;
                }
                Op::Optimizer => {
                    let params: usize = cs.iter().map(|c| c.params).sum();
                    out[4].push((1.0, params as f64, c));
                }
                _ => {}
            }
        }
        for ((chunk, kind), secs) in pass {
            let c = &cs[chunk];
            let k = match kind {
                Kind::F => 0,
                Kind::B => 1,
                Kind::W => 2,
            };
            let blocks: f64 = c.work[k].iter().map(|w| w.blocks).sum();
            let flops: f64 = c.work[k].iter().map(|w| w.flops).sum();
            out[Calibration::class(kind, c.shape.split)].push((blocks, flops, secs));
        }
    }
    Ok(())
}

/// Measures model A here and fits the calibration.
fn calibrate(gpus: &[Gpu], corpus: &Corpus, steps: usize) -> anyhow::Result<Calibration> {
    let model = model(corpus, 4);
    let mut pts: [Vec<(f64, f64, f64)>; 5] = Default::default();
    // whole model and halves (6 and 3 blocks), whole and split backward, two microbatch sizes
    let runs = [
        (1, ScheduleKind::OneFOneB),
        (2, ScheduleKind::OneFOneB),
        (2, ScheduleKind::ZeroBubbleH1),
    ];
    for (pp, kind) in runs {
        for b in [2, 4] {
            let mesh = Mesh {
                pp,
                schedule: kind,
                microbatches: 4,
                ..Mesh::default()
            };
            let m = measure(gpus, corpus, &model, mesh, b, Link::ideal(), steps)?;
            points(&m, &model, &mesh, b, &mut pts)?;
        }
    }
    let fit = |i: usize| Fit::of(&pts[i]);
    let info = &gpus[0].info;
    Ok(Calibration {
        adapter: gpus[0].adapter_name(),
        driver: format!("{} {}", info.driver, info.driver_info),
        model: format!(
            "{} × {} ({} heads, seq {}, vocab {}), f32; pp 1 and 2 1f1b, pp 2 zb-h1, m 4, microbatch 2 and 4",
            model.layers, model.channels, model.heads, model.ctx, model.vocab
        ),
        precision: "f32".into(),
        date: today(),
        passes: [fit(0)?, fit(1)?, fit(2)?, fit(3)?],
        optimizer: fit(4)?,
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
        println!(
            "  {:<3} {:>7.2} GFLOP/s + {:>9} per block   ({} points, worst miss {:.1} %)",
            triaxis::sim::calibration::CLASSES[i],
            1e-9 / f.per_unit.max(1e-300),
            seconds(f.overhead),
            f.points,
            100.0 * f.max_miss
        );
    }
    let o = &c.optimizer;
    println!(
        "  optimizer {:.2} ns per parameter + {}   ({} points, worst miss {:.1} %)",
        o.per_unit * 1e9,
        seconds(o.overhead),
        o.points,
        100.0 * o.max_miss
    );
}

/// `--calibrate FILE`.
pub fn calibrate_command(out: &Path, steps: usize) -> anyhow::Result<()> {
    let (gpus, corpus) = open(2)?;
    println!("calibrating on {} …", gpus[0].adapter_name());
    let c = calibrate(&gpus, &corpus, steps)?;
    print_fits(&c);
    super::write_new(out, &c.to_json())?;
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
    println!(
        "calibrating on model A (4 × 128) on {} …",
        gpus[0].adapter_name()
    );
    let cal = calibrate(&gpus, &corpus, steps)?;
    print_fits(&cal);
    let model = model(&corpus, 8);
    let cluster = Cluster::new(1, 4, 1e3, link, link, 1.0)?;
    println!(
        "\nvalidating on model B ({} × {}, {} heads, seq {}), f32, 4 virtual devices, links {} ({:.0} GB/s, {:.0} µs); {} pooled steps each",
        model.layers,
        model.channels,
        model.heads,
        model.ctx,
        link.name,
        link.bandwidth_bytes_per_s / GB,
        link.latency_s * 1e6,
        steps
    );
    println!(
        "{:<44} {:>10} {:>10} {:>7} {:>15} {:>15} {:>15}",
        "layout",
        "measured",
        "simulated",
        "error",
        "bubble m / s",
        "exposed dp m/s",
        "exposed tp m/s"
    );
    let mut errors = Vec::new();
    for (mesh, b) in layouts() {
        let m = measure(&gpus, &corpus, &model, mesh, b, link, steps)?;
        let exposed = |f: Free| -> anyhow::Result<f64> {
            Ok((m.clock.makespan - replay_free(&m.plan, &mesh, &m.cost, f)?.makespan).max(0.0))
        };
        let spec = Spec {
            model,
            micro_b: b,
            mesh,
            cluster: cluster.clone(),
            calibration: cal.clone(),
            precision: Precision::F32,
            recompute: Recompute::None,
            bucket_bytes: BUCKET_BYTES,
            every_replica: false,
        };
        let sim = simulate(&spec)?;
        let err = sim.step() / m.clock.makespan - 1.0;
        errors.push(err.abs());
        println!(
            "{:<44} {:>10} {:>10} {:>+6.1}% {:>6.1}/{:>5.1} % {:>7}/{:<7} {:>7}/{:<7}",
            format!("{} b={b}", mesh.describe()),
            seconds(m.clock.makespan),
            seconds(sim.step()),
            100.0 * err,
            100.0 * m.clock.bubble(0..mesh.pp * mesh.tp),
            100.0 * sim.bubble,
            seconds(m.clock.exposed_dp),
            seconds(sim.exposed.dp),
            seconds(exposed(Free::TP)?),
            seconds(sim.exposed.tp),
        );
    }
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    let max = errors.iter().copied().fold(0.0, f64::max);
    println!(
        "\nstep-time error over {} layouts: mean {:.1} %, max {:.1} % (goal: mean ≤ 5 %, max ≤ 10 %)",
        errors.len(),
        100.0 * mean,
        100.0 * max
    );
    Ok(())
}
