//! The whole model on one device, written as plainly as a step can be: gradient accumulation
//! over microbatches, global-norm clipping and AdamW, all on the GPU with the op lists built
//! once. No example trains with it — every layout, one device included, trains on
//! [`crate::runtime`] through [`crate::engine::Engine`] — it is the independent one-device
//! reference the runtime's bits are tested against (as the CPU twin of one step in `tests/twins` is); its
//! loss, evaluation and generation are [`crate::eval`]'s on its model.
//!
//! One step: zero grads ─▶ for each microbatch: upload tokens/targets, forward+backward
//! (parameter grads accumulate) ─▶ Σg² ─▶ AdamW with clip scale min(1, clip/‖g‖).
//!
//! In f32 or bf16 ([`Trainer::with_precision`]): a bf16 trainer runs the packed model on f32
//! master weights, the forward a bf16 run trains and is evaluated with. Model state
//! goes in and out in the one-device f32 layout whatever the precision (bf16 stores every
//! tensor on 128 elements, [`crate::params::Layout::packed`]).

use crate::data::Corpus;
use crate::error::{Error, Result};
use crate::eval;
use crate::gpu::Gpu;
use crate::kernels::Dispatch;
use crate::model::gpu_model::{BuildOptions, GpuModel};
use crate::model::{fit, Precision};
use crate::optim::{global_norm_sq, Optimizer};
use crate::parallel::accumulate::{Accumulation, TreeAccumulator};
use crate::params::{Buffers, Layout};
use crate::step::{checksum, ModelState, StepStats, TrainConfig};

/// The whole model on one device plus its optimizer.
pub struct Trainer {
    pub cfg: TrainConfig,
    pub model: GpuModel,
    step_ops: Vec<Dispatch>,
    optim: Optimizer,
    /// Tensor names in the model's canonical order (for the layout-invariant norm).
    canonical: Vec<String>,
    /// The one-device f32 layout model state is exchanged in (the buffers' own under f32).
    layout: Layout,
    /// Pairwise-tree accumulation, when chosen.
    tree: Option<TreeAccumulator>,
}

impl Trainer {
    pub fn new(gpu: &Gpu, cfg: TrainConfig) -> Result<Trainer> {
        Trainer::with_accumulation(gpu, cfg, Accumulation::Sequential)
    }

    /// A trainer whose microbatch gradients accumulate as `acc` says.
    pub fn with_accumulation(gpu: &Gpu, cfg: TrainConfig, acc: Accumulation) -> Result<Trainer> {
        Trainer::build(gpu, cfg, acc, Precision::F32)
    }

    /// A trainer in precision `prec` (sequential accumulation). bf16: packed bf16 parameters,
    /// gradients and activations with f32 master weights and moments, the runtime's one-device
    /// bf16 model; its [`Trainer::loss`], [`Trainer::eval`] and [`Trainer::generate`] run the
    /// packed forward on the parameters rounded from the master weights, as a bf16 step does.
    pub fn with_precision(gpu: &Gpu, cfg: TrainConfig, prec: Precision) -> Result<Trainer> {
        Trainer::build(gpu, cfg, Accumulation::Sequential, prec)
    }

    /// A trainer in precision `prec` whose microbatch gradients accumulate as `acc` says.
    pub fn build(
        gpu: &Gpu,
        cfg: TrainConfig,
        acc: Accumulation,
        prec: Precision,
    ) -> Result<Trainer> {
        cfg.validate()?;
        let dloss = 1.0 / cfg.tokens_per_step() as f32;
        let blocks = cfg.model.blocks();
        let layout = cfg.model.layout(&blocks);
        let model = match prec {
            Precision::F32 => GpuModel::new(gpu, cfg.model, &blocks, cfg.micro, dloss)?,
            Precision::Bf16 => {
                // before the flat buffers, as GpuModel::new: a size no device holds is refused
                fit::check(&cfg.model, &blocks, cfg.micro, 1, &gpu.limits)?;
                let opts = BuildOptions {
                    precision: prec,
                    ..BuildOptions::default()
                };
                let buffers = Buffers::alloc(gpu, &layout, Precision::Bf16, true);
                GpuModel::build(gpu, cfg.model, &blocks, cfg.micro, dloss, buffers, &opts)?
            }
        };
        let init = cfg.model.init(&layout, cfg.seed);
        model.set_params(&layout.relayout(&init, &model.buffers.layout)?)?;
        let optim = Optimizer::new(gpu, &model.buffers)?;
        let step_ops = model
            .forward
            .iter()
            .chain(&model.backward)
            .cloned()
            .collect();
        let canonical = cfg.model.canonical_names();
        let tree = match acc {
            Accumulation::Sequential => None,
            Accumulation::PairwiseTree => Some(TreeAccumulator::new(
                gpu,
                &model.buffers.grads,
                cfg.grad_accum,
                model.precision,
            )?),
        };
        Ok(Trainer {
            tree,
            step_ops,
            optim,
            canonical,
            layout,
            model,
            cfg,
        })
    }

    /// One optimizer step over `batches` (`grad_accum` pairs of tokens/targets), step index `s`.
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<StepStats> {
        if batches.len() != self.cfg.grad_accum {
            return Err(Error::Config(format!(
                "step needs {} microbatches, got {}",
                self.cfg.grad_accum,
                batches.len()
            )));
        }
        let g = self.model.gpu.clone();
        self.optim.zero_grads()?;
        let mut loss = 0.0f64;
        for (x, y) in batches {
            if let Some(t) = &self.tree {
                g.run(std::slice::from_ref(&t.zero))?;
            }
            g.upload(&self.model.tokens, x)?;
            g.upload(&self.model.targets, y)?;
            g.run(&self.step_ops)?;
            loss += self.model.losses()?.iter().map(|&l| l as f64).sum::<f64>();
            if let Some(t) = &mut self.tree {
                t.push()?;
            }
        }
        if let Some(t) = &mut self.tree {
            t.finish()?;
        }
        let h = self.cfg.adam_at(s);
        let norm_sq = global_norm_sq(&self.optim.tensor_sq()?, &self.canonical);
        self.optim.step(&h, norm_sq, false)?;
        Ok(StepStats {
            loss: (loss / self.cfg.tokens_per_step() as f64) as f32,
            grad_norm: norm_sq.sqrt(),
            lr: h.lr,
        })
    }

    /// Σg² of each tensor of the last step's gradients before clipping, in canonical order:
    /// the reference every layout's per-tensor norms are compared with.
    pub fn tensor_sq(&self) -> Result<Vec<(String, f32)>> {
        Ok(crate::optim::tensor_norms_sq(
            &self.optim.parts_sq()?,
            &self.canonical,
        ))
    }

    /// Mean loss of one batch of `(tokens, targets)` without touching parameters.
    pub fn loss(&mut self, x: &[u32], y: &[u32]) -> Result<f32> {
        eval::loss(&self.model, x, y)
    }

    /// Mean validation loss over `batches` fixed batches of the validation split.
    pub fn eval(&mut self, corpus: &Corpus, batches: usize) -> Result<f32> {
        eval::val_loss(&self.model, corpus, batches)
    }

    /// Greedy completion of `prompts` ([`eval::generate`]).
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        max_new: usize,
        stop: Option<u32>,
    ) -> Result<Vec<Vec<u32>>> {
        eval::generate(&self.model, prompts, max_new, stop)
    }

    /// Exact-match accuracy of greedy completions after `=` on held-out addition problems.
    pub fn addition_accuracy(&mut self, corpus: &Corpus, limit: usize) -> Result<f32> {
        eval::addition_accuracy(&self.model, corpus, limit)
    }

    /// A host copy of an f32 flat buffer of the device (storage layout) in the one-device
    /// layout.
    fn canonical(&self, flat: Vec<f32>) -> Result<Vec<f32>> {
        let b = &self.model.buffers;
        match b.packed() {
            true => b.layout.relayout(&flat, &self.layout),
            false => Ok(flat),
        }
    }

    /// Parameters (bf16: the f32 master weights) and AdamW moments in the one-device layout
    /// (for checkpoints).
    pub fn state(&self) -> Result<ModelState> {
        let (g, b) = (&self.model.gpu, &self.model.buffers);
        Ok(ModelState {
            params: self.canonical(g.download(b.params_f32())?)?,
            m: self.canonical(g.download(&b.m)?)?,
            v: self.canonical(g.download(&b.v)?)?,
        })
    }

    /// Loads parameters and AdamW moments (from [`Trainer::state`] or any layout's); bf16: the
    /// parameters become the master weights and, rounded, the bf16 parameters.
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        let (g, b) = (&self.model.gpu, &self.model.buffers);
        st.check(self.layout.total)?;
        let stored = |flat: &[f32]| -> Result<Vec<f32>> {
            match b.packed() {
                true => self.layout.relayout(flat, &b.layout),
                false => Ok(flat.to_vec()),
            }
        };
        b.upload_params(g, &stored(&st.params)?)?;
        g.upload(&b.m, &stored(&st.m)?)?;
        g.upload(&b.v, &stored(&st.v)?)
    }

    /// SHA-256 over the parameter bytes (little-endian f32, the one-device layout; bf16: the
    /// master weights).
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.canonical(self.model.params()?)?))
    }
}
