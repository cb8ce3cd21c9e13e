//! The train example's flags, and the checks every value passes before any work starts: each
//! refusal names the flag and its constraint (see `flags`, examples/support/flags.rs).

use std::path::PathBuf;

use crate::flags;
use clap::Parser;

/// Largest step count, sequence count or size a flag accepts: far beyond any run this program
/// can make, small enough to catch a typo (and arithmetic overflow) before work starts.
pub const MAX_STEPS: usize = 1_000_000_000;
pub const MAX_SIZE: usize = 65_536;
pub const MAX_DEGREE: usize = 1024;

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Train a GPT under any dp × tp × pp layout and write a run record",
    allow_negative_numbers = true
)]
pub struct Args {
    /// Byte-level text file to train on (default: the built-in addition corpus).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Operand digits of the addition corpus (1–9).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    pub digits: usize,
    /// Write sums in plain order instead of least-significant digit first.
    #[arg(long)]
    pub plain_sums: bool,
    /// Write operands and sums without leading zeros (problems of varying width, where the
    /// default pads them to a fixed width; a small model learns them far less reliably).
    #[arg(long)]
    pub unpadded: bool,
    /// Optimizer steps (1 to 1e9; `1e6` style accepted).
    #[arg(long, default_value_t = 1500, value_parser = flags::count)]
    pub steps: usize,
    /// Sequences per microbatch.
    #[arg(long, default_value_t = 16, value_parser = flags::count)]
    pub batch: usize,
    /// Tokens per sequence (also the model context).
    #[arg(long, default_value_t = 32, value_parser = flags::count)]
    pub seq: usize,
    /// Microbatches per data-parallel replica per step (gradient accumulation; the pipeline
    /// schedule's m).
    #[arg(long, visible_alias = "accum", default_value_t = 1, value_parser = flags::count)]
    pub microbatches: usize,
    /// Data-parallel replicas.
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    pub dp: usize,
    /// Tensor-parallel ranks per stage (must divide the heads).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    pub tp: usize,
    /// Pipeline stages (devices per replica).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    pub pp: usize,
    /// ZeRO stage over the data-parallel group (0–3).
    #[arg(long, default_value_t = 0, value_parser = flags::count)]
    pub zero: usize,
    /// Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev.
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// Precision: f32, or bf16 mixed precision (bf16 parameters, gradients and activations,
    /// f32 master weights and moments; every layout but the pairwise tree).
    #[arg(long, default_value = "f32")]
    pub precision: String,
    /// What each layer's backward recomputes: none, selective (attention's probabilities) or
    /// full (the layer from its input); the parameters stay bit-identical to none.
    #[arg(long, default_value = "none")]
    pub recompute: String,
    /// Model chunks per pipeline device: any count for the interleaved schedule; zb-v and
    /// dualpipev place 2 (their default); the others 1 (the default).
    #[arg(long, value_parser = flags::count)]
    pub chunks: Option<usize>,
    /// Devices: "virtual" (dp·tp·pp virtual devices on one adapter), a number N (N virtual
    /// devices, which must equal dp·tp·pp), or "all" (one device per adapter wgpu finds).
    #[arg(long, default_value = "virtual")]
    pub devices: String,
    /// Link model of pipeline sends and data-parallel all-reduces (nvlink, pcie, ethernet).
    #[arg(long, default_value = "nvlink")]
    pub link: String,
    /// Link model of the tensor-parallel all-reduces.
    #[arg(long, default_value = "nvlink")]
    pub tp_link: String,
    /// Run one device at a time (clean device-clock times on virtual devices).
    #[arg(long)]
    pub serial: bool,
    /// Also write a checkpoint every N steps (0: only at the end, or when interrupted).
    #[arg(long, default_value_t = 0, value_parser = flags::count)]
    pub checkpoint_every: usize,
    /// Checkpoint file (safetensors), written at the end of every run unless --no-checkpoint.
    #[arg(long, default_value = "runs/train.safetensors")]
    pub checkpoint: PathBuf,
    /// Write no checkpoint at all (not at the end, not when interrupted).
    #[arg(long)]
    pub no_checkpoint: bool,
    /// Continue from a checkpoint (written under any layout).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Test hook: inject a fault, `kind:device:action:step` with kind error, panic, lost, nan
    /// or stall (device: the global device, below dp·tp·pp; action: the index of the pass in
    /// that device's schedule of one step; step: below --steps).
    #[arg(long)]
    pub fault: Option<String>,
    /// Peak learning rate, in (0, 1].
    #[arg(long, default_value_t = 5e-3)]
    pub lr: f32,
    /// Steps of linear learning-rate warm-up (0 to --steps; default: a twentieth of the steps,
    /// at least one); cosine decay to --min-lr-frac of the peak follows.
    #[arg(long, value_parser = flags::count)]
    pub warmup: Option<usize>,
    /// Where the cosine decay ends, as a fraction of --lr, in [0, 1].
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_frac: f32,
    /// AdamW's decoupled weight decay on matrices and embeddings, in [0, 1].
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f32,
    #[arg(long, default_value_t = 64, value_parser = flags::count)]
    pub channels: usize,
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    pub heads: usize,
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    pub layers: usize,
    #[arg(long, default_value_t = 1337, value_parser = flags::whole_number)]
    pub seed: u64,
    /// Backend: vulkan, gl, metal, dx12 (default: WGPU_BACKEND, else any).
    #[arg(long)]
    pub backend: Option<String>,
    /// Adapter index as listed by `cargo run --example devices`.
    #[arg(long, value_parser = flags::count)]
    pub adapter: Option<usize>,
    /// Use the CPU (software) adapter.
    #[arg(long)]
    pub software: bool,
    /// Evaluate every N steps (0: only at the end).
    #[arg(long, default_value_t = 250, value_parser = flags::count)]
    pub eval_every: usize,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 8, value_parser = flags::count)]
    pub eval_batches: usize,
    /// Print a progress line every N steps (0: never; the bar shows progress on a terminal).
    #[arg(long, default_value_t = 100, value_parser = flags::count)]
    pub log_every: usize,
    /// After SIGINT / SIGTERM, seconds the current step may take to finish before it is
    /// abandoned (the record is written, the last checkpoint kept).
    #[arg(long, default_value_t = 5.0)]
    pub stop_grace: f64,
    /// Memory budget in GB for everything the run's devices hold (default: the host's available
    /// memory when the adapter is a CPU one; no budget on other adapters).
    #[arg(long)]
    pub max_memory: Option<f64>,
    /// Where to write the run record (its loss curve goes beside it: `<stem>.svg`).
    #[arg(long, default_value = "runs/train.json")]
    pub record: PathBuf,
    /// Under mpirun: how collectives reduce — ordered (the project's ring and trees on MPI
    /// messages: the in-process bits) or native (MPI's own collectives, its summation order).
    #[arg(long, default_value = "ordered")]
    pub reduction: String,
}

impl Args {
    /// Warm-up steps: --warmup, or a twentieth of the steps (at least one).
    pub fn warmup_steps(&self) -> usize {
        self.warmup.unwrap_or((self.steps / 20).max(1))
    }

    /// Whether this run writes checkpoints.
    pub fn checkpoints(&self) -> bool {
        !self.no_checkpoint
    }

    /// Every value on its own, before any data is read or device opened.
    pub fn validate(&self) -> triaxis::Result<()> {
        if !["ordered", "native"].contains(&self.reduction.trim()) {
            return Err(triaxis::Error::Config(format!(
                "--reduction must be ordered or native, not {:?}",
                self.reduction
            )));
        }
        if self.data.is_none() {
            flags::in_range("--digits", self.digits, 1, 9)?;
        }
        flags::in_range("--steps", self.steps, 1, MAX_STEPS)?;
        flags::in_range("--batch", self.batch, 1, MAX_SIZE)?;
        flags::in_range("--seq", self.seq, 1, MAX_SIZE)?;
        flags::in_range("--microbatches", self.microbatches, 1, MAX_SIZE)?;
        flags::in_range("--dp", self.dp, 1, MAX_DEGREE)?;
        flags::in_range("--tp", self.tp, 1, MAX_DEGREE)?;
        flags::in_range("--pp", self.pp, 1, MAX_DEGREE)?;
        flags::in_range("--zero", self.zero, 0, 3)?;
        if let Some(c) = self.chunks {
            flags::in_range("--chunks", c, 1, MAX_DEGREE)?;
        }
        flags::in_range("--checkpoint-every", self.checkpoint_every, 0, MAX_STEPS)?;
        flags::positive("--lr", self.lr as f64, 1.0)?;
        if let Some(w) = self.warmup {
            flags::in_range("--warmup", w, 0, self.steps)?;
        }
        flags::non_negative("--min-lr-frac", self.min_lr_frac as f64, 1.0)?;
        flags::non_negative("--weight-decay", self.weight_decay as f64, 1.0)?;
        flags::in_range("--channels", self.channels, 1, MAX_SIZE)?;
        flags::in_range("--heads", self.heads, 1, MAX_SIZE)?;
        flags::in_range("--layers", self.layers, 1, 4096)?;
        flags::in_range("--eval-every", self.eval_every, 0, MAX_STEPS)?;
        flags::in_range("--eval-batches", self.eval_batches, 1, MAX_SIZE)?;
        flags::in_range("--log-every", self.log_every, 0, MAX_STEPS)?;
        flags::positive("--stop-grace", self.stop_grace, 3600.0)?;
        if let Some(gb) = self.max_memory {
            flags::positive("--max-memory", gb, 1e6)?;
        }
        if let Ok(n) = self.devices.parse::<usize>() {
            flags::in_range("--devices", n, 1, MAX_DEGREE * MAX_DEGREE)?;
        } else if self.devices != "virtual" && self.devices != "all" {
            return Err(triaxis::Error::Config(format!(
                "--devices must be virtual, all or a number, not {:?}",
                self.devices
            )));
        }
        if self.no_checkpoint && self.checkpoint_every > 0 {
            return Err(triaxis::Error::Config(
                "--no-checkpoint contradicts --checkpoint-every: pass one of them".into(),
            ));
        }
        if let Some(p) = &self.data {
            flags::input_file("--data", p)?;
        }
        if let Some(p) = &self.resume {
            flags::input_file("--resume", p)?;
        }
        Ok(())
    }

    /// The outputs: their directories are created and must accept files (the last check
    /// before the run starts, so a refused run leaves no directory behind).
    pub fn check_outputs(&self) -> triaxis::Result<()> {
        // an output never names an input: writing it would destroy what the run reads
        if let Some(data) = &self.data {
            if self.checkpoints() {
                flags::not_an_input("--checkpoint", &self.checkpoint, "--data", data)?;
            }
            flags::not_an_input("--record", &self.record, "--data", data)?;
        }
        if let Some(resume) = &self.resume {
            flags::not_an_input("--record", &self.record, "--resume", resume)?;
        }
        self.check_curve()?;
        if self.checkpoints() {
            flags::output_file("--checkpoint", &self.checkpoint)?;
        }
        flags::output_file("--record", &self.record)?;
        if self.checkpoints() && flags::same_file(&self.checkpoint, &self.record) {
            return Err(triaxis::Error::Config(format!(
                "--checkpoint and --record name the same file {}: give them different paths",
                self.record.display()
            )));
        }
        Ok(())
    }

    /// The loss curve beside the record (`<record stem>.svg`).
    pub fn curve(&self) -> PathBuf {
        crate::curve::path_beside(&self.record)
    }

    /// The curve beside the record names no input and not the checkpoint: the refusal names
    /// the flag that decides its path (--record) and the file it would overwrite.
    fn check_curve(&self) -> triaxis::Result<()> {
        let curve = self.curve();
        let mut others = Vec::new();
        if let Some(data) = &self.data {
            others.push(("--data", data.as_path(), "overwrite the input"));
        }
        if let Some(resume) = &self.resume {
            others.push(("--resume", resume.as_path(), "overwrite the input"));
        }
        if self.checkpoints() {
            others.push((
                "--checkpoint",
                self.checkpoint.as_path(),
                "replace the checkpoint",
            ));
        }
        for (flag, other, harm) in others {
            if flags::same_file(&curve, other) {
                return Err(triaxis::Error::Config(format!(
                    "the loss curve {} beside --record {} names the same file as {flag} {}: \
                     writing it would {harm}; give --record another path",
                    curve.display(),
                    self.record.display(),
                    other.display()
                )));
            }
        }
        Ok(())
    }

    /// This run's command line with `--resume <checkpoint>` (replacing any earlier --resume):
    /// what continues an interrupted run.
    pub fn resume_command(&self) -> String {
        let mut out = Vec::new();
        let mut args = std::env::args();
        out.push(args.next().unwrap_or_else(|| "train".into()));
        let mut skip = false;
        for a in args {
            if std::mem::take(&mut skip) {
                continue;
            }
            if a == "--resume" {
                skip = true;
                continue;
            }
            if a.starts_with("--resume=") {
                continue;
            }
            out.push(a);
        }
        out.push("--resume".into());
        out.push(self.checkpoint.display().to_string());
        out.join(" ")
    }
}
