//! Simulates one training step of a layout on a cluster of any size: the runtime's own lowering
//! of the layout (every device's op list, every collective), each op costed from a calibration
//! and the cluster's links, replayed on the device clock the runtime replays its measured steps
//! on. Prints step time, bubble, exposed communication per axis, memory per device, tokens/s,
//! model FLOP utilisation, the critical path in words, and the analytic planner's figure beside
//! it.
//!
//! ```text
//! cargo run --release --example simulate                             # 70b-1024: dp 16 × tp 8 × pp 8
//! cargo run --release --example simulate -- --preset 70b-8192
//! cargo run --release --example simulate -- --preset 7b-2nodes --top 3
//! cargo run --release --example simulate -- --layers 24 --hidden 2048 --heads 16 \
//!     --nodes 4 --dp 4 --pp 4 --tp 2 --schedule zb-v --microbatches 16 --trace sim.json
//! cargo run --release --example simulate -- --calibrate here.json    # measure this adapter
//! cargo run --release --example simulate -- --calibration here.json --preset gpt2-1node --top 3
//! cargo run --release --example simulate -- --calibration here.json --comm calibrated --dp 4 …
//! cargo run --release --example simulate -- --validate               # how far to trust it
//! cargo run --release --features mpi --example simulate -- --validate  # … with mpirun ranks too
//! ```
//!
//! Without `--calibration` every pass runs at `--tflops` achieved FLOP/s with no fixed cost and
//! the optimizer is free (the planner's assumption). Communication is priced from the
//! cluster's links, or with `--comm calibrated` from the calibration's measured host-staged
//! transfers (staging, ring, message by bytes) on every group. `--calibrate FILE` measures this machine's
//! adapter (see `measure.rs`); `--validate` calibrates on one model and compares simulated with
//! measured device-clock steps of ≥ 8 layouts of another.

#[path = "../support/flags.rs"]
mod flags;
mod links;
mod measure;
#[cfg(feature = "mpi")]
#[path = "../support/mpi_engine.rs"]
mod mpi_engine;
mod mpi_ranks;
#[cfg(feature = "mpi")]
#[path = "../support/mpirun.rs"]
mod mpirun;

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use triaxis::cost::step::estimate;
use triaxis::cost::validate::shape_of;
use triaxis::cost::{plan, Cluster, Footprint, Link, Overlap, PlanRequest, GB};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Recompute};
use triaxis::pipeline::ScheduleKind;
use triaxis::precision::Precision;
use triaxis::record::write_text;
use triaxis::sim::report::{chrome_trace, critical_path, seconds};
use triaxis::sim::{simulate, Calibration, CommSource, Simulated, Spec};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Preset {
    /// 70e9 params (80 × 8192, 64 heads, seq 2048, vocab 32000) on 128 nodes × 8:
    /// dp 16 × tp 8 × pp 8, 1F1B, m = 32, ZeRO-1, bf16.
    #[value(name = "70b-1024")]
    SeventyB1024,
    /// The same model on 1024 nodes × 8: dp 128 × tp 8 × pp 8.
    #[value(name = "70b-8192")]
    SeventyB8192,
    /// 7e9 params (32 × 4096, 32 heads, seq 2048) on 1 node × 8.
    #[value(name = "7b-1node")]
    SevenB1Node,
    /// The same on 2 nodes × 8.
    #[value(name = "7b-2nodes")]
    SevenB2Nodes,
    /// GPT-2 small (12 × 768, 12 heads, seq 1024, vocab 50257) on 1 node × 8.
    #[value(name = "gpt2-1node")]
    Gpt2OneNode,
}

/// `--comm`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Comm {
    Cluster,
    Calibrated,
}

/// Simulate a training step of a dp × tp × pp (+ ZeRO) layout on a cluster, from per-op costs.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Cli {
    /// Model, cluster and (70b-*) layout; any flag below overrides its value. Default 70b-1024.
    #[arg(long, value_enum)]
    preset: Option<Preset>,
    #[arg(long, value_parser = flags::count)]
    layers: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    hidden: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    heads: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    seq: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    vocab: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    nodes: Option<usize>,
    #[arg(long, value_parser = flags::count, default_value_t = 8)]
    devices_per_node: usize,
    /// Memory per device, GB.
    #[arg(long, default_value_t = 80.0)]
    mem_gb: f64,
    /// Intra-node link, GB/s per device, and its latency per message, µs.
    #[arg(long, default_value_t = 400.0)]
    intra_gbps: f64,
    #[arg(long, default_value_t = 3.0)]
    intra_latency_us: f64,
    /// Inter-node link, GB/s per device, and its latency per message, µs.
    #[arg(long, default_value_t = 25.0)]
    inter_gbps: f64,
    #[arg(long, default_value_t = 10.0)]
    inter_latency_us: f64,
    /// Achieved TFLOP/s per device (without --calibration); also the planner's rate.
    #[arg(long, default_value_t = 300.0)]
    tflops: f64,
    /// Peak TFLOP/s per device for model FLOP utilisation (default: --tflops).
    #[arg(long)]
    peak_tflops: Option<f64>,
    /// Per-op costs measured on an adapter (`--calibrate FILE` writes one).
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// What prices communication: the cluster's links (`--intra-*`, `--inter-*`), or the
    /// calibration's measured host-staged transfers on every group, staging included.
    #[arg(long, value_enum, default_value = "cluster")]
    comm: Comm,
    #[arg(long, value_parser = flags::count)]
    dp: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    tp: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    pp: Option<usize>,
    #[arg(long)]
    zero: Option<usize>,
    /// Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev.
    #[arg(long)]
    schedule: Option<String>,
    #[arg(long, value_parser = flags::count)]
    chunks: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    microbatches: Option<usize>,
    /// Sequences per microbatch.
    #[arg(long, value_parser = flags::count, default_value_t = 1)]
    micro_batch: usize,
    /// f32 or bf16 (mixed precision: P, G, K = 2, 2, 12 bytes; 2-byte activations).
    #[arg(long, default_value = "bf16")]
    precision: String,
    /// none, selective or full.
    #[arg(long, default_value = "none")]
    recompute: String,
    /// Largest gradient bucket, MB.
    #[arg(long, default_value_t = 25.0)]
    bucket_mb: f64,
    /// Simulate the planner's best K layouts (with this global batch of sequences) instead of
    /// one given layout.
    #[arg(long, value_parser = flags::count)]
    top: Option<usize>,
    #[arg(long, value_parser = flags::count, default_value_t = 512)]
    global_batch: usize,
    /// Write a Chrome trace of `--trace-devices` (default: replica 0's first tensor rank of
    /// every pipeline device) to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    #[arg(long)]
    trace_devices: Option<String>,
    /// Simulate every data-parallel replica even when they behave alike.
    #[arg(long)]
    every_replica: bool,
    /// Measure this adapter's per-op costs on a small model and write them to FILE.
    #[arg(long)]
    calibrate: Option<PathBuf>,
    /// Calibrate on one model, run ≥ 8 layouts of another here, simulated beside measured.
    #[arg(long)]
    validate: bool,
    /// --calibrate / --validate: measured steps per layout after one warm-up (rounds of one
    /// step of every layout).
    #[arg(long, value_parser = flags::count, default_value_t = 10)]
    steps: usize,
    /// --validate: link model of the virtual devices (nvlink, pcie, ethernet).
    #[arg(long, default_value = "pcie")]
    link: String,
    /// Internal: one rank of `--validate`'s mpirun layouts.
    #[arg(long, hide = true)]
    validate_rank: bool,
    /// Internal: the file whose lock is the serial-timing turn of every rank.
    #[arg(long, hide = true)]
    serial_lock: Option<PathBuf>,
}

/// Everything a plain simulation needs, checked.
struct Setup {
    model: GptConfig,
    cluster: Cluster,
    calibration: Calibration,
    mesh: Mesh,
    precision: Precision,
    recompute: Recompute,
    bucket_bytes: usize,
    peak: f64,
    comm: CommSource,
}

fn setup(cli: &Cli) -> anyhow::Result<Setup> {
    use Preset::*;
    let preset = cli.preset.unwrap_or(SeventyB1024);
    let (shape, seq, vocab, nodes) = match preset {
        SeventyB1024 => ((80, 8192, 64), 2048, 32000, 128),
        SeventyB8192 => ((80, 8192, 64), 2048, 32000, 1024),
        SevenB1Node => ((32, 4096, 32), 2048, 32000, 1),
        SevenB2Nodes => ((32, 4096, 32), 2048, 32000, 2),
        Gpt2OneNode => ((12, 768, 12), 1024, 50257, 1),
    };
    let seq = cli.seq.unwrap_or(seq);
    let model = GptConfig {
        vocab: cli.vocab.unwrap_or(vocab),
        ctx: seq,
        channels: cli.hidden.unwrap_or(shape.1),
        heads: cli.heads.unwrap_or(shape.2),
        layers: cli.layers.unwrap_or(shape.0),
    };
    model.validate()?;
    flags::positive("--tflops", cli.tflops, flags::MAX_TFLOPS)?;
    flags::positive("--bucket-mb", cli.bucket_mb, flags::MAX_BUCKET_MB)?;
    let link = |gbps: f64, us: f64, flag: &str| -> anyhow::Result<Link> {
        flags::positive(flag, gbps, 1e6)?;
        flags::non_negative(&format!("{flag} latency"), us, 1e6)?;
        Ok(Link::gbps(gbps).with_latency_us(us))
    };
    let cluster = Cluster::new(
        cli.nodes.unwrap_or(nodes),
        cli.devices_per_node,
        cli.mem_gb,
        link(cli.intra_gbps, cli.intra_latency_us, "--intra-gbps")?,
        link(cli.inter_gbps, cli.inter_latency_us, "--inter-gbps")?,
        cli.tflops,
    )?;
    let calibration = match &cli.calibration {
        Some(path) => {
            flags::input_file("--calibration", path)?;
            Calibration::load(path)?
        }
        None => Calibration::from_rate(cli.tflops * 1e12),
    };
    let comm = match cli.comm {
        Comm::Cluster => CommSource::Cluster,
        Comm::Calibrated if calibration.links.is_none() => match &cli.calibration {
            Some(p) => bail!(
                "--comm calibrated: {} has no communication measured; make a calibration \
                 with `--calibrate FILE`, which measures it",
                p.display()
            ),
            None => bail!(
                "--comm calibrated needs --calibration FILE with communication measured \
                 (`--calibrate FILE` makes one)"
            ),
        },
        Comm::Calibrated => CommSource::Calibration,
    };
    let (dp, m) = match preset {
        SeventyB8192 => (128, 32),
        _ => (16, 32),
    };
    let schedule: ScheduleKind = cli.schedule.as_deref().unwrap_or("1f1b").parse()?;
    let tp = cli.tp.unwrap_or(8);
    let pp = cli.pp.unwrap_or(8);
    let mesh = Mesh {
        dp: cli.dp.unwrap_or(if cli.nodes.is_some() { 1 } else { dp }),
        tp,
        pp,
        zero: cli.zero.unwrap_or(1),
        schedule,
        microbatches: cli.microbatches.unwrap_or(m),
        chunks: cli.chunks.or(schedule.fixed_chunks()).unwrap_or(
            if schedule == ScheduleKind::Interleaved {
                2
            } else {
                1
            },
        ),
    };
    if cli.top.is_none() {
        // the layout is refused here, with the flags' exit status, not after a header
        mesh.validate(&model, cli.micro_batch, seq, mesh.devices())?;
        if mesh.devices() > cluster.devices() {
            bail!(
                "{} needs {} devices; the cluster has {} (--nodes × --devices-per-node)",
                mesh.describe(),
                mesh.devices(),
                cluster.devices()
            );
        }
    }
    let peak = cli.peak_tflops.unwrap_or(cli.tflops);
    flags::positive("--peak-tflops", peak, flags::MAX_TFLOPS)?;
    Ok(Setup {
        model,
        cluster,
        calibration,
        mesh,
        precision: cli.precision.parse()?,
        recompute: cli.recompute.parse()?,
        bucket_bytes: (cli.bucket_mb * 1e6) as usize,
        peak: peak * 1e12,
        comm,
    })
}

fn main() {
    let cli = Cli::parse();
    if let Some(out) = &cli.calibrate {
        flags::exit_status(flags::output_file("--calibrate", out), |()| {
            measure::calibrate_command(out, cli.steps)
        });
        return;
    }
    if cli.validate_rank {
        let lock = cli.serial_lock.clone().unwrap_or_default();
        flags::exit_status(triaxis::link::Link::by_name(&cli.link), |link| {
            mpi_ranks::child(cli.steps, &lock, link)
        });
        return;
    }
    if cli.validate {
        flags::exit_status(triaxis::link::Link::by_name(&cli.link), |link| {
            measure::validate(link, cli.steps)
        });
        return;
    }
    flags::exit_status(setup(&cli), |s| run(&cli, s));
}

fn run(cli: &Cli, s: Setup) -> anyhow::Result<()> {
    let c = &s.cluster;
    println!(
        "model    {} layers × {} hidden, {} heads, seq {}, vocab {} ({:.2e} parameters), {}",
        s.model.layers,
        s.model.channels,
        s.model.heads,
        s.model.ctx,
        s.model.vocab,
        s.model.param_count() as f64,
        s.precision
    );
    println!(
        "cluster  {} nodes × {} devices of {:.0} GB; intra {:.0} GB/s {:.0} µs, inter {:.0} GB/s {:.0} µs",
        c.nodes,
        c.devices_per_node,
        c.mem_per_device / GB,
        c.intra.bandwidth_bytes_per_s / 1e9,
        c.intra.latency_s * 1e6,
        c.inter.bandwidth_bytes_per_s / 1e9,
        c.inter.latency_s * 1e6
    );
    println!("compute  {}", describe(&s.calibration));
    if let (CommSource::Calibration, Some(l)) = (s.comm, &s.calibration.links) {
        println!(
            "links    measured, host-staged, on every group: staging {} + {}, ring {} per step + {}, message {} + {} ({})",
            seconds(l.staging.per_segment),
            links::rate(&l.staging),
            seconds(l.ring.per_segment),
            links::rate(&l.ring),
            seconds(l.message.per_segment),
            links::rate(&l.message),
            l.transport
        );
    }
    let layouts: Vec<(Mesh, usize)> = match cli.top {
        None => vec![(s.mesh, cli.micro_batch)],
        Some(k) => {
            let req = request(&s, cli.global_batch)?;
            let ranked = plan(&req)?.ranked;
            if ranked.is_empty() {
                bail!("the planner found no layout that fits; try more devices or memory");
            }
            println!(
                "the planner's best {k} of {} fitting layouts:",
                ranked.len()
            );
            ranked
                .iter()
                .take(k)
                .map(|c| (c.layout, c.step.micro_batch))
                .collect()
        }
    };
    for (mesh, micro_b) in layouts {
        let spec = Spec {
            model: s.model,
            micro_b: micro_b.max(1),
            mesh,
            cluster: s.cluster.clone(),
            calibration: s.calibration.clone(),
            precision: s.precision,
            recompute: s.recompute,
            bucket_bytes: s.bucket_bytes,
            every_replica: cli.every_replica,
            comm: s.comm,
        };
        let t0 = std::time::Instant::now();
        let sim = simulate(&spec)?;
        let wall = t0.elapsed().as_secs_f64();
        print_sim(&sim, wall, s.peak);
        print_planner(&s, &sim)?;
        if let Some(path) = &cli.trace {
            let devices = match &cli.trace_devices {
                Some(list) => flags::list::<usize>("--trace-devices", list)?,
                None => (0..mesh.pp).map(|p| p * mesh.tp).collect(),
            };
            let text = serde_json::to_string(&chrome_trace(&sim, &devices))?;
            write_text(path, &text).with_context(|| format!("--trace {}", path.display()))?;
            println!("trace    {} (devices {devices:?})", path.display());
        }
    }
    Ok(())
}

/// The planner's request for the same model, cluster and precision.
fn request(s: &Setup, global_batch: usize) -> anyhow::Result<PlanRequest> {
    Ok(PlanRequest {
        model: shape_of(&s.model)?,
        precision: footprint(s.precision),
        cluster: s.cluster.clone(),
        global_batch,
        overlap: Overlap::Backward,
    })
}

fn footprint(p: Precision) -> Footprint {
    match p {
        Precision::F32 => Footprint::f32_adam(),
        Precision::Bf16 => Footprint::mixed_adam(),
    }
}

fn describe(c: &Calibration) -> String {
    if c.driver.is_empty() && c.model.is_empty() {
        return format!("{} per device, every pass, no fixed cost", c.adapter);
    }
    let f = &c.passes[0];
    format!(
        "calibrated on {} ({}) {}, {}: forward {:.2} GFLOP/s + {} per layer + {} per op",
        c.adapter,
        c.driver,
        c.date,
        c.model,
        1e-9 / f.per_unit.max(1e-300),
        seconds(f.per_block),
        seconds(f.per_segment)
    )
}

fn print_sim(sim: &Simulated, wall: f64, peak: f64) {
    let mesh = &sim.spec.mesh;
    println!(
        "\nlayout   {} ({} devices), microbatch {} sequences",
        mesh.describe(),
        mesh.devices(),
        sim.spec.micro_b
    );
    let ops: usize = sim.plan.programs.iter().map(|p| p.ops.len()).sum();
    println!(
        "simulated {} device programs ({} replica{}, {ops} ops) in {:.3} s",
        sim.plan.programs.len(),
        sim.replicas,
        if sim.replicas == 1 {
            " standing for all: they behave alike"
        } else {
            "s"
        },
        wall
    );
    println!(
        "step     {}   bubble {:.1} %   tokens/s {:.0}   MFU {:.1} %",
        seconds(sim.step()),
        100.0 * sim.bubble,
        sim.tokens_per_s(),
        100.0 * sim.mfu(peak)
    );
    println!(
        "exposed  dp {}   tp {}   pp {}",
        seconds(sim.exposed.dp),
        seconds(sim.exposed.tp),
        seconds(sim.exposed.pp)
    );
    let worst = sim
        .memory
        .iter()
        .enumerate()
        .max_by(|a, b| (a.1.state + a.1.activations).total_cmp(&(b.1.state + b.1.activations)));
    if let Some((d, m)) = worst {
        let fits = m.state + m.activations <= sim.spec.cluster.mem_per_device;
        println!(
            "memory   busiest device {d}: state {:.2} GB + activations {:.2} GB = {:.2} GB ({})",
            m.state / GB,
            m.activations / GB,
            (m.state + m.activations) / GB,
            if fits { "fits" } else { "does NOT fit" }
        );
    }
    println!("{}", critical_path(sim).words());
}

/// The analytic planner's estimate of the same layout, and where the two differ.
fn print_planner(s: &Setup, sim: &Simulated) -> anyhow::Result<()> {
    let mesh = &sim.spec.mesh;
    let global = mesh.dp * mesh.microbatches * sim.spec.micro_b;
    let req = request(s, global)?;
    let e = match estimate(
        &req.model,
        &req.precision,
        &req.cluster,
        mesh,
        global,
        req.overlap,
    ) {
        Ok(e) => e,
        Err(err) => {
            println!("planner  (no estimate: {err})");
            return Ok(());
        }
    };
    let busy = sim.clock.busy.iter().copied().fold(0.0, f64::max);
    println!(
        "planner  step {} ({:+.1} % vs simulated): compute {} (simulated busiest device {}), bubble {:.1} % (simulated {:.1} %), tp {} (simulated exposed {}), dp exposed {} (simulated {})",
        seconds(e.step),
        100.0 * (e.step / sim.step() - 1.0),
        seconds(e.compute),
        seconds(busy),
        100.0 * e.bubble,
        100.0 * sim.bubble,
        seconds(e.tp_comm),
        seconds(sim.exposed.tp),
        seconds(e.dp_exposed),
        seconds(sim.exposed.dp),
    );
    println!(
        "         the planner counts 6·N FLOPs at one rate with equal stages and the schedule's unit bubble; the simulation adds attention and the head's FLOPs where they run, stage imbalance (embedding and head), per-pass fixed costs, the optimizer, and each bucket's reduction where the backward frees it"
    );
    Ok(())
}
