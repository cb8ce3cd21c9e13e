//! ZeRO measured through the engine: stages 0–3 × d virtual devices (`Mesh { dp: d, zero, .. }`,
//! every figure from `Engine::step`'s `StepCosts` and the memory ledger). Model-state bytes per
//! device from the memory ledger next to the runtime's formula (`cost::zero::runtime_state_bytes`;
//! f32 Adam: P = 4, G = 4, K = 8 bytes per
//! parameter), activation and staging peaks beside them, bytes the busiest rank moves per step vs
//! predicted, bit identity with stage 0, and the N = 7e9, p = 8 mixed-precision reference table
//! from the same cost functions.
//!
//! `cargo run --release --example zero` — writes `runs/zero/zero.json`.
//!
//! Every flag is checked before any device work (see `validate`); the caps are generous:
//! degrees ≤ 1024, microbatch counts, micro batch, sequence and width ≤ 65536, layers ≤ 4096,
//! buckets ≤ 10⁶ MB, measured steps ≤ 10⁶.

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;
use triaxis::cost::activation;
use triaxis::cost::memory::{zero_state_bytes, ZeroStage};
use triaxis::cost::zero::{self, predicted_comm_bytes, runtime_state_bytes};
use triaxis::engine::RuntimeOptions;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::memory::Usage;
use triaxis::mesh::Mesh;
use triaxis::model::{Precision, Recompute};
use triaxis::pipeline::partition::Balance;
use triaxis::pipeline::Link;

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
    about = "Measure ZeRO stages 0-3: memory per device vs the formula, bytes moved per step",
    allow_negative_numbers = true
)]
struct Args {
    /// Data-parallel degrees (comma list, each 1 to 1024).
    #[arg(long, default_value = "1,2,4,8", allow_hyphen_values = true)]
    degrees: String,
    /// ZeRO stages (comma list of 0..3).
    #[arg(long, default_value = "0,1,2,3", allow_hyphen_values = true)]
    stages: String,
    /// Link preset for the device clock: nvlink, pcie or ethernet.
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// Sequences per microbatch (1 to 65536).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    micro_batch: usize,
    /// Microbatches per rank and step (stage 3 gathers twice per microbatch; 1 to 65536).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    accum: usize,
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
    /// Gradient bucket (= shard unit) size in MB (above 0, at most 10⁶).
    #[arg(long, default_value_t = 0.25)]
    bucket_mb: f64,
    /// Precision: f32, or bf16 mixed precision (P, G, K = 2, 2, 12 bytes).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// What each layer's backward recomputes: none, selective or full.
    #[arg(long, default_value = "none")]
    recompute: String,
    /// Measured steps per configuration (1 to 10⁶).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    steps: usize,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/zero")]
    out: PathBuf,
}

fn main() {
    let args = Args::parse();
    flags::exit_status(validate(&args), |checked| run(&args, checked));
}

/// The flags, checked and parsed.
struct Checked {
    degrees: Vec<usize>,
    stages: Vec<usize>,
    link: Link,
    choice: AdapterChoice,
    m: model_flags::Model,
    recompute: Recompute,
    precision: Precision,
}

/// Every flag, before any device work: the error names the flag and the constraint. The output
/// directory comes last (checking it creates it).
fn validate(a: &Args) -> anyhow::Result<Checked> {
    let degrees: Vec<usize> = flags::list("--degrees", &a.degrees)?;
    flags::list_in_range("--degrees", &degrees, 1, flags::MAX_DEGREE)?;
    let stages: Vec<usize> = flags::list("--stages", &a.stages)?;
    for &s in &stages {
        zero::stage(s).map_err(|e| anyhow::anyhow!("--stages {s}: {e}"))?;
    }
    flags::in_range("--accum", a.accum, 1, flags::MAX_MICROBATCHES)?;
    flags::positive("--bucket-mb", a.bucket_mb, flags::MAX_BUCKET_MB)?;
    flags::in_range("--steps", a.steps, 1, flags::MAX_STEPS)?;
    if let Some(i) = a.adapter {
        flags::in_range("--adapter", i, 0, flags::MAX_ADAPTER)?;
    }
    let link = Link::by_name(a.link.trim())?;
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    let m = model_flags::check(a.layers, a.channels, a.heads, a.seq, a.micro_batch)?;
    let recompute = a.recompute.parse()?;
    let precision = a.precision.parse()?;
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        degrees,
        stages,
        link,
        choice,
        m,
        recompute,
        precision,
    })
}

fn mb(b: f64) -> String {
    format!("{:.3}", b / 1e6)
}

fn max_of(mem: &[Usage], f: impl Fn(&Usage) -> u64) -> f64 {
    mem.iter().map(f).max().unwrap_or(0) as f64
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let Checked {
        degrees,
        stages,
        link,
        choice,
        m,
        recompute,
        precision,
    } = c;
    let model_flags::Model {
        corpus,
        model,
        micro,
    } = m;
    print_reference();
    let cfg = engine_steps::train_config(model, micro, a.accum, a.steps + 1, 0.1);
    let max_d = degrees.iter().copied().max().unwrap_or(1);
    let gpus = Gpu::open_virtual(&choice, max_d)?;
    // bf16 tensors lie on 128-element boundaries on the device
    let n_flat = match precision {
        Precision::F32 => model.layout(&model.blocks()).total,
        Precision::Bf16 => model.layout(&model.blocks()).packed().total,
    };
    let (pb, gb, kb) = precision.pgk();
    println!(
        "\nadapter  {} ({max_d} virtual devices)",
        gpus[0].adapter_name()
    );
    println!(
        "model    {model:?}: {} parameters, N = {n_flat} flat elements with tensor padding \
         ({:.2} %); {precision}: P = {pb}, G = {gb}, K = {kb} bytes per element",
        model.param_count(),
        100.0 * (n_flat - model.param_count()) as f64 / n_flat as f64
    );
    println!(
        "step     {} microbatch(es) of {}×{} tokens per rank; {} MB buckets = shard units; {} \
         link",
        a.accum, a.micro_batch, a.seq, a.bucket_mb, a.link
    );
    let bar = progress::bar((degrees.len() * stages.len()) as u64);
    say(
        &bar,
        format!(
            "\n{:>2} {:>5} | {:>10} {:>10} {:>7} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>6} {:>6} | {:>8} {:>8} {:>8} {:>5}",
            "d", "stage", "state MB", "formula", "Δ %", "peak P", "peak G", "act", "act pred", "staging",
            "MB/rank", "predict", "×st0", "link ms", "step s", "dev s", "bits=st0", "loss"
        ),
    );
    let opts = RuntimeOptions {
        link,
        bucket_bytes: (a.bucket_mb * 1e6) as usize,
        recompute,
        precision,
        ..RuntimeOptions::default()
    };
    let mut rows = Vec::new();
    for &d in &degrees {
        let (mut base_sum, mut base_comm) = (None, None);
        for &s in &stages {
            let st = zero::stage(s)?;
            let mesh = Mesh {
                dp: d,
                zero: s,
                microbatches: a.accum,
                ..Mesh::default()
            };
            // the engine's own verdict on the layout (ZeRO needs a data-parallel group)
            if let Err(e) = mesh.validate(&model, micro.b, micro.t, d) {
                say(&bar, format!("{d:>2} {s:>5} | not run: {e}"));
                bar.inc(1);
                continue;
            }
            let run = engine_steps::run(&gpus, cfg.clone(), mesh, opts.clone(), &corpus, 1)?;
            let last = run.last();
            let state = max_of(&run.built, |u| u.current.model_state());
            // stage 3's two gather slots hold the largest block
            let slot = run.engine.runtime().chunks(0)[0]
                .block_spans
                .iter()
                .map(|s| s.len())
                .max()
                .unwrap_or(0);
            let formula = runtime_state_bytes(st, n_flat, d, slot, precision.pgk());
            // the whole group's bytes over the ranks: every rank of a ring sends the same share
            // (the ring formula counts 4-byte elements; bf16 moves half)
            let per_elem = precision.element_bytes() as f64 / 4.0;
            let predicted =
                per_elem * predicted_comm_bytes(st, n_flat, d, a.accum) as f64 / d as f64;
            let sum = run.engine.checksum()?;
            if s == 0 {
                base_sum = Some(sum.clone());
                base_comm = Some(last.dp_bytes);
            }
            let same = base_sum.as_ref().map(|b| *b == sum);
            let ratio = base_comm
                .filter(|&c| c > 0)
                .map(|c| last.dp_bytes as f64 / c as f64);
            let mem = &last.memory;
            let act_pred =
                activation::predict(&model, micro, &mesh, &Balance::Params, recompute, precision)?
                    .iter()
                    .map(|p| p.total)
                    .max()
                    .unwrap_or(0);
            let row = json!({
                "d": d, "stage": s, "model_state_bytes": state, "formula_bytes": formula,
                "peak": mem.iter().map(|u| &u.peak).collect::<Vec<_>>(),
                "activation_bytes_predicted": act_pred, "recompute": recompute,
                "comm_bytes_busiest_rank": last.dp_bytes, "predicted_bytes_per_rank": predicted,
                "comm_link_s": last.dp_comm, "step_wall_s": last.wall,
                "step_device_s": last.device_step, "bits_equal_stage0": same,
                "loss": last.stats.loss, "checksum": sum, "costs": last,
            });
            say(
                &bar,
                format!(
                    "{:>2} {:>5} | {:>10} {:>10} {:>+7.3} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>6} {:>6.2} | {:>8.3} {:>8} {:>8} {:>5.3}",
                    d,
                    s,
                    mb(state),
                    mb(formula),
                    100.0 * (state - formula) / formula,
                    mb(max_of(mem, |u| u.peak.parameters)),
                    mb(max_of(mem, |u| u.peak.gradients)),
                    mb(max_of(mem, |u| u.peak.activations)),
                    mb(act_pred as f64),
                    mb(max_of(mem, |u| u.peak.staging)),
                    mb(last.dp_bytes as f64),
                    mb(predicted),
                    ratio.map_or("-".into(), |r| format!("{r:.2}")),
                    1e3 * last.dp_comm + 0.0, // an empty sum is -0.0
                    last.wall,
                    if last.device_step > 0.0 {
                        format!("{:.3}", last.device_step)
                    } else {
                        "-".into()
                    },
                    match same {
                        Some(true) => "yes",
                        Some(false) => "NO",
                        None => "-",
                    },
                    last.stats.loss
                ),
            );
            rows.push(row);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    println!(
        "\nstate = parameters + gradients + optimizer state held (ledger, busiest device); formula = the \
         runtime's: P+G+K, P+G+K/d (stages 1, 2), P/d+G+K/d + two slots of the largest block (stage 3);"
    );
    println!(
        "peak P / G = peaks during a step (every stage keeps one full gradient buffer for the run, \
         stage 3 a parameter shard and two block-sized slots);"
    );
    println!(
        "MB/rank = bytes the busiest rank sent per step; predicted: (d-1)/d·{}N per reduce-scatter \
         or all-gather: stage 0 = 2, stages 1-2 = 2, stage 3 = 1 + 2·accum;",
        precision.element_bytes()
    );
    println!(
        "link ms = the busiest device's data-parallel comm on the link model; dev s = the \
         device-clock step (- where the engine does not measure it)."
    );
    let path = a.out.join("zero.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({ "rows": rows }))?,
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

/// docs/design.md's reference: N = 7e9, p = 8, mixed-precision Adam (P, G, K = 2, 2, 12).
fn print_reference() {
    let (n, p) = (7e9, 8);
    println!(
        "reference: N = 7e9 parameters, p = 8, mixed-precision Adam (P = 2, G = 2, K = 12 bytes)"
    );
    println!(
        "{:>5}  {:<11} {:<12} {:>9}",
        "stage", "formula", "bytes", "per card"
    );
    for st in ZeroStage::ALL {
        let general = ["16N", "4N + 12N/p", "2N + 14N/p", "16N/p"][st.index()];
        let b = zero_state_bytes(n, p, st, (2.0, 2.0, 12.0));
        println!(
            "{:>5}  {:<11} {:<12} {:>6.2} GB",
            st.index(),
            st.formula(),
            general,
            b / 1e9
        );
    }
}
