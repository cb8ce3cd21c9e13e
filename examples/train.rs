//! Trains a GPT under any parallel layout and writes a run record.
//!
//! `cargo run --release --example train` — one device, built-in addition corpus.
//! `cargo run --release --example train -- --data path/to/tinyshakespeare.txt` — byte-level text.
//! `cargo run --release --example train -- --dp 2 --pp 2 --microbatches 4` — 4 virtual devices.
//! `… --tp 2 --pp 2 --schedule zb-h1 --link pcie` — any valid dp × tp × pp layout.
//! `… --checkpoint-every 100` then `… --resume runs/train.safetensors` (under any layout).
//!
//! Every impossible layout is refused before any device work, naming the violated constraint
//! and a valid alternative. A failing step (or `--fault kind:device:action:step`) stops the run
//! with the device, stage, action and step named; the last checkpoint stays intact and the run
//! record says where the run stopped.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use indicatif::ProgressBar;
use serde_json::json;
use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Corpus};
use triaxis::engine::{Engine, EngineOptions, StepCosts};
use triaxis::gpu::{self, AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::executor::{Fault, FaultKind};
use triaxis::pipeline::{Link, ScheduleKind};
use triaxis::progress::{self, say};
use triaxis::record::{
    self, AdapterRecord, DatasetRecord, EvalRecord, RunRecord, StepRecord, StopRecord,
};
use triaxis::session::{CheckpointPolicy, Session};
use triaxis::train::{TrainConfig, Trainer};

#[derive(Parser, Debug)]
#[command(about = "Train a GPT under any dp × tp × pp layout and write a run record")]
struct Args {
    /// Byte-level text file to train on (default: the built-in addition corpus).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Operand digits of the addition corpus.
    #[arg(long, default_value_t = 2)]
    digits: u32,
    /// Write sums in plain order instead of least-significant digit first.
    #[arg(long)]
    plain_sums: bool,
    #[arg(long, default_value_t = 1500)]
    steps: usize,
    /// Sequences per microbatch.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Tokens per sequence (also the model context).
    #[arg(long, default_value_t = 32)]
    seq: usize,
    /// Microbatches per data-parallel replica per step (gradient accumulation; the pipeline
    /// schedule's m).
    #[arg(long, visible_alias = "accum", default_value_t = 1)]
    microbatches: usize,
    /// Data-parallel replicas.
    #[arg(long, default_value_t = 1)]
    dp: usize,
    /// Tensor-parallel ranks per stage (must divide the heads).
    #[arg(long, default_value_t = 1)]
    tp: usize,
    /// Pipeline stages (devices per replica).
    #[arg(long, default_value_t = 1)]
    pp: usize,
    /// ZeRO stage over the data-parallel group (0–3).
    #[arg(long, default_value_t = 0)]
    zero: usize,
    /// Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1.
    #[arg(long, default_value = "1f1b")]
    schedule: String,
    /// Model chunks per pipeline device (interleaved schedule).
    #[arg(long, default_value_t = 1)]
    chunks: usize,
    /// Devices: "virtual" (dp·tp·pp virtual devices on one adapter), a number N (N virtual
    /// devices, which must equal dp·tp·pp), or "all" (one device per adapter wgpu finds).
    #[arg(long, default_value = "virtual")]
    devices: String,
    /// Link model of pipeline sends and data-parallel all-reduces (nvlink, pcie, ethernet).
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// Link model of the tensor-parallel all-reduces.
    #[arg(long, default_value = "nvlink")]
    tp_link: String,
    /// Run one device at a time (clean device-clock times on virtual devices).
    #[arg(long)]
    serial: bool,
    /// Write a checkpoint every N steps (0: only at the end).
    #[arg(long, default_value_t = 0)]
    checkpoint_every: usize,
    /// Checkpoint file (safetensors).
    #[arg(long, default_value = "runs/train.safetensors")]
    checkpoint: PathBuf,
    /// Continue from a checkpoint (written under any layout).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Test hook: inject a fault, `kind:device:action:step` with kind error, panic, lost or
    /// nan (device: the pipeline device of each replica; action: its index in the schedule).
    #[arg(long)]
    fault: Option<String>,
    #[arg(long, default_value_t = 5e-3)]
    lr: f32,
    #[arg(long, default_value_t = 64)]
    channels: usize,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    #[arg(long, default_value_t = 4)]
    layers: usize,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Backend: vulkan, gl, metal, dx12 (default: WGPU_BACKEND, else any).
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index as listed by `cargo run --example devices`.
    #[arg(long)]
    adapter: Option<usize>,
    /// Use the CPU (software) adapter.
    #[arg(long)]
    software: bool,
    /// Evaluate every N steps.
    #[arg(long, default_value_t = 250)]
    eval_every: usize,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 8)]
    eval_batches: usize,
    /// Where to write the run record.
    #[arg(long, default_value = "runs/train.json")]
    record: PathBuf,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> anyhow::Result<()> {
    let corpus = match &a.data {
        Some(p) => Corpus::text_file(p, 0.1)?,
        None => Corpus::addition(AdditionSpec {
            digits: a.digits,
            reverse: !a.plain_sums,
            ..Default::default()
        })?,
    };
    corpus.check_context(a.seq)?;
    let cfg = TrainConfig {
        model: GptConfig {
            vocab: corpus.vocab.size(),
            ctx: a.seq,
            channels: a.channels,
            heads: a.heads,
            layers: a.layers,
        },
        micro: Micro {
            b: a.batch,
            t: a.seq,
        },
        grad_accum: a.microbatches,
        steps: a.steps,
        adam: AdamW {
            lr: a.lr,
            ..Default::default()
        },
        warmup: (a.steps / 20).max(1),
        min_lr_frac: 0.1,
        seed: a.seed,
    };
    cfg.validate()?;
    let mesh = Mesh {
        dp: a.dp,
        tp: a.tp,
        pp: a.pp,
        zero: a.zero,
        schedule: a.schedule.parse::<ScheduleKind>()?,
        microbatches: a.microbatches,
        chunks: a.chunks,
    };
    let opts = EngineOptions {
        link: Link::by_name(&a.link)?,
        tp_link: Link::by_name(&a.tp_link)?,
        serial: a.serial,
        fault: a.fault.as_deref().map(parse_fault).transpose()?,
        ..EngineOptions::default()
    };
    // every constraint before any device work
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, a.software)?;
    let available = match a.devices.as_str() {
        "virtual" => mesh.devices(),
        "all" => gpu::list_adapters(choice.backends).len(),
        n => n.parse::<usize>().map_err(|_| {
            anyhow::anyhow!("--devices must be virtual, all or a number, not {n:?}")
        })?,
    };
    mesh.validate(&cfg.model, cfg.micro.b, cfg.micro.t, available)?;
    let (gpus, eval_gpu) = open_devices(&a.devices, &choice, mesh.devices())?;
    let unigram = record::unigram_loss(&corpus.train, corpus.vocab.size());
    println!(
        "adapter   {} (driver {} {})",
        gpus[0].adapter_name(),
        gpus[0].info.driver,
        gpus[0].info.driver_info
    );
    println!(
        "data      {} — {} train / {} val tokens, version {}",
        corpus.name,
        corpus.train.len(),
        corpus.val.len(),
        &corpus.version[..19]
    );
    println!(
        "model     {:?}, {} parameters",
        cfg.model,
        cfg.model.param_count()
    );
    println!(
        "layout    {} on {} device(s); {} × {} tokens × {} microbatches × {} replicas = {} tokens/step; unigram baseline loss {unigram:.3}",
        mesh.describe(),
        mesh.devices(),
        a.batch,
        a.seq,
        a.microbatches,
        a.dp,
        cfg.tokens_per_step() * a.dp
    );
    let engine = Engine::new(&gpus, cfg.clone(), mesh, opts).context("placing the model")?;
    if mesh.devices() > 1 {
        for p in engine.placement() {
            println!(
                "  device {:>2}: replica {} stage {} tp rank {} — {} on {}",
                p.device, p.coords.replica, p.coords.stage, p.coords.tp_rank, p.blocks, p.adapter
            );
        }
    }
    let placement = serde_json::to_value(engine.placement())?;
    let mut session = match &a.resume {
        Some(path) => {
            let s = Session::resume(engine, &corpus, path)
                .with_context(|| format!("resuming from {}", path.display()))?;
            println!("resumed   {} at step {}", path.display(), s.step);
            if let Some((layout, diffs)) = &s.resumed_from {
                println!("          written under {layout}");
                for d in diffs {
                    println!("          note: {d}");
                }
            }
            s
        }
        None => Session::new(engine, &corpus, a.seed),
    };
    let resumed_from = a.resume.as_ref().map(|_| session.step);
    if a.checkpoint_every > 0 {
        session = session.with_checkpoints(CheckpointPolicy {
            path: a.checkpoint.clone(),
            every: a.checkpoint_every,
        });
    }
    // evaluation runs on its own device with the gathered parameters, whatever the layout
    let mut evaluator = Trainer::new(&eval_gpu, cfg.clone()).context("building the evaluator")?;
    let is_addition = a.data.is_none();
    let start = session.step;
    let bar = progress::bar(a.steps.saturating_sub(start) as u64);
    let (mut steps, mut evals, mut costs) = (Vec::new(), Vec::new(), Vec::<StepCosts>::new());
    let t0 = Instant::now();
    let eval = |evaluator: &mut Trainer,
                session: &Session,
                step: usize,
                bar: &ProgressBar|
     -> anyhow::Result<EvalRecord> {
        evaluator.set_state(&session.engine.state()?)?;
        let val_loss = evaluator.eval(&corpus, a.eval_batches)?;
        let accuracy = if is_addition {
            Some(evaluator.addition_accuracy(&corpus, 256)?)
        } else {
            None
        };
        let acc = accuracy.map_or(String::new(), |x| {
            format!(", exact match {:.1} %", 100.0 * x)
        });
        say(bar, format!("step {step:>5}: val loss {val_loss:.4}{acc}"));
        Ok(EvalRecord {
            step,
            val_loss,
            accuracy,
        })
    };
    let tokens = (cfg.tokens_per_step() * a.dp) as f64;
    let mut stopped = None;
    while session.step < a.steps {
        let s = session.step;
        let ts = Instant::now();
        let c = match session.step_once() {
            Ok(c) => c,
            Err(e) => {
                stopped = Some(StopRecord {
                    step: s,
                    error: e.to_string(),
                    last_checkpoint: session.last_checkpoint,
                });
                break;
            }
        };
        let tps = tokens / ts.elapsed().as_secs_f64();
        bar.set_message(format!("loss {:.4} | {:.0} tok/s", c.stats.loss, tps));
        bar.inc(1);
        steps.push(StepRecord {
            step: s,
            loss: c.stats.loss,
            grad_norm: c.stats.grad_norm,
            lr: c.stats.lr,
            tokens_per_s: tps,
        });
        costs.push(c);
        if (s + 1) % a.eval_every == 0 && s + 1 < a.steps {
            evals.push(eval(&mut evaluator, &session, s + 1, &bar)?);
        }
    }
    let train_time = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let parallel = json!({
        "layout": mesh,
        "placement": placement,
        "resumed_from_step": resumed_from,
        "checkpoint": a.checkpoint,
        "link": a.link,
        "tp_link": a.tp_link,
        "costs": summarize_costs(&costs),
    });
    let mut rec = RunRecord {
        triaxis_version: env!("CARGO_PKG_VERSION"),
        config: serde_json::to_value(&cfg)?,
        adapter: AdapterRecord::of(&gpus[0]),
        shaders: record::shader_hashes(),
        dataset: DatasetRecord {
            name: corpus.name.clone(),
            version: corpus.version.clone(),
            train_tokens: corpus.train.len(),
            val_tokens: corpus.val.len(),
            unigram_loss: unigram,
        },
        parameters: cfg.model.param_count(),
        steps,
        evals,
        wall_time_s: train_time,
        tokens_per_s: (costs.len() as f64 * tokens) / train_time,
        sample: String::new(),
        model_checksum: String::new(),
        memory: record::memory_of(&gpus),
        parallel: Some(parallel),
        stopped: None,
    };
    if let Some(stop) = stopped {
        eprintln!("stopped at step {}: {}", stop.step, stop.error);
        match stop.last_checkpoint {
            Some(k) => eprintln!(
                "the last good checkpoint ({}, step {k}) is intact",
                a.checkpoint.display()
            ),
            None => eprintln!("no checkpoint had been written"),
        }
        rec.stopped = Some(stop);
        rec.write(&a.record)?;
        eprintln!("run record written to {}", a.record.display());
        anyhow::bail!("training stopped early");
    }
    if a.checkpoint_every > 0 || a.resume.is_some() {
        session.save(&a.checkpoint)?;
        println!(
            "checkpoint {} (step {})",
            a.checkpoint.display(),
            session.step
        );
    }
    let last = eval(&mut evaluator, &session, a.steps, &bar)?;
    rec.evals.push(last.clone());
    rec.sample = sample(&mut evaluator, &corpus)?;
    println!("sample:\n{}", rec.sample);
    rec.model_checksum = session.engine.checksum()?;
    rec.write(&a.record)?;
    println!(
        "trained {} steps in {train_time:.1} s ({:.0} tokens/s); val loss {:.4} vs unigram {unigram:.4}{}",
        costs.len(),
        rec.tokens_per_s,
        last.val_loss,
        last.accuracy.map_or(String::new(), |x| format!("; exact match {:.1} %", 100.0 * x))
    );
    println!(
        "model checksum {}\nrun record written to {}",
        rec.model_checksum,
        a.record.display()
    );
    Ok(())
}

/// `kind:device:action:step`, e.g. `panic:1:3:10`.
fn parse_fault(s: &str) -> anyhow::Result<Fault> {
    let parts: Vec<&str> = s.split(':').collect();
    let [kind, device, action, step] = parts[..] else {
        anyhow::bail!("--fault wants kind:device:action:step (e.g. panic:1:3:10), got {s:?}");
    };
    let num = |x: &str, what: &str| {
        x.parse::<usize>()
            .map_err(|_| anyhow::anyhow!("--fault: {what} must be a number, got {x:?}"))
    };
    Ok(Fault {
        kind: FaultKind::by_name(kind)?,
        device: num(device, "device")?,
        action: num(action, "action")?,
        step: num(step, "step")?,
    })
}

/// Devices for the layout, and one more device for evaluation.
fn open_devices(
    devices: &str,
    choice: &AdapterChoice,
    n: usize,
) -> anyhow::Result<(Vec<Gpu>, Gpu)> {
    if devices == "all" {
        let gpus = (0..n)
            .map(|i| {
                Gpu::open(&AdapterChoice {
                    backends: choice.backends,
                    software: false,
                    index: Some(i),
                })
            })
            .collect::<triaxis::Result<Vec<_>>>()?;
        let eval = Gpu::open(&AdapterChoice {
            index: Some(0),
            ..choice.clone()
        })?;
        return Ok((gpus, eval));
    }
    let mut all = Gpu::open_virtual(choice, n + 1)?;
    let eval = all.pop().expect("n + 1 ≥ 1 devices");
    Ok((all, eval))
}

/// Medians of the per-axis costs over the run's steps.
fn summarize_costs(costs: &[StepCosts]) -> serde_json::Value {
    let med = |f: &dyn Fn(&StepCosts) -> Option<f64>| {
        let mut v: Vec<f64> = costs.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    json!({
        "steps": costs.len(),
        "bubble_device_clock": med(&|c| c.bubble),
        "bubble_theory": med(&|c| c.bubble_theory),
        "device_step_s": med(&|c| Some(c.device_step)),
        "dp_bytes_per_rank": med(&|c| Some(c.dp_bytes as f64)),
        "dp_comm_s": med(&|c| Some(c.dp_comm)),
        "tp_bytes_per_rank": med(&|c| Some(c.tp_bytes as f64)),
        "tp_comm_s": med(&|c| Some(c.tp_comm)),
        "wall_step_s": med(&|c| Some(c.wall)),
    })
}

/// A greedy sample: addition completions of a few held-out problems, or text continued from the
/// start of the validation split.
fn sample(trainer: &mut Trainer, corpus: &Corpus) -> anyhow::Result<String> {
    if !corpus.val_problems.is_empty() {
        let newline = corpus.vocab.encode("\n")?[0];
        let shown = &corpus.val_problems[..8.min(corpus.val_problems.len())];
        let prompts = shown
            .iter()
            .map(|(p, _)| corpus.vocab.encode(p))
            .collect::<triaxis::Result<Vec<_>>>()?;
        let outs = trainer.generate(&prompts, 12, Some(newline))?;
        let lines: Vec<String> = shown
            .iter()
            .zip(outs)
            .map(|((p, ans), o)| {
                let got = corpus.vocab.decode(&o).trim_end().to_string();
                format!("  {p}{got:<6} {}", if got == *ans { "✓" } else { "✗" })
            })
            .collect();
        return Ok(lines.join("\n"));
    }
    let t = trainer.cfg.micro.t;
    let prompt = corpus.val[..t.min(corpus.val.len()) / 2].to_vec();
    let out = trainer.generate(std::slice::from_ref(&prompt), 200, None)?;
    Ok(format!(
        "{}{}",
        corpus.vocab.decode(&prompt),
        corpus.vocab.decode(&out[0])
    ))
}
