//! Trains the default GPT on one device and writes a run record.
//!
//! `cargo run --release --example train` — built-in addition corpus, software or first adapter.
//! `cargo run --release --example train -- --data path/to/tinyshakespeare.txt` — byte-level text.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use indicatif::ProgressBar;
use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::model::{GptConfig, Micro};
use triaxis::progress::{self, say};
use triaxis::record::{self, AdapterRecord, DatasetRecord, EvalRecord, RunRecord, StepRecord};
use triaxis::train::{TrainConfig, Trainer};

#[derive(Parser, Debug)]
#[command(about = "Train a GPT on one wgpu device and write a run record")]
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
    /// Microbatches accumulated per step.
    #[arg(long, default_value_t = 1)]
    accum: usize,
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
        grad_accum: a.accum,
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
    let gpu = Gpu::open(&AdapterChoice::from_flags(
        a.backend.as_deref(),
        a.adapter,
        a.software,
    )?)?;
    let unigram = record::unigram_loss(&corpus.train, corpus.vocab.size());
    println!(
        "adapter   {} (driver {} {})",
        gpu.adapter_name(),
        gpu.info.driver,
        gpu.info.driver_info
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
    println!("batch     {} × {} tokens × {} accumulation = {} tokens/step; unigram baseline loss {unigram:.3}", a.batch, a.seq, a.accum, cfg.tokens_per_step());
    let mut trainer = Trainer::new(&gpu, cfg.clone()).context("building the model")?;
    let mut batcher = Batcher::new(a.seed);
    let is_addition = a.data.is_none();
    let bar = progress::bar(a.steps as u64);
    let (mut steps, mut evals) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    let eval =
        |trainer: &mut Trainer, step: usize, bar: &ProgressBar| -> anyhow::Result<EvalRecord> {
            let val_loss = trainer.eval(&corpus, a.eval_batches)?;
            let accuracy = if is_addition {
                Some(trainer.addition_accuracy(&corpus, 256)?)
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
    for s in 0..a.steps {
        let ts = Instant::now();
        let batches = (0..a.accum)
            .map(|_| corpus.train_batch(&mut batcher, cfg.micro))
            .collect::<triaxis::Result<Vec<_>>>()?;
        let st = trainer.step(&batches, s)?;
        let tps = cfg.tokens_per_step() as f64 / ts.elapsed().as_secs_f64();
        bar.set_message(format!("loss {:.4} | {:.0} tok/s", st.loss, tps));
        bar.inc(1);
        steps.push(StepRecord {
            step: s,
            loss: st.loss,
            grad_norm: st.grad_norm,
            lr: st.lr,
            tokens_per_s: tps,
        });
        if (s + 1) % a.eval_every == 0 && s + 1 < a.steps {
            evals.push(eval(&mut trainer, s + 1, &bar)?);
        }
    }
    let train_time = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let last = eval(&mut trainer, a.steps, &bar)?;
    evals.push(last.clone());
    let sample = sample(&mut trainer, &corpus)?;
    println!("sample:\n{sample}");
    let tokens_per_s = (a.steps * cfg.tokens_per_step()) as f64 / train_time;
    let rec = RunRecord {
        triaxis_version: env!("CARGO_PKG_VERSION"),
        config: serde_json::to_value(&cfg)?,
        adapter: AdapterRecord::of(&gpu),
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
        tokens_per_s,
        sample,
        model_checksum: trainer.checksum()?,
        memory: record::memory_of(std::slice::from_ref(&gpu)),
    };
    rec.write(&a.record)?;
    println!(
        "trained {} steps in {train_time:.1} s ({tokens_per_s:.0} tokens/s); val loss {:.4} vs unigram {unigram:.4}{}",
        a.steps,
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
