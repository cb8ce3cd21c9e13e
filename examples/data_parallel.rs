//! Data parallelism measured through the engine: d replicas on virtual devices over link
//! presets, on both clocks, next to the ring formula and a one-device reference.
//!
//! `cargo run --release --example data_parallel` — writes `runs/data_parallel/plan_d<d>.txt`
//! (every device's op list of the lowered step) and `data_parallel.json`.
//!
//! Every layout runs on `triaxis::engine::Engine` (`Mesh { dp: d, .. }`): the wall clock from
//! a run with the replicas concurrent, the device clock (`StepCosts::device_step`, every
//! device's program replayed with its communication) from a run with one replica at a time.
//! The engine reduces each bucket with a ring all-reduce as soon as backward finishes it.
//!
//! Every flag is checked before any device work (see `validate`); the caps are generous:
//! degrees ≤ 1024, global batch ≤ 2²⁰ sequences, micro batch, sequence and width ≤ 65536,
//! layers ≤ 4096, buckets ≤ 10⁶ MB, measured steps ≤ 10⁶.

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;
use triaxis::collective::Algo;
use triaxis::cost::comm::{
    fraction_lost, large_p_allreduce_bytes, ring_allreduce_bytes, Convention, Overlap,
};
use triaxis::data::Corpus;
use triaxis::engine::RuntimeOptions;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro, Precision};
use triaxis::pipeline::Link;
use triaxis::runtime::Op;
use triaxis::step::TrainConfig;

#[path = "support/flags.rs"]
mod flags;
#[path = "support/progress.rs"]
mod progress;
use progress::say;

#[path = "support/engine_steps.rs"]
mod engine_steps;
#[path = "support/model_flags.rs"]
mod model_flags;

#[derive(Parser, Debug)]
#[command(
    about = "Measure data-parallel communication: bytes, comm time and exposed comm on two clocks",
    allow_negative_numbers = true
)]
struct Args {
    /// Data-parallel degrees to run (comma list, each 1 to 1024).
    #[arg(long, default_value = "1,2,4", allow_hyphen_values = true)]
    degrees: String,
    /// Link presets for the device clock (comma list of nvlink, pcie, ethernet).
    #[arg(long, default_value = "nvlink,pcie,ethernet")]
    links: String,
    /// Only the rows without overlap (the engine always overlaps: these rows are the same
    /// step with its comm serialised after compute).
    #[arg(long)]
    no_overlap: bool,
    /// All-reduce algorithm of the gradient buckets: ring, naive or tree.
    #[arg(long, default_value = "ring")]
    algo: String,
    /// Global batch in sequences (split over d replicas × microbatches of --micro-batch; a
    /// multiple of every d × --micro-batch; at most 2²⁰).
    #[arg(long, default_value_t = 32, value_parser = flags::count)]
    global_batch: usize,
    /// Sequences per microbatch (1 to 65536).
    #[arg(long, default_value_t = 8, value_parser = flags::count)]
    micro_batch: usize,
    /// Tokens per sequence (1 to 65536, and shorter than the built-in corpus).
    #[arg(long, default_value_t = 32, value_parser = flags::count)]
    seq: usize,
    /// Transformer layers (1 to 4096).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    layers: usize,
    /// Model width (1 to 65536).
    #[arg(long, default_value_t = 128, value_parser = flags::count)]
    channels: usize,
    /// Attention heads (they must divide --channels).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    heads: usize,
    /// Gradient bucket size in MB (above 0, at most 10⁶): smaller buckets start reducing
    /// sooner in the backward, each pays the link latency.
    #[arg(long, default_value_t = 0.25)]
    bucket_mb: f64,
    /// Measured steps per configuration (after one warm-up; 1 to 10⁶); the median is reported.
    #[arg(long, default_value_t = 3, value_parser = flags::count)]
    steps: usize,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
    /// Precision: f32, or bf16 mixed precision (2-byte gradients on the ring or the tree).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/data_parallel")]
    out: PathBuf,
}

fn main() {
    let args = Args::parse();
    flags::exit_status(validate(&args), |checked| run(&args, checked));
}

/// The flags, checked and parsed.
struct Checked {
    degrees: Vec<usize>,
    links: Vec<Link>,
    algo: Algo,
    choice: AdapterChoice,
    m: model_flags::Model,
    precision: Precision,
}

/// Microbatches per replica: the global batch over d × micro batch, or why not.
fn accumulation(global: usize, d: usize, micro_b: usize) -> anyhow::Result<usize> {
    if micro_b == 0 || global == 0 || !global.is_multiple_of(d * micro_b) {
        anyhow::bail!(
            "--global-batch {global} with --degrees {d}: the global batch of {global} sequences \
             is not divisible by d × microbatch = {d} × {micro_b}"
        );
    }
    Ok(global / (d * micro_b))
}

/// Every flag, before any device work: the error names the flag and the constraint. The output
/// directory comes last (checking it creates it).
fn validate(a: &Args) -> anyhow::Result<Checked> {
    let degrees: Vec<usize> = flags::list("--degrees", &a.degrees)?;
    flags::list_in_range("--degrees", &degrees, 1, flags::MAX_DEGREE)?;
    flags::in_range("--global-batch", a.global_batch, 1, flags::MAX_GLOBAL_BATCH)?;
    flags::positive("--bucket-mb", a.bucket_mb, flags::MAX_BUCKET_MB)?;
    flags::in_range("--steps", a.steps, 1, flags::MAX_STEPS)?;
    if let Some(i) = a.adapter {
        flags::in_range("--adapter", i, 0, flags::MAX_ADAPTER)?;
    }
    let links = flags::list::<String>("--links", &a.links)?
        .iter()
        .map(|l| Link::by_name(l))
        .collect::<triaxis::Result<_>>()?;
    let algo = Algo::by_name(&a.algo)?;
    let precision: Precision = a.precision.parse()?;
    if precision == Precision::Bf16 && algo == Algo::Naive {
        anyhow::bail!(
            "--precision bf16 reduces on the bf16 ring or tree: use --algo ring or tree, not naive"
        );
    }
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    let m = model_flags::check(a.layers, a.channels, a.heads, a.seq, a.micro_batch)?;
    for &d in &degrees {
        accumulation(a.global_batch, d, a.micro_batch)?;
    }
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        degrees,
        links,
        algo,
        choice,
        m,
        precision,
    })
}

fn train_config(model: GptConfig, micro: Micro, k: usize, steps: usize) -> TrainConfig {
    engine_steps::train_config(model, micro, k, steps, 1.0)
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let Checked {
        degrees,
        links,
        algo,
        choice,
        m,
        precision,
    } = c;
    let model_flags::Model {
        corpus,
        model,
        micro,
    } = m;
    print_reference();
    let max_d = degrees.iter().copied().max().unwrap_or(1);
    let gpus = Gpu::open_virtual(&choice, max_d)?;
    let grad_bytes = precision.element_bytes() * model.param_count();
    println!(
        "\nadapter  {} ({max_d} virtual devices)",
        gpus[0].adapter_name()
    );
    println!(
        "model    {model:?}: {} parameters, S = {:.2} MB of {precision} gradients",
        model.param_count(),
        grad_bytes as f64 / 1e6
    );
    println!(
        "batch    {} sequences × {} tokens per step; {} all-reduce over {} MB buckets",
        a.global_batch,
        a.seq,
        algo.name(),
        a.bucket_mb
    );
    // the one-device reference: the whole global batch accumulated on one device
    let k1 = accumulation(a.global_batch, 1, a.micro_batch)?;
    let reference = engine_steps::run(
        &gpus,
        train_config(model, micro, k1, a.steps + 1),
        Mesh {
            microbatches: k1,
            ..Mesh::default()
        },
        RuntimeOptions {
            serial: true,
            precision,
            ..RuntimeOptions::default()
        },
        &corpus,
        1,
    )?
    .engine
    .state()?;
    let overlaps: Vec<bool> = if a.no_overlap {
        vec![false]
    } else {
        vec![false, true]
    };
    let bar = progress::bar((degrees.len() * links.len()) as u64);
    let mut rows = Vec::new();
    say(
        &bar,
        format!(
            "\n{:>2} {:>8} {:<9} {:>11} {:>12} {:>10} {:>12} {:>7} {:>10} {:>10} {:>10} {:>8} {:>8}",
            "d",
            "overlap",
            "link",
            "step(wall)",
            "compute(dev)",
            "comm(dev)",
            "exposed(dev)",
            "comm %",
            "bytes/rank",
            "formula",
            "tokens/s",
            "buckets",
            "Δ 1 dev"
        ),
    );
    for &d in &degrees {
        let k = accumulation(a.global_batch, d, a.micro_batch)?;
        let cfg = train_config(model, micro, k, a.steps + 1);
        let mesh = Mesh {
            dp: d,
            microbatches: k,
            ..Mesh::default()
        };
        // per link: the wall-clock step, the device-clock costs, the difference to one device
        let mut got = Vec::new();
        for link in &links {
            bar.set_message(format!("d={d} link={}", link.name));
            // wall clock: replicas concurrently; device clock: one at a time (clean kernel times)
            let engine_run = |serial: bool| {
                let opts = RuntimeOptions {
                    link: *link,
                    serial,
                    bucket_bytes: (a.bucket_mb * 1e6) as usize,
                    dp_algo: algo,
                    precision,
                    ..RuntimeOptions::default()
                };
                engine_steps::run(&gpus, cfg.clone(), mesh, opts, &corpus, 1)
            };
            let wall = engine_run(false)?.median().wall;
            let dev = engine_run(true)?;
            let diff = engine_steps::rel_diff(&dev.engine.state()?.params, &reference.params);
            if let (Some(p), true) = (dev.engine.plan(), d > 1 && link == &links[0]) {
                std::fs::write(a.out.join(format!("plan_d{d}.txt")), p.to_string())?;
            }
            let buckets =
                engine_steps::count_ops(&dev.engine, |o| matches!(o, Op::ReduceGrad { .. }));
            got.push((link, wall, dev.median(), diff, buckets));
            bar.inc(1);
        }
        let formula = ring_allreduce_bytes(grad_bytes as f64, d);
        let tokens = (a.global_batch * a.seq) as f64;
        for &overlap in &overlaps {
            for (link, wall, r, diff, buckets) in &got {
                // the replay with data-parallel comm free: compute, norm and AdamW
                let compute = r.device_step - r.dp_exposed;
                // without overlap (not an engine mode) the same comm runs after compute
                let exposed = if overlap { r.dp_exposed } else { r.dp_comm };
                let step_dev = compute + exposed;
                let wall = overlap.then_some(*wall);
                say(&bar, format!(
                    "{:>2} {:>8} {:<9} {:>11} {:>10.1}ms {:>8.2}ms {:>10.2}ms {:>6.2}% {:>10} {:>10.0} {:>10.0} {:>8} {:>8.1e}",
                    d,
                    if overlap { "yes" } else { "no*" },
                    link.name,
                    wall.map_or("-".into(), |w| format!("{:.1}ms", w * 1e3)),
                    compute * 1e3,
                    r.dp_comm.max(0.0) * 1e3,
                    exposed.max(0.0) * 1e3,
                    100.0 * exposed.max(0.0) / step_dev.max(1e-12),
                    r.dp_bytes,
                    formula,
                    tokens / step_dev.max(1e-12),
                    buckets,
                    diff,
                ));
                rows.push(
                    json!({"d": d, "overlap": overlap, "link": link.name, "step_wall": wall,
                    "compute_device": compute, "comm_device": r.dp_comm, "exposed_device": exposed,
                    "step_device": step_dev, "bytes_per_rank": r.dp_bytes,
                    "ring_formula_bytes": formula, "buckets": buckets,
                    "rel_diff_one_device": diff, "costs": r}),
                );
            }
        }
    }
    bar.finish_and_clear();
    tree_cost(a, &gpus, model, micro, &corpus, precision)?;
    let path = a.out.join("data_parallel.json");
    std::fs::write(&path, serde_json::to_string_pretty(&rows)?)?;
    println!(
        "\nbytes/rank: the busiest replica's bytes sent in the ring; formula: 2(d−1)/d·S [{}]",
        Convention::Ring
    );
    println!(
        "compute(dev): the device-clock step with data-parallel comm free (passes, norm, AdamW); \
         exposed(dev): the comm it does not hide; buckets: gradient reductions per device"
    );
    println!(
        "no*: not an engine mode; the same step with its comm after compute (exposed = comm); \
         Δ 1 dev: ‖θ − θ₁‖/‖θ₁‖ against the global batch on one device"
    );
    println!(
        "wrote {} and plan_d<d>.txt (every device's op list)",
        path.display()
    );
    Ok(())
}

/// The price of layout-invariant bits: pairwise-tree accumulation against sequential
/// accumulation, same global batch, on one device (the deepest tree; no all-reduce at d = 1).
fn tree_cost(
    a: &Args,
    gpus: &[Gpu],
    model: GptConfig,
    micro: Micro,
    corpus: &Corpus,
    precision: Precision,
) -> anyhow::Result<()> {
    use triaxis::parallel::accumulate::Accumulation;
    let d = 1;
    let k = accumulation(a.global_batch, d, a.micro_batch)?;
    if !k.is_power_of_two() {
        println!("\nlayout-invariant mode skipped: needs power-of-two d and accumulation (d = {d}, k = {k})");
        return Ok(());
    }
    let cfg = train_config(model, micro, k, 5);
    let mesh = Mesh {
        dp: d,
        microbatches: k,
        ..Mesh::default()
    };
    let (mut wall, mut grads) = (Vec::new(), Vec::new());
    for accumulation in [Accumulation::Sequential, Accumulation::PairwiseTree] {
        let opts = RuntimeOptions {
            dp_algo: Algo::Tree,
            accumulation,
            precision,
            ..RuntimeOptions::default()
        };
        let run = engine_steps::run(gpus, cfg.clone(), mesh, opts, corpus, 9)?;
        let mut t: Vec<f64> = run.costs.iter().map(|c| c.wall).collect();
        t.sort_by(f64::total_cmp);
        wall.push(t[t.len() / 2]);
        grads.push(run.last().memory[0].peak.gradients);
    }
    println!(
        "\nlayout-invariant mode (d = {d}, k = {k}, pairwise tree): step {:.1} ms vs {:.1} ms sequential on the wall clock ({:+.0} %), \
         {:.2} MB more gradient memory per device ({} tree levels)",
        wall[1] * 1e3,
        wall[0] * 1e3,
        100.0 * (wall[1] / wall[0] - 1.0),
        grads[1].saturating_sub(grads[0]) as f64 / 1e6,
        k.trailing_zeros() + 1
    );
    Ok(())
}

/// docs/design.md's reference case, from the same cost functions the measurement quotes.
fn print_reference() {
    let s = 7e9 * 2.0;
    let (ring, large) = (ring_allreduce_bytes(s, 8), large_p_allreduce_bytes(s));
    let t = Link::gbps(400.0).time(large);
    println!(
        "reference: 7e9 parameters in bf16 → S = {:.0} GB of gradients per step",
        s / 1e9
    );
    println!(
        "  all-reduce per card: {:.1} GB [{}, p = 8], {:.1} GB [{}]",
        ring / 1e9,
        Convention::Ring,
        large / 1e9,
        Convention::LargeP
    );
    println!(
        "  at 400 GB/s: {:.0} ms; with a 200 ms step {:.0} % of the time is lost [{}], {:.0} % [{}]",
        t * 1e3,
        100.0 * fraction_lost(t, 0.2, Overlap::None),
        Overlap::None,
        100.0 * fraction_lost(t, 0.2, Overlap::Backward),
        Overlap::Backward
    );
}
