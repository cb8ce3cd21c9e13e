//! The measured steps of one layout through the engine, shared by the measuring examples:
//! one warm-up step, then `steps` measured ones, each step's memory peaks its own.
//!
//! ```text
//! Engine::new(gpus[..mesh.devices()], cfg, mesh, opts)
//!   step 0 (warm-up) ─▶ step 1..=steps ─▶ StepCosts each ─▶ median by device clock (or wall)
//! ```
//!
//! Included by each example with `#[path = "support/engine_steps.rs"] mod engine_steps;`.

#![allow(dead_code)] // each example uses its own part

use triaxis::cpu::AdamW;
use triaxis::data::{Batcher, Corpus};
use triaxis::engine::{Engine, RuntimeOptions, StepCosts};
use triaxis::gpu::Gpu;
use triaxis::memory::Usage;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::runtime::Op;
use triaxis::step::TrainConfig;

/// An engine after its steps, and the costs of the measured ones.
pub struct Measured {
    pub engine: Engine,
    /// Per device: the memory ledger right after placement, before any step.
    pub built: Vec<Usage>,
    pub costs: Vec<StepCosts>,
}

impl Measured {
    /// The median measured step by device-clock seconds (by wall seconds where the device clock
    /// is not measured: flat ZeRO-2/3).
    pub fn median(&self) -> StepCosts {
        let key = |c: &StepCosts| {
            if c.device_step > 0.0 {
                c.device_step
            } else {
                c.wall
            }
        };
        let mut v = self.costs.clone();
        v.sort_by(|x, y| key(x).total_cmp(&key(y)));
        v.swap_remove(v.len() / 2)
    }

    /// The last measured step.
    pub fn last(&self) -> &StepCosts {
        self.costs.last().expect("at least one measured step")
    }
}

/// Places `mesh` on the first `mesh.devices()` of `gpus` and runs `cfg.steps` steps (the first
/// a warm-up, not in `costs`) on the built-in corpus, batches drawn from `Batcher::new(seed)`:
/// every layout of one global batch sees the same data. Memory peaks are reset before each
/// step, so each step's `memory` carries that step's peaks.
pub fn run(
    gpus: &[Gpu],
    cfg: TrainConfig,
    mesh: Mesh,
    opts: RuntimeOptions,
    corpus: &Corpus,
    seed: u64,
) -> anyhow::Result<Measured> {
    let n = mesh.devices();
    if gpus.len() < n {
        anyhow::bail!(
            "{} needs {n} devices, {} are open",
            mesh.describe(),
            gpus.len()
        );
    }
    let (micro, steps) = (cfg.micro, cfg.steps);
    let mut engine = Engine::new(&gpus[..n], cfg, mesh, opts)?;
    let built = gpus[..n].iter().map(|g| g.memory()).collect();
    let mut batcher = Batcher::new(seed);
    let mut costs = Vec::new();
    for s in 0..steps {
        let batches = (0..engine.batches_per_step())
            .map(|_| corpus.train_batch(&mut batcher, micro))
            .collect::<triaxis::Result<Vec<_>>>()?;
        for g in &gpus[..n] {
            g.sync()?;
            g.reset_memory_peaks();
        }
        let c = engine.step(&batches, s)?;
        if s > 0 {
            costs.push(c);
        }
    }
    if costs.is_empty() {
        anyhow::bail!("{}: no measured step", mesh.describe());
    }
    Ok(Measured {
        engine,
        built,
        costs,
    })
}

/// Normwise relative difference ‖a − b‖ / ‖b‖ of two parameter vectors (in f64).
pub fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The measuring examples' training configuration: default AdamW, one warm-up step, seed 1.
pub fn train_config(
    model: GptConfig,
    micro: Micro,
    grad_accum: usize,
    steps: usize,
    min_lr_frac: f32,
) -> TrainConfig {
    TrainConfig {
        model,
        micro,
        grad_accum,
        steps,
        adam: AdamW::default(),
        warmup: 1,
        min_lr_frac,
        seed: 1,
    }
}

/// Ops of device 0's lowered program that `pick` selects (0 for a flat ZeRO-2/3 group).
pub fn count_ops(engine: &Engine, pick: impl Fn(&Op) -> bool) -> usize {
    engine.plan().map_or(0, |p| {
        p.programs
            .first()
            .map_or(0, |d| d.ops.iter().filter(|o| pick(o)).count())
    })
}
