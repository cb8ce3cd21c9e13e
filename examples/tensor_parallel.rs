//! Tensor parallelism measured through the engine: the whole model split over t ∈ {1, 2, 4}
//! virtual devices (`Mesh { tp: t, .. }`, Megatron column/row split of every layer), its
//! all-reduces costed on an intra-node (NVLink-class) and an inter-node (Ethernet-class) link.
//!
//! `cargo run --release --example tensor_parallel` — prints, per (t, link): compute, comm and
//! step time on the device clock, tokens/s, the slowdown against t = 1, the bytes and comm time
//! the cost model predicts and the distance to one device's parameters; then the same run
//! projected onto an accelerator of `--reference-tflops`, and the cost model's reference case
//! (a GPT-3 175B layer over 8 GPUs). Writes `runs/tensor_parallel/{tensor_parallel.json,
//! step_time.svg, step_time_projected.svg}`.
//!
//! Device clock (`StepCosts::device_step`): every rank's kernels timed by the GPU, every
//! device's program replayed with each all-reduce's ring on the link model (one engine per
//! link). The ranks share this machine's cores, so the wall clock is not reported.
//!
//! Every flag is checked before any device work (see `validate`); the caps are generous:
//! degrees ≤ 1024, microbatch counts, micro batch, sequence and width ≤ 65536, layers ≤ 4096,
//! measured steps ≤ 10⁶, reference speed ≤ 10⁶ TFLOP/s.

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;
use triaxis::cost::comm::tp_block_traffic;
use triaxis::engine::RuntimeOptions;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Precision};
use triaxis::pipeline::Link;
use triaxis::runtime::Op;

#[path = "support/flags.rs"]
mod flags;
#[path = "support/plot.rs"]
mod plot;
#[path = "support/progress.rs"]
mod progress;
use plot::{write_svg, Chart, Series};

#[path = "support/engine_steps.rs"]
mod engine_steps;
#[path = "support/model_flags.rs"]
mod model_flags;

#[derive(Parser, Debug)]
#[command(
    about = "Measure what tensor parallelism costs on an intra-node and an inter-node link",
    allow_negative_numbers = true
)]
struct Args {
    /// Tensor-parallel degrees to run (comma list, each 1 to 1024; each must divide the heads).
    #[arg(long, default_value = "1,2,4", allow_hyphen_values = true)]
    degrees: String,
    /// Link presets of the tensor-parallel all-reduces (comma list of nvlink, pcie, ethernet).
    #[arg(long, default_value = "nvlink,ethernet")]
    links: String,
    /// Sequences per microbatch (1 to 65536).
    #[arg(long, default_value_t = 8, value_parser = flags::count)]
    micro_batch: usize,
    /// Microbatches accumulated per step (1 to 65536).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    microbatches: usize,
    /// Tokens per sequence (1 to 65536, and shorter than the built-in corpus).
    #[arg(long, default_value_t = 64, value_parser = flags::count)]
    seq: usize,
    /// Transformer layers (1 to 4096).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    layers: usize,
    /// Model width (1 to 65536).
    #[arg(long, default_value_t = 256, value_parser = flags::count)]
    channels: usize,
    /// Attention heads (they must divide --channels).
    #[arg(long, default_value_t = 8, value_parser = flags::count)]
    heads: usize,
    /// Measured steps per configuration (after one warm-up; 1 to 10⁶); the median is reported.
    #[arg(long, default_value_t = 5, value_parser = flags::count)]
    steps: usize,
    /// Sustained speed of the accelerator the projection assumes, in TFLOP/s (above 0, at
    /// most 10⁶).
    #[arg(long, default_value_t = 100.0)]
    reference_tflops: f64,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
    /// Precision: f32, or bf16 mixed precision (2-byte partial sums on the all-reduces).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/tensor_parallel")]
    out: PathBuf,
}

/// One (t, link) measurement: device-clock seconds per step (medians) and bytes.
#[derive(Clone, Debug)]
struct Row {
    t: usize,
    link: String,
    compute: f64,
    comm: f64,
    all_reduces: usize,
    bytes_per_rank: u64,
    predicted_comm: f64,
    predicted_bytes: f64,
    /// ‖θ − θ₁‖/‖θ₁‖ after the run against the same steps on one device.
    diff: f64,
}

impl Row {
    fn step(&self) -> f64 {
        self.compute + self.comm
    }
}

fn main() {
    let args = Args::parse();
    flags::exit_status(validate(&args), |checked| run(&args, checked));
}

/// The flags, checked and parsed.
struct Checked {
    degrees: Vec<usize>,
    links: Vec<Link>,
    choice: AdapterChoice,
    m: model_flags::Model,
    precision: Precision,
}

/// Every flag, before any device work: the error names the flag and the constraint. The output
/// directory comes last (checking it creates it).
fn validate(a: &Args) -> anyhow::Result<Checked> {
    let degrees: Vec<usize> = flags::list("--degrees", &a.degrees)?;
    flags::list_in_range("--degrees", &degrees, 1, flags::MAX_DEGREE)?;
    flags::in_range("--microbatches", a.microbatches, 1, flags::MAX_MICROBATCHES)?;
    flags::in_range("--steps", a.steps, 1, flags::MAX_STEPS)?;
    flags::positive("--reference-tflops", a.reference_tflops, flags::MAX_TFLOPS)?;
    if let Some(i) = a.adapter {
        flags::in_range("--adapter", i, 0, flags::MAX_ADAPTER)?;
    }
    let links = flags::list::<String>("--links", &a.links)?
        .iter()
        .map(|l| Link::by_name(l))
        .collect::<triaxis::Result<_>>()?;
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    let precision: Precision = a.precision.parse()?;
    let m = model_flags::check(a.layers, a.channels, a.heads, a.seq, a.micro_batch)?;
    for &t in &degrees {
        m.model
            .check_tp(t)
            .map_err(|e| anyhow::anyhow!("--degrees {t}: {e}"))?;
    }
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        degrees,
        links,
        choice,
        m,
        precision,
    })
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let Checked {
        degrees,
        links,
        choice,
        m,
        precision,
    } = c;
    let model_flags::Model {
        corpus,
        model,
        micro,
    } = m;
    let max_t = degrees.iter().copied().max().unwrap_or(1);
    let gpus = Gpu::open_virtual(&choice, max_t)?;
    let tokens = (micro.tokens() * a.microbatches) as f64;
    let flops = model_flops(&model, a.seq) * tokens;
    println!(
        "adapter  {} ({max_t} virtual devices)",
        gpus[0].adapter_name()
    );
    println!(
        "model    {model:?}: {} parameters; {} microbatches × {} × {} tokens per step; {:.2} GFLOP per step; {precision}",
        model.param_count(),
        a.microbatches,
        micro.b,
        micro.t,
        flops / 1e9
    );
    let bar = progress::bar(degrees.len() as u64);
    let cfg = engine_steps::train_config(model, micro, a.microbatches, a.steps + 1, 1.0);
    let measure = |t: usize, link: &Link| {
        let mesh = Mesh {
            tp: t,
            microbatches: a.microbatches,
            ..Mesh::default()
        };
        let opts = RuntimeOptions {
            tp_link: *link,
            serial: true,
            precision,
            ..RuntimeOptions::default()
        };
        engine_steps::run(&gpus, cfg.clone(), mesh, opts, &corpus, 1)
    };
    // the one-device run: the reference of every layout, and the t = 1 rows (no all-reduce,
    // so no link to cost)
    let one = measure(1, &links[0])?;
    let one_device = one.engine.state()?;
    let mut rows: Vec<Row> = Vec::new();
    for &t in &degrees {
        bar.set_message(format!("t={t}"));
        for link in &links {
            let fresh;
            let run = if t == 1 {
                &one
            } else {
                fresh = measure(t, link)?;
                &fresh
            };
            let r = run.median();
            let all_reduces =
                engine_steps::count_ops(&run.engine, |o| matches!(o, Op::TpAllReduce { .. }));
            let per_block = tp_block_traffic(
                micro.b,
                micro.t,
                model.channels,
                precision.element_bytes() as f64,
                t,
                *link,
            );
            let blocks = (model.layers * a.microbatches) as f64;
            rows.push(Row {
                t,
                link: link.name.to_string(),
                // the all-reduces block the compute stream: the rest of the step is compute
                compute: r.device_step - r.tp_comm,
                comm: r.tp_comm,
                all_reduces,
                bytes_per_rank: r.tp_bytes,
                predicted_comm: blocks * per_block.time,
                predicted_bytes: blocks * per_block.bytes,
                diff: engine_steps::rel_diff(&run.engine.state()?.params, &one_device.params),
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!("\nmeasured on this adapter (device clock, per step; comm = tensor-parallel all-reduces on the link model)");
    table(&rows, tokens, 1.0);
    let rate = rows
        .iter()
        .find(|r| r.t == 1)
        .map(|r| flops / r.compute)
        .unwrap_or(0.0);
    if rate > 0.0 {
        let scale = rate / (a.reference_tflops * 1e12);
        println!(
            "\nprojected: the same kernels at {} TFLOP/s (this adapter ran {:.1} GFLOP/s at t = 1, so compute × {:.2e}); comm unchanged",
            a.reference_tflops,
            rate / 1e9,
            scale
        );
        let projected: Vec<Row> = rows
            .iter()
            .map(|r| Row {
                compute: r.compute * scale,
                ..r.clone()
            })
            .collect();
        table(&projected, tokens, scale);
        chart(
            &a.out.join("step_time_projected.svg"),
            &format!(
                "Step time vs tensor-parallel degree at {} TFLOP/s (projected)",
                a.reference_tflops
            ),
            &projected,
            &links,
        )?;
    }
    chart(
        &a.out.join("step_time.svg"),
        &format!(
            "Step time vs tensor-parallel degree on {}",
            gpus[0].adapter_name()
        ),
        &rows,
        &links,
    )?;
    reference(a.reference_tflops);
    let path = a.out.join("tensor_parallel.json");
    let json_rows: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"t": r.t, "link": r.link, "compute_device_s": r.compute, "comm_device_s": r.comm,
                "step_device_s": r.step(), "all_reduces": r.all_reduces, "bytes_per_rank": r.bytes_per_rank,
                "predicted_comm_s": r.predicted_comm, "predicted_bytes_per_rank": r.predicted_bytes,
                "tokens_per_s": tokens / r.step(), "rel_diff_one_device": r.diff})
        })
        .collect();
    std::fs::write(&path, serde_json::to_string_pretty(&json_rows)?)?;
    println!(
        "\ncompute: the device-clock step less its all-reduces (passes, norm, AdamW); all-reduces: one device's \
         in the lowered step, 2 forward + 2 backward per layer per microbatch; bytes: the busiest rank's ring sends per step;"
    );
    println!("predicted: the cost model's tp_block_traffic × layers × microbatches (ring, bytes/β + α per round);");
    println!("Δ 1 dev: ‖θ − θ₁‖/‖θ₁‖ after the same steps on one device");
    println!(
        "wrote {}, step_time.svg and step_time_projected.svg",
        path.display()
    );
    Ok(())
}

/// Training FLOPs per token: 6 per weight of the layers and head (forward 2, backward 4) plus
/// attention scores and mixing, 6·2·T·C per layer (the usual GPT estimate, full T×T).
fn model_flops(m: &GptConfig, seq: usize) -> f64 {
    let (c, l) = (m.channels as f64, m.layers as f64);
    let weights = l * 12.0 * c * c + c * m.vocab as f64;
    6.0 * weights + 6.0 * l * 2.0 * seq as f64 * c
}

/// The rows, each step against t = 1's on the same link.
fn table(rows: &[Row], tokens: f64, scale: f64) {
    let base = |link: &str| {
        rows.iter()
            .find(|r| r.t == 1 && r.link == link)
            .map(Row::step)
    };
    println!(
        " t link          compute        comm        step  comm %     tokens/s    vs t=1  all-reduces   bytes/rank             predicted  Δ 1 dev"
    );
    for r in rows {
        let step = r.step();
        let slow = base(&r.link).map_or(f64::NAN, |b| step / b);
        println!(
            "{:>2} {:<9} {:>9.3}ms {:>9.3}ms {:>9.3}ms {:>6.1}% {:>12.0} {:>8.2}× {:>12} {:>12} {:>8.0} B {:.3}ms {:>8.1e}",
            r.t,
            r.link,
            r.compute * 1e3,
            r.comm * 1e3,
            step * 1e3,
            100.0 * r.comm / step,
            tokens / step,
            slow,
            r.all_reduces,
            r.bytes_per_rank,
            r.predicted_bytes,
            r.predicted_comm * 1e3,
            r.diff,
        );
    }
    if scale != 1.0 {
        println!("(vs t=1 > 1 means tensor parallelism made the step slower, not faster)");
    }
}

fn chart(path: &std::path::Path, title: &str, rows: &[Row], links: &[Link]) -> anyhow::Result<()> {
    let series: Vec<Series> = links
        .iter()
        .map(|l| {
            let pts = rows
                .iter()
                .filter(|r| r.link == l.name)
                .map(|r| (r.t as f64, r.step() * 1e3))
                .collect();
            Series::measured(format!("{} (compute + comm)", l.name), pts)
        })
        .chain(links.first().map(|l| {
            let pts = rows
                .iter()
                .filter(|r| r.link == l.name)
                .map(|r| (r.t as f64, r.compute * 1e3))
                .collect();
            Series::theory("compute only (no comm)", pts)
        }))
        .collect();
    write_svg(
        path,
        &Chart {
            title,
            x_label: "tensor-parallel degree t",
            y_label: "step time on the device clock (ms)",
            log_x: true,
            y_percent: false,
            series: &series,
        },
    )?;
    Ok(())
}

/// The cost model's reference: one GPT-3 175B layer (h = 12288, 96 heads, s = 2048, one
/// sequence per microbatch, bf16 activations) over t = 8 GPUs at `tflops`, on each link.
fn reference(tflops: f64) {
    let (h, s, b, t) = (12288usize, 2048usize, 1usize, 8usize);
    let flop = 6.0 * (12.0 * (h * h) as f64 + 2.0 * (s * h) as f64) * (b * s) as f64;
    let compute1 = flop / (tflops * 1e12);
    println!(
        "\nreference (cost model): one GPT-3 175B layer, h = {h}, s = {s}, b = {b}, bf16, t = {t}, {tflops} TFLOP/s"
    );
    println!(
        "  t = 1: compute {:.2} ms per layer per microbatch (fwd + bwd)",
        compute1 * 1e3
    );
    for link in [Link::nvlink(), Link::pcie(), Link::ethernet()] {
        let tr = tp_block_traffic(b, s, h, 2.0, t, link);
        let step = compute1 / t as f64 + tr.time;
        println!(
            "  t = {t} over {:<9} compute {:.2} ms + comm {:.2} ms ({:.0} MB per GPU) = {:.2} ms: {:.1}× faster than one GPU, {:.0} % of the ideal {t}×",
            link.name,
            compute1 / t as f64 * 1e3,
            tr.time * 1e3,
            tr.bytes / 1e6,
            step * 1e3,
            compute1 / step,
            100.0 * compute1 / step / t as f64
        );
    }
}
