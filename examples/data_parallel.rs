//! Data parallelism measured: d replicas on virtual devices, with and without overlapping the
//! gradient all-reduce with backward, over link presets, on both clocks, next to the formula.
//!
//! `cargo run --release --example data_parallel` — writes `runs/data_parallel/trace_d<d>.json`
//! (compute and comm tracks of one step) and `data_parallel.json`.
//!
//! Every flag is checked before any device work (see `validate`); the caps are generous:
//! degrees ≤ 1024, global batch ≤ 2²⁰ sequences, micro batch, sequence and width ≤ 65536,
//! layers ≤ 4096, buckets ≤ 10⁶ MB, measured steps ≤ 10⁶.

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;
use triaxis::collective::Algo;
use triaxis::cost::comm::{
    fraction_lost, large_p_allreduce_bytes, ring_allreduce_bytes, Convention, Link as CostLink,
    Overlap,
};
use triaxis::cpu::AdamW;
use triaxis::data::{Batcher, Corpus};
use triaxis::flags;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::model::{GptConfig, Micro};
use triaxis::parallel::data::{DataParallel, DpOptions, DpStepReport};
use triaxis::pipeline::Link;
use triaxis::progress::{self, say};
use triaxis::step::TrainConfig;

#[path = "support/model_flags.rs"]
mod model_flags;

#[derive(Parser, Debug)]
#[command(
    about = "Measure data-parallel communication: bytes, comm time and exposed comm on two clocks"
)]
struct Args {
    /// Data-parallel degrees to run (comma list, each 1 to 1024).
    #[arg(long, default_value = "1,2,4")]
    degrees: String,
    /// Link presets for the device clock (comma list of nvlink, pcie, ethernet).
    #[arg(long, default_value = "nvlink,pcie,ethernet")]
    links: String,
    /// Only run without overlap.
    #[arg(long)]
    no_overlap: bool,
    /// All-reduce algorithm: ring, naive or tree.
    #[arg(long, default_value = "ring")]
    algo: String,
    /// Global batch in sequences (split over d replicas × microbatches of --micro-batch; a
    /// multiple of every d × --micro-batch; at most 2²⁰).
    #[arg(long, default_value_t = 32)]
    global_batch: usize,
    /// Sequences per microbatch (1 to 65536).
    #[arg(long, default_value_t = 8)]
    micro_batch: usize,
    /// Tokens per sequence (1 to 65536, and shorter than the built-in corpus).
    #[arg(long, default_value_t = 32)]
    seq: usize,
    /// Transformer layers (1 to 4096).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Model width (1 to 65536).
    #[arg(long, default_value_t = 128)]
    channels: usize,
    /// Attention heads (they must divide --channels).
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Gradient bucket size in MB (above 0, at most 10⁶).
    #[arg(long, default_value_t = 0.25)]
    bucket_mb: f64,
    /// Measured steps per configuration (after one warm-up; 1 to 10⁶); the median is reported.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long)]
    adapter: Option<usize>,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/data_parallel")]
    out: PathBuf,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = validate(&args).and_then(|checked| run(&args, checked)) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The flags, checked and parsed.
struct Checked {
    degrees: Vec<usize>,
    links: Vec<Link>,
    algo: Algo,
    choice: AdapterChoice,
    m: model_flags::Model,
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
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    let m = model_flags::check(a.layers, a.channels, a.heads, a.seq, a.micro_batch)?;
    for &d in &degrees {
        DataParallel::accumulation(a.global_batch, d, a.micro_batch).map_err(|e| {
            anyhow::anyhow!("--global-batch {} with --degrees {d}: {e}", a.global_batch)
        })?;
    }
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        degrees,
        links,
        algo,
        choice,
        m,
    })
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let Checked {
        degrees,
        links,
        algo,
        choice,
        m,
    } = c;
    let model_flags::Model {
        corpus,
        model,
        micro,
    } = m;
    print_reference();
    let max_d = degrees.iter().copied().max().unwrap_or(1);
    let gpus = Gpu::open_virtual(&choice, max_d)?;
    let grad_bytes = 4 * model.param_count();
    println!(
        "\nadapter  {} ({max_d} virtual devices)",
        gpus[0].adapter_name()
    );
    println!(
        "model    {model:?}: {} parameters, S = {:.2} MB of f32 gradients",
        model.param_count(),
        grad_bytes as f64 / 1e6
    );
    println!(
        "batch    {} sequences × {} tokens per step; {algo:?} all-reduce, {} MB buckets",
        a.global_batch, a.seq, a.bucket_mb
    );
    let overlaps: Vec<bool> = if a.no_overlap {
        vec![false]
    } else {
        vec![false, true]
    };
    let bar = progress::bar((degrees.len() * overlaps.len()) as u64);
    let mut batcher = Batcher::new(1);
    let mut rows = Vec::new();
    say(
        &bar,
        format!(
            "\n{:>2} {:>8} {:<9} {:>10} {:>11} {:>10} {:>10} {:>12} {:>7} {:>10} {:>10} {:>10}",
            "d",
            "overlap",
            "link",
            "compute",
            "comm(wall)",
            "exposed",
            "comm(dev)",
            "exposed(dev)",
            "comm %",
            "bytes/rank",
            "formula",
            "tokens/s"
        ),
    );
    for &d in &degrees {
        let k = DataParallel::accumulation(a.global_batch, d, a.micro_batch)?;
        for &overlap in &overlaps {
            bar.set_message(format!("d={d} overlap={overlap}"));
            let cfg = TrainConfig {
                model,
                micro,
                grad_accum: k,
                steps: a.steps + 1,
                adam: AdamW::default(),
                warmup: 1,
                min_lr_frac: 1.0,
                seed: 1,
            };
            let mut reports: Vec<Vec<DpStepReport>> = vec![Vec::new(); links.len()];
            // one DataParallel per link preset: the link only changes the device-clock costing
            for (li, link) in links.iter().enumerate() {
                // wall clock: replicas concurrently; device clock: one at a time (clean kernel times)
                let mut measure = |serial: bool| -> anyhow::Result<DpStepReport> {
                    let opts = DpOptions {
                        algo,
                        link: link.clone(),
                        overlap,
                        serial,
                        bucket_bytes: (a.bucket_mb * 1e6) as usize,
                        ..Default::default()
                    };
                    let mut dp = DataParallel::new(&gpus[..d], cfg.clone(), opts)?;
                    let mut got = Vec::new();
                    for s in 0..=a.steps {
                        let batches = (0..d * k)
                            .map(|_| corpus.train_batch(&mut batcher, micro))
                            .collect::<triaxis::Result<Vec<_>>>()?;
                        let r = dp.step(&batches, s)?;
                        if s > 0 {
                            got.push(r);
                        }
                    }
                    Ok(median(&mut got))
                };
                let wall = measure(false)?;
                let dev = measure(true)?;
                reports[li].push(DpStepReport {
                    compute_wall: wall.compute_wall,
                    comm_wall: wall.comm_wall,
                    exposed_wall: wall.exposed_wall,
                    step_wall: wall.step_wall,
                    ..dev
                });
                let r = median(&mut reports[li]);
                let formula = ring_allreduce_bytes(grad_bytes as f64, d);
                let tokens = (a.global_batch * a.seq) as f64;
                let step_dev = r.compute_device + r.exposed_device;
                say(&bar, format!(
                    "{:>2} {:>8} {:<9} {:>8.1}ms {:>9.1}ms {:>8.1}ms {:>8.2}ms {:>10.2}ms {:>6.2}% {:>10} {:>10.0} {:>10.0}",
                    d,
                    if overlap { "yes" } else { "no" },
                    link.name,
                    r.compute_wall * 1e3,
                    r.comm_wall * 1e3,
                    r.exposed_wall * 1e3,
                    r.comm_device.max(0.0) * 1e3,
                    r.exposed_device.max(0.0) * 1e3,
                    100.0 * r.exposed_device.max(0.0) / step_dev.max(1e-12),
                    r.bytes_per_rank.iter().max().copied().unwrap_or(0),
                    formula,
                    tokens / step_dev.max(1e-12),
                ));
                rows.push(json!({"d": d, "overlap": overlap, "link": link.name, "compute_wall": r.compute_wall,
                    "comm_wall": r.comm_wall, "exposed_wall": r.exposed_wall, "compute_device": r.compute_device,
                    "comm_device": r.comm_device, "exposed_device": r.exposed_device,
                    "bytes_per_rank": r.bytes_per_rank, "ring_formula_bytes": formula, "step_wall": r.step_wall}));
                if overlap && li == 0 && d > 1 {
                    std::fs::write(
                        a.out.join(format!("trace_d{d}.json")),
                        serde_json::to_string(&trace(d, &r))?,
                    )?;
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    tree_cost(a, &gpus, model, micro, &corpus)?;
    let path = a.out.join("data_parallel.json");
    std::fs::write(&path, serde_json::to_string_pretty(&rows)?)?;
    println!(
        "\nbytes/rank: the busiest rank's bytes sent in the ring; formula: 2(d−1)/d·S [{}]",
        Convention::Ring
    );
    println!(
        "wrote {} and trace_d<d>.json (compute and comm tracks, device clock; open in Perfetto)",
        path.display()
    );
    Ok(())
}

/// The price of layout-invariant bits: pairwise-tree accumulation + tree all-reduce against the
/// default (sequential accumulation, ring), same global batch, on one device (the deepest tree).
fn tree_cost(
    a: &Args,
    gpus: &[Gpu],
    model: GptConfig,
    micro: Micro,
    corpus: &Corpus,
) -> anyhow::Result<()> {
    use triaxis::parallel::accumulate::{Accumulation, TreeAccumulator};
    let d = 1;
    let k = DataParallel::accumulation(a.global_batch, d, a.micro_batch)?;
    if !k.is_power_of_two() || !d.is_power_of_two() {
        println!("\nlayout-invariant mode skipped: needs power-of-two d and accumulation (d = {d}, k = {k})");
        return Ok(());
    }
    let cfg = TrainConfig {
        model,
        micro,
        grad_accum: k,
        steps: 4,
        adam: AdamW::default(),
        warmup: 1,
        min_lr_frac: 1.0,
        seed: 1,
    };
    let mut wall = Vec::new();
    for (algo, acc) in [
        (Algo::Ring, Accumulation::Sequential),
        (Algo::Tree, Accumulation::PairwiseTree),
    ] {
        let opts = DpOptions {
            algo,
            accumulation: acc,
            overlap: false,
            ..Default::default()
        };
        let mut dp = DataParallel::new(&gpus[..d], cfg.clone(), opts)?;
        let mut b = Batcher::new(9);
        let mut t = Vec::new();
        for s in 0..4 {
            let batches = (0..d * k)
                .map(|_| corpus.train_batch(&mut b, micro))
                .collect::<triaxis::Result<Vec<_>>>()?;
            t.push(dp.step(&batches, s)?.step_wall);
        }
        t.sort_by(f64::total_cmp);
        wall.push(t[2]);
    }
    let extra = TreeAccumulator::new(
        &gpus[0],
        &gpus[0].buffer("probe", model.layout(&model.blocks()).total),
        k,
    )?
    .bytes();
    println!(
        "\nlayout-invariant mode (d = {d}, k = {k}): step {:.1} ms vs {:.1} ms sequential+ring on the wall clock ({:+.0} %), \
         {:.2} MB more gradient memory per device ({} tree levels)",
        wall[1] * 1e3,
        wall[0] * 1e3,
        100.0 * (wall[1] / wall[0] - 1.0),
        extra as f64 / 1e6,
        k.trailing_zeros() + 1
    );
    Ok(())
}

/// The median report by device-clock step time.
fn median(v: &mut [DpStepReport]) -> DpStepReport {
    v.sort_by(|x, y| {
        (x.compute_device + x.exposed_device).total_cmp(&(y.compute_device + y.exposed_device))
    });
    v[v.len() / 2].clone()
}

/// A Chrome trace of one step on the device clock: a compute track per replica (its measured
/// kernel time) and a comm track with one slice per bucket all-reduce.
fn trace(d: usize, r: &DpStepReport) -> serde_json::Value {
    let us = |t: f64| t * 1e6;
    let mut ev = vec![
        json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "device clock"}}),
    ];
    for rank in 0..d {
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": rank, "args": {"name": format!("replica {rank} compute")}}));
        ev.push(json!({"ph": "X", "pid": 0, "tid": rank, "name": "forward+backward", "ts": 0.0, "dur": us(r.compute_device)}));
    }
    ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": 100, "args": {"name": "all-reduce"}}));
    for (b, t) in r.buckets.iter().enumerate() {
        ev.push(json!({"ph": "X", "pid": 0, "tid": 100, "name": format!("bucket {b} ({} B)", t.bytes),
            "ts": us(t.start_device), "dur": us(t.end_device - t.start_device), "args": {"ready": us(t.ready_device)}}));
    }
    json!({"traceEvents": ev, "displayTimeUnit": "ms"})
}

/// DESIGN.md's reference case, from the same cost functions the measurement quotes.
fn print_reference() {
    let s = 7e9 * 2.0;
    let (ring, large) = (ring_allreduce_bytes(s, 8), large_p_allreduce_bytes(s));
    let t = CostLink::gbps(400.0).time(large);
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
