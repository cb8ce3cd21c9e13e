//! Precision and activation recomputation measured side by side: one layout trained in f32 and
//! bf16, each with `--recompute none`, `selective` and `full`, in one run — tokens per second
//! (wall and device clock), peak activation bytes per device from the memory ledger next to the
//! cost model's prediction (`cost::activation`), model-state bytes, and whether the parameters
//! after the steps are bit-identical to the same precision's `none`.
//!
//! `cargo run --release --example recompute` (pp 2, 1F1B, 4 microbatches) — or any layout:
//! `… -- --dp 2 --pp 2 --schedule zb-h1`, `… -- --tp 2`; writes `runs/recompute/recompute.json`.

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;
use triaxis::cost::activation;
use triaxis::engine::RuntimeOptions;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::measure::median;
use triaxis::mesh::Mesh;
use triaxis::model::{Precision, Recompute};
use triaxis::pipeline::partition::Balance;
use triaxis::pipeline::ScheduleKind;

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
    about = "Recompute none / selective / full: tokens/s and activation memory per device",
    allow_negative_numbers = true
)]
struct Args {
    /// Data-parallel replicas (1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    dp: usize,
    /// Tensor-parallel ranks (1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    tp: usize,
    /// Pipeline stages (1 to 1024).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    pp: usize,
    /// Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1.
    #[arg(long, default_value = "1f1b")]
    schedule: String,
    /// Model chunks per pipeline device (interleaved; 1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    chunks: usize,
    /// Microbatches per replica and step (1 to 65536).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    microbatches: usize,
    /// Sequences per microbatch (1 to 65536).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    micro_batch: usize,
    /// Tokens per sequence (1 to 65536; attention's probabilities grow with its square).
    #[arg(long, default_value_t = 64, value_parser = flags::count)]
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
    /// Precisions to run (comma list of f32, bf16).
    #[arg(long, default_value = "f32,bf16")]
    precisions: String,
    /// Measured steps per mode after one warm-up (1 to 10⁶).
    #[arg(long, default_value_t = 3, value_parser = flags::count)]
    steps: usize,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/recompute")]
    out: PathBuf,
}

fn main() {
    let args = Args::parse();
    flags::exit_status(validate(&args), |checked| run(&args, checked));
}

/// The flags, checked and parsed.
struct Checked {
    m: model_flags::Model,
    precisions: Vec<Precision>,
    mesh: Mesh,
    choice: AdapterChoice,
}

/// Every flag before any device work.
fn validate(a: &Args) -> anyhow::Result<Checked> {
    for (flag, v) in [
        ("--dp", a.dp),
        ("--tp", a.tp),
        ("--pp", a.pp),
        ("--chunks", a.chunks),
    ] {
        flags::in_range(flag, v, 1, flags::MAX_DEGREE)?;
    }
    flags::in_range("--microbatches", a.microbatches, 1, flags::MAX_MICROBATCHES)?;
    flags::in_range("--steps", a.steps, 1, flags::MAX_STEPS)?;
    if let Some(i) = a.adapter {
        flags::in_range("--adapter", i, 0, flags::MAX_ADAPTER)?;
    }
    let m = model_flags::check(a.layers, a.channels, a.heads, a.seq, a.micro_batch)?;
    let precisions = a
        .precisions
        .split(',')
        .map(|p| p.trim().parse::<Precision>())
        .collect::<triaxis::Result<Vec<_>>>()?;
    let mesh = Mesh {
        dp: a.dp,
        tp: a.tp,
        pp: a.pp,
        schedule: a.schedule.parse::<ScheduleKind>()?,
        microbatches: a.microbatches,
        chunks: a.chunks,
        ..Mesh::default()
    };
    mesh.validate(&m.model, m.micro.b, m.micro.t, mesh.devices())?;
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        m,
        precisions,
        mesh,
        choice,
    })
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let Checked {
        m,
        precisions,
        mesh,
        choice,
    } = c;
    let gpus = Gpu::open_virtual(&choice, mesh.devices())?;
    let cfg = engine_steps::train_config(m.model, m.micro, a.microbatches, a.steps + 1, 0.1);
    let tokens = (cfg.tokens_per_step() * mesh.dp) as f64;
    println!(
        "adapter  {} ({} virtual devices)\nmodel    {:?}, {} × {} tokens per microbatch\nlayout   {}",
        gpus[0].adapter_name(),
        mesh.devices(),
        m.model,
        m.micro.b,
        m.micro.t,
        mesh.describe()
    );
    let bar = progress::bar((precisions.len() * Recompute::ALL.len()) as u64);
    say(
        &bar,
        format!(
            "\n{:<4} {:<9} | {:>9} {:>7} | {:>9} {:>7} | {:>9} {:>9} {:>6} | {:>9} | {:>9}",
            "",
            "recompute",
            "tok/s",
            "× f32",
            "dev ms",
            "× f32",
            "act MB",
            "predicted",
            "× f32",
            "state MB",
            "bits"
        ),
    );
    let mut rows = Vec::new();
    let mut base = None;
    for prec in precisions {
        let mut base_sum = None;
        for mode in Recompute::ALL {
            let opts = RuntimeOptions {
                recompute: mode,
                precision: prec,
                serial: true,
                ..RuntimeOptions::default()
            };
            let run = engine_steps::run(&gpus, cfg.clone(), mesh, opts, &m.corpus, 1)?;
            let med = run.median();
            let wall = median(&run.costs.iter().map(|c| c.wall).collect::<Vec<_>>());
            let tps = tokens / wall;
            let measured: Vec<u64> = med.memory.iter().map(|u| u.peak.activations).collect();
            let predicted: Vec<u64> =
                activation::predict(&m.model, m.micro, &mesh, &Balance::Params, mode, prec)?
                    .iter()
                    .map(|p| p.total)
                    .collect();
            let peak = measured.iter().copied().max().unwrap_or(0);
            let state = run
                .built
                .iter()
                .map(|u| u.current.model_state())
                .max()
                .unwrap_or(0);
            let sum = run.engine.checksum()?;
            let (b_tps, b_dev, b_peak) = *base.get_or_insert((tps, med.device_step, peak));
            let same = base_sum.get_or_insert_with(|| sum.clone()) == &sum;
            say(
            &bar,
            format!(
                "{:<4} {:<9} | {:>9.0} {:>7.3} | {:>9.2} {:>7.3} | {:>9.3} {:>9.3} {:>6.3} | {:>9.3} | {:>9}",
                prec.name(),
                mode.name(),
                tps,
                tps / b_tps,
                1e3 * med.device_step,
                med.device_step / b_dev,
                peak as f64 / 1e6,
                predicted.iter().copied().max().unwrap_or(0) as f64 / 1e6,
                peak as f64 / b_peak as f64,
                state as f64 / 1e6,
                if same { "= none" } else { "DIFFER" }
            ),
        );
            rows.push(json!({
            "precision": prec, "recompute": mode, "model_state_bytes": state, "tokens_per_s": tps, "wall_s": wall,
            "device_step_s": med.device_step, "activation_bytes": measured,
            "activation_bytes_predicted": predicted, "checksum": sum, "bits_equal_none": same,
            "costs": med,
        }));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    println!(
        "\ntok/s = tokens per step / median wall step (devices one at a time); dev ms = median \
         device-clock step; act MB = the busiest device's activation peak (memory ledger), \
         predicted = cost::activation; state MB = parameters + gradients + optimizer state of the \
         busiest device; × f32 = against f32 without recomputation; bits = the same precision's \
         none (MB = 10⁶ B)"
    );
    let path = a.out.join("recompute.json");
    let record = json!({
        "adapter": gpus[0].adapter_name(), "model": m.model, "micro": m.micro,
        "layout": mesh, "rows": rows,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&record)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
