//! Training throughput on one device, side by side with PyTorch on the CPU: the same GPT (the
//! parameter count printed by both), the same AdamW, uniform random tokens over a 16-token
//! vocabulary, so both sides do the same arithmetic per token.
//!
//! ```text
//! cargo run --release --example throughput                       # triaxis alone
//! cargo run --release --example throughput -- --torch            # + benches/peers/torch_gpt.py
//! cargo run --release --example throughput -- --channels 256 --precisions bf16
//! cargo run --release --example throughput -- --torch --torch-device cuda  # a CUDA GPU's PyTorch
//! ```
//!
//! Rounds interleave the two (triaxis f32, triaxis bf16, PyTorch, then again) so a noisy
//! machine slows both alike. Per precision it prints the median wall step and the spread of
//! the rounds' medians, tokens/s, model GFLOP/s (6·N per token for the parameters plus
//! 12·L·T·C for attention's two products, forward and backward), dispatches, queue submits and
//! host waits per step, the share of the step the linear layers' matmuls take (their products
//! timed alone at the step's shapes, in every round), and tokens/s against PyTorch. Without
//! PyTorch (or without `--torch`) it says so and prints triaxis alone. The steps run without
//! the device clock (no pass timed: one host wait per step, the gradient norm's) unless
//! `--device-clock` asks for it. Writes `runs/throughput/throughput.json`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use triaxis::data::Corpus;
use triaxis::engine::RuntimeOptions;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::kernels::matmul::{self, Linear};
use triaxis::kernels::Dispatch;
use triaxis::measure::median;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro, Precision};

#[path = "support/flags.rs"]
mod flags;
#[path = "support/progress.rs"]
mod progress;
use progress::say;

#[path = "support/engine_steps.rs"]
mod engine_steps;

/// The largest vocabulary `Corpus::uniform` writes.
const MAX_VOCAB: usize = 62;

#[derive(Parser, Debug)]
#[command(about = "Training tokens/s on one device, beside PyTorch on the same CPU cores")]
struct Args {
    /// Transformer layers (1 to 4096).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    layers: usize,
    /// Model width (1 to 65536).
    #[arg(long, default_value_t = 128, value_parser = flags::count)]
    channels: usize,
    /// Attention heads (they must divide --channels).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    heads: usize,
    /// Tokens per sequence (1 to 65536).
    #[arg(long, default_value_t = 64, value_parser = flags::count)]
    seq: usize,
    /// Sequences per step (1 to 65536).
    #[arg(long, default_value_t = 16, value_parser = flags::count)]
    batch: usize,
    /// Vocabulary of the uniform random tokens (2 to 62).
    #[arg(long, default_value_t = 16, value_parser = flags::count)]
    vocab: usize,
    /// Precisions to run (comma list of f32, bf16).
    #[arg(long, default_value = "f32,bf16")]
    precisions: String,
    /// Measured steps per round and side, after one warm-up step (1 to 10⁶).
    #[arg(long, default_value_t = 20, value_parser = flags::count)]
    steps: usize,
    /// Rounds (1 to 1000); each runs every precision, then PyTorch.
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    rounds: usize,
    /// Also run benches/peers/torch_gpt.py in every round and print the ratio.
    #[arg(long)]
    torch: bool,
    /// Time every pass for the device clock, as the training runs do (one more host wait per
    /// step: the pass times' read); off, the step runs as a run that needs no device clock.
    #[arg(long)]
    device_clock: bool,
    /// The Python that has PyTorch.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where PyTorch runs: cpu (the same cores), or cuda (a CUDA GPU, in true f32).
    #[arg(long, default_value = "cpu")]
    torch_device: String,
    /// PyTorch's threads (0: its default, one per core).
    #[arg(long, default_value_t = 0, value_parser = flags::count)]
    threads: usize,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/throughput")]
    out: PathBuf,
}

fn main() {
    let args = Args::parse();
    flags::exit_status(validate(&args), |checked| run(&args, checked));
}

struct Checked {
    model: GptConfig,
    micro: Micro,
    corpus: Corpus,
    precisions: Vec<Precision>,
    choice: AdapterChoice,
}

/// Every flag before any device work.
fn validate(a: &Args) -> anyhow::Result<Checked> {
    flags::in_range("--layers", a.layers, 1, flags::MAX_LAYERS)?;
    for (flag, v) in [
        ("--channels", a.channels),
        ("--heads", a.heads),
        ("--seq", a.seq),
        ("--batch", a.batch),
    ] {
        flags::in_range(flag, v, 1, flags::MAX_CHANNELS)?;
    }
    flags::in_range("--vocab", a.vocab, 2, MAX_VOCAB)?;
    flags::in_range("--steps", a.steps, 1, flags::MAX_STEPS)?;
    flags::in_range("--rounds", a.rounds, 1, 1000)?;
    flags::in_range("--threads", a.threads, 0, 4096)?;
    if !["cpu", "cuda"].contains(&a.torch_device.as_str()) {
        anyhow::bail!("--torch-device {:?}: cpu or cuda", a.torch_device);
    }
    if let Some(i) = a.adapter {
        flags::in_range("--adapter", i, 0, flags::MAX_ADAPTER)?;
    }
    let model = GptConfig {
        vocab: a.vocab,
        ctx: a.seq,
        channels: a.channels,
        heads: a.heads,
        layers: a.layers,
    };
    model.validate()?;
    let micro = Micro {
        b: a.batch,
        t: a.seq,
    };
    micro.validate(&model)?;
    let precisions = flags::list::<Precision>("--precisions", &a.precisions)?;
    // enough windows that no two steps of a run see the same batch often
    let tokens = (64 * a.batch * (a.seq + 1)).max(100_000);
    let corpus = Corpus::uniform(a.vocab, tokens, 7)?;
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        model,
        micro,
        corpus,
        precisions,
        choice,
    })
}

/// One side's measured steps over all rounds: step seconds, and each round's median.
#[derive(Default)]
struct Side {
    steps: Vec<f64>,
    round_medians: Vec<f64>,
}

impl Side {
    fn add_round(&mut self, steps: &[f64]) {
        self.round_medians.push(median(steps));
        self.steps.extend_from_slice(steps);
    }
    fn median(&self) -> f64 {
        median(&self.steps)
    }
    fn spread(&self) -> (f64, f64) {
        let lo = self.round_medians.iter().copied().fold(f64::MAX, f64::min);
        (lo, self.round_medians.iter().copied().fold(0.0, f64::max))
    }
}

/// Per precision: what one device counted in a step (medians over every measured step).
#[derive(Default)]
struct Counted {
    device_step: Vec<f64>,
    /// Wall seconds of the linear layers' products per step, one figure per round.
    matmul: Vec<f64>,
    dispatches: Vec<f64>,
    submits: Vec<f64>,
    waits: Vec<f64>,
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let gpu = Gpu::open(&c.choice)?;
    let gpus = [gpu];
    let g = &gpus[0];
    let (model, micro) = (c.model, c.micro);
    let params = model.param_count();
    let tokens = micro.tokens() as f64;
    let flops_per_token = (6 * params + 12 * model.layers * model.ctx * model.channels) as f64;
    println!(
        "adapter  {}\nmodel    L{} C{} H{} T{} V{}, {params} parameters; {} × {} tokens per step",
        g.adapter_name(),
        model.layers,
        model.channels,
        model.heads,
        model.ctx,
        model.vocab,
        micro.b,
        micro.t
    );
    let mut torch = a.torch.then(Side::default);
    let mut torch_info = None;
    if !a.torch {
        println!("PyTorch  not run (add --torch to run benches/peers/torch_gpt.py beside it)");
    }
    let mut sides: Vec<(Precision, Side, Counted)> = c
        .precisions
        .iter()
        .map(|&p| (p, Side::default(), Counted::default()))
        .collect();
    let linears = sides
        .iter()
        .map(|(p, _, _)| Linears::new(g, &model, micro, *p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cfg = engine_steps::train_config(model, micro, 1, a.steps + 1, 0.1);
    let bar = progress::bar((a.rounds * (sides.len() + usize::from(torch.is_some()))) as u64);
    for round in 0..a.rounds {
        for ((p, side, counted), linears) in sides.iter_mut().zip(&linears) {
            let opts = RuntimeOptions {
                precision: *p,
                device_clock: a.device_clock,
                ..RuntimeOptions::default()
            };
            let run = engine_steps::run(&gpus, cfg.clone(), Mesh::default(), opts, &c.corpus, 1)?;
            let walls: Vec<f64> = run.costs.iter().map(|s| s.wall).collect();
            side.add_round(&walls);
            for s in &run.costs {
                counted.device_step.push(s.device_step);
                counted.dispatches.push(s.dispatches as f64);
                counted.submits.push(s.submits as f64);
                counted.waits.push(s.waits as f64);
            }
            counted.matmul.push(linears.seconds(g)?);
            say(
                &bar,
                format!(
                    "round {round}: triaxis {} {:.1} ms per step",
                    p.name(),
                    1e3 * median(&walls)
                ),
            );
            bar.inc(1);
        }
        if let Some(t) = torch.as_mut() {
            match torch_round(a) {
                Ok((walls, info)) => {
                    say(
                        &bar,
                        format!(
                            "round {round}: PyTorch {:.1} ms per step",
                            1e3 * median(&walls)
                        ),
                    );
                    t.add_round(&walls);
                    torch_info = Some(info);
                }
                Err(e) => {
                    say(&bar, format!("PyTorch  not run: {e:#}"));
                    torch = None;
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if let Some(info) = &torch_info {
        let theirs = info["params"].as_u64().unwrap_or(0);
        let same = if theirs == params as u64 {
            "the same model"
        } else {
            "DIFFERENT MODELS: the ratio compares unlike work"
        };
        println!(
            "PyTorch  {} on {} ({} threads), {theirs} parameters ({same})",
            info["torch"].as_str().unwrap_or("?"),
            info["device"].as_str().unwrap_or("cpu"),
            info["threads"]
        );
    }
    let torch_tps = torch.as_ref().map(|t| tokens / t.median());
    println!(
        "\n{:<12} | {:>8} {:>15} | {:>9} {:>7} | {:>10} {:>7} {:>5} | {:>7} | {:>9}",
        "",
        "step ms",
        "rounds",
        "tok/s",
        "GFLOP/s",
        "dispatches",
        "submits",
        "waits",
        "matmul",
        "× PyTorch"
    );
    let mut rows = Vec::new();
    for (p, side, counted) in &sides {
        let step = side.median();
        let (lo, hi) = side.spread();
        let tps = tokens / step;
        let device_step = median(&counted.device_step);
        let mm = median(&counted.matmul);
        let share = mm / step;
        let ratio = torch_tps.map(|t| tps / t);
        println!(
            "{:<12} | {:>8.1} {:>15} | {:>9.0} {:>7.2} | {:>10.0} {:>7.0} {:>5.0} | {:>7} | {:>9}",
            format!("triaxis {}", p.name()),
            1e3 * step,
            format!("{:.1}–{:.1}", 1e3 * lo, 1e3 * hi),
            tps,
            tps * flops_per_token / 1e9,
            median(&counted.dispatches),
            median(&counted.submits),
            median(&counted.waits),
            format!("{:.0} %", 100.0 * share),
            ratio.map_or("n/a".into(), |r| format!("{r:.3}")),
        );
        rows.push(json!({
            "precision": p, "step_s": step, "round_medians_s": side.round_medians,
            "tokens_per_s": tps, "model_gflops": tps * flops_per_token / 1e9,
            "device_clock": a.device_clock,
            "device_step_s": a.device_clock.then_some(device_step), "dispatches_per_step": median(&counted.dispatches),
            "submits_per_step": median(&counted.submits), "host_waits_per_step": median(&counted.waits),
            "matmul_s": mm, "matmul_share": share, "vs_pytorch": ratio,
        }));
    }
    if let (Some(t), Some(tps)) = (&torch, torch_tps) {
        let (lo, hi) = t.spread();
        println!(
            "{:<12} | {:>8.1} {:>15} | {:>9.0} {:>7.2} |",
            "PyTorch",
            1e3 * t.median(),
            format!("{:.1}–{:.1}", 1e3 * lo, 1e3 * hi),
            tps,
            tps * flops_per_token / 1e9
        );
    }
    println!(
        "\nstep ms = median wall step over every round (rounds = the spread of the rounds' \
         medians); GFLOP/s = tok/s × (6·{params} + 12·L·T·C) flops per token; dispatches, \
         submits, waits = per step on the device (device clock {}); matmul = the linear layers' \
         products (timed alone at the step's shapes, median over the rounds) over the step",
        if a.device_clock {
            "on: the pass times' read is one wait"
        } else {
            "off"
        }
    );
    let path = a.out.join("throughput.json");
    let record = json!({
        "adapter": g.adapter_name(), "model": model, "micro": micro, "params": params,
        "flops_per_token": flops_per_token, "steps_per_round": a.steps, "rounds": a.rounds,
        "triaxis": rows,
        "pytorch": torch.as_ref().map(|t| json!({
            "step_s": t.median(), "round_medians_s": t.round_medians,
            "tokens_per_s": torch_tps, "info": torch_info,
        })),
    });
    std::fs::write(&path, serde_json::to_string_pretty(&record)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// One PyTorch round: the script's per-step seconds are not printed, so its median stands for
/// every step of the round (a round contributes `steps` copies of it).
fn torch_round(a: &Args) -> anyhow::Result<(Vec<f64>, serde_json::Value)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/torch_gpt.py");
    let mut args = vec![script.to_string()];
    for (flag, v) in [
        ("--layers", a.layers),
        ("--channels", a.channels),
        ("--heads", a.heads),
        ("--seq", a.seq),
        ("--batch", a.batch),
        ("--vocab", a.vocab),
        ("--steps", a.steps),
        ("--warmup", 3),
        ("--threads", a.threads),
    ] {
        args.extend([flag.to_string(), v.to_string()]);
    }
    args.extend(["--device".to_string(), a.torch_device.clone()]);
    let out = Command::new(&a.python)
        .args(&args)
        .output()
        .map_err(|e| anyhow::anyhow!("{} could not start: {e}", a.python))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let info: serde_json::Value = serde_json::from_str(line).map_err(|_| {
        anyhow::anyhow!(
            "{script} printed no result: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    if let Some(e) = info["error"].as_str() {
        anyhow::bail!("{e}");
    }
    let step = info["step_s"]
        .as_f64()
        .ok_or_else(|| anyhow::anyhow!("{script}: no step_s in {line}"))?;
    Ok((vec![step; a.steps], info))
}

/// The linear layers' products of one step (forward, input gradient and weight gradient of
/// qkv, attention output, MLP up and down, and the LM head) at the step's shapes and
/// precision, with the kernels the library picks: one pass for a layer's, one for the head's.
struct Linears {
    layer: Vec<Dispatch>,
    head: Vec<Dispatch>,
    layers: usize,
}

impl Linears {
    fn new(g: &Gpu, m: &GptConfig, micro: Micro, p: Precision) -> anyhow::Result<Linears> {
        let (n, c) = (micro.tokens(), m.channels);
        let block = Linear::new(p);
        // the ops keep their buffers alive
        let buffer = |len: usize, ty: Precision| g.buffer("matmul timing", ty.words(len).max(1));
        let products =
            |l: Linear, k: usize, oc: usize, bias: bool| -> anyhow::Result<Vec<Dispatch>> {
                let (x, w, out) = (buffer(n * k, p), buffer(oc * k, p), buffer(n * oc, l.io));
                let (dx, dw) = (buffer(n * k, p), buffer(oc * k, p));
                let (b, db) = (buffer(oc, p), buffer(oc, p));
                let (b, db) = (bias.then_some(&b), bias.then_some(&db));
                let mut ops = matmul::matmul_forward(g, l, &out, &x, &w, b, n, k, oc)?;
                ops.extend(matmul::matmul_backward(
                    g, l, &dx, &dw, db, &out, &x, &w, n, k, oc,
                )?);
                Ok(ops)
            };
        let mut layer = Vec::new();
        for (k, oc) in [(c, 3 * c), (c, c), (c, 4 * c), (4 * c, c)] {
            layer.extend(products(block, k, oc, true)?);
        }
        let head = products(block.head(), c, m.vocab, false)?;
        Ok(Linears {
            layer,
            head,
            layers: m.layers,
        })
    }

    /// Wall seconds of one step's products: each pass run alone and waited on, after a
    /// warm-up, the median of five runs (a pass this long hides the submit and the wait).
    fn seconds(&self, g: &Gpu) -> anyhow::Result<f64> {
        let time = |ops: &[Dispatch]| -> anyhow::Result<f64> {
            g.run(ops)?;
            g.sync()?;
            let mut runs = Vec::new();
            for _ in 0..5 {
                let t0 = Instant::now();
                g.run(ops)?;
                g.sync()?;
                runs.push(t0.elapsed().as_secs_f64());
            }
            Ok(median(&runs))
        };
        Ok(self.layers as f64 * time(&self.layer)? + time(&self.head)?)
    }
}
