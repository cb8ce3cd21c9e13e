//! The whole model on one device, written as plainly as a step can be: gradient accumulation
//! over microbatches, global-norm clipping and AdamW, all on the GPU with the op lists built
//! once. No example trains with it — every layout, one device included, trains on
//! [`crate::runtime`] through [`crate::engine::Engine`] — it is the independent one-device
//! reference the runtime's bits are tested against (like the CPU twin of one step here), and
//! the evaluator and generator of the examples.
//!
//! One step: zero grads ─▶ for each microbatch: upload tokens/targets, forward+backward
//! (parameter grads accumulate) ─▶ Σg² ─▶ AdamW with clip scale min(1, clip/‖g‖).

use crate::cpu;
use crate::data::{eval_batch, Corpus, Vocab};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::kernels::Op;
use crate::model::{cpu_model, gpu_model::GpuModel, Micro};
use crate::optim::{global_norm_sq, Optimizer};
use crate::parallel::accumulate::{Accumulation, TreeAccumulator};
use crate::step::{checksum, ModelState, StepStats, TrainConfig};

/// The whole model on one device plus its optimizer.
pub struct Trainer {
    pub cfg: TrainConfig,
    pub model: GpuModel,
    step_ops: Vec<Op>,
    optim: Optimizer,
    /// Tensor names in the model's canonical order (for the layout-invariant norm).
    canonical: Vec<String>,
    /// Pairwise-tree accumulation, when chosen.
    tree: Option<TreeAccumulator>,
}

impl Trainer {
    pub fn new(gpu: &Gpu, cfg: TrainConfig) -> Result<Trainer> {
        Trainer::with_accumulation(gpu, cfg, Accumulation::Sequential)
    }

    /// A trainer whose microbatch gradients accumulate as `acc` says.
    pub fn with_accumulation(gpu: &Gpu, cfg: TrainConfig, acc: Accumulation) -> Result<Trainer> {
        cfg.validate()?;
        let dloss = 1.0 / cfg.tokens_per_step() as f32;
        let model = GpuModel::new(gpu, cfg.model, &cfg.model.blocks(), cfg.micro, dloss)?;
        model.set_params(&cfg.model.init(&model.buffers.layout, cfg.seed))?;
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
                model.buffers.packed(),
            )?),
        };
        Ok(Trainer {
            tree,
            step_ops,
            optim,
            canonical,
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
        self.optim.step(&h, norm_sq)?;
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
        let g = &self.model.gpu;
        g.upload(&self.model.tokens, x)?;
        g.upload(&self.model.targets, y)?;
        g.run(&self.model.forward)?;
        let l = self.model.losses()?;
        Ok((l.iter().map(|&v| v as f64).sum::<f64>() / l.len() as f64) as f32)
    }

    /// Mean validation loss over `batches` fixed batches of the validation split.
    pub fn eval(&mut self, corpus: &Corpus, batches: usize) -> Result<f32> {
        let mut sum = 0.0;
        for i in 0..batches.max(1) {
            let (x, y) = eval_batch(&corpus.val, self.cfg.micro, i, &corpus.val_starts);
            sum += self.loss(&x, &y)?;
        }
        Ok(sum / batches.max(1) as f32)
    }

    /// Greedy completion of any number of prompts, B at a time (B the microbatch size), each
    /// for up to `max_new` tokens or until `stop`. Row r holds prompt r left-aligned; causality
    /// makes padding after it harmless.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        max_new: usize,
        stop: Option<u32>,
    ) -> Result<Vec<Vec<u32>>> {
        let Micro { b, t } = self.cfg.micro;
        let v = self.cfg.model.vocab;
        if prompts.len() > b {
            // more prompts than rows: a microbatch of them at a time
            let mut out = Vec::with_capacity(prompts.len());
            for chunk in prompts.chunks(b) {
                out.extend(self.generate(chunk, max_new, stop)?);
            }
            return Ok(out);
        }
        if let Some(i) = prompts.iter().position(|p| p.is_empty()) {
            return Err(Error::Config(format!("prompt {i} is empty")));
        }
        let mut rows: Vec<Vec<u32>> = prompts.to_vec();
        let mut done = vec![false; rows.len()];
        for _ in 0..max_new {
            let mut x = vec![0u32; b * t];
            for (r, row) in rows.iter().enumerate() {
                let keep = &row[row.len().saturating_sub(t)..];
                x[r * t..r * t + keep.len()].copy_from_slice(keep);
            }
            let g = &self.model.gpu;
            g.upload(&self.model.tokens, &x)?;
            g.run(&self.model.forward)?;
            let logits = self.model.logits()?;
            for (r, row) in rows.iter_mut().enumerate() {
                if done[r] {
                    continue;
                }
                let pos = row.len().min(t) - 1;
                let l = &logits[(r * t + pos) * v..(r * t + pos + 1) * v];
                let next = (0..v).fold(0, |best, j| if l[j] > l[best] { j } else { best }) as u32;
                row.push(next);
                done[r] = Some(next) == stop;
            }
            if done.iter().all(|&d| d) {
                break;
            }
        }
        Ok(rows
            .iter()
            .zip(prompts)
            .map(|(r, p)| r[p.len()..].to_vec())
            .collect())
    }

    /// Exact-match accuracy of greedy completions after `=` on held-out addition problems.
    pub fn addition_accuracy(&mut self, corpus: &Corpus, limit: usize) -> Result<f32> {
        let Vocab::Chars(_) = corpus.vocab else {
            return Err(Error::Config("accuracy needs the addition corpus".into()));
        };
        let newline = corpus.vocab.encode("\n")?[0];
        let problems = &corpus.val_problems[..limit.min(corpus.val_problems.len())];
        let mut correct = 0;
        for chunk in problems.chunks(self.cfg.micro.b) {
            let prompts: Vec<Vec<u32>> = chunk
                .iter()
                .map(|(p, _)| corpus.vocab.encode(p))
                .collect::<Result<_>>()?;
            let outs = self.generate(&prompts, 12, Some(newline))?;
            for ((_, answer), out) in chunk.iter().zip(outs) {
                let text = corpus.vocab.decode(&out);
                correct += (text.trim_end_matches('\n') == answer && text.ends_with('\n')) as usize;
            }
        }
        Ok(correct as f32 / problems.len().max(1) as f32)
    }

    /// Parameters and AdamW moments (for checkpoints).
    pub fn state(&self) -> Result<ModelState> {
        let (g, b) = (&self.model.gpu, &self.model.buffers);
        Ok(ModelState {
            params: g.download(&b.params)?,
            m: g.download(&b.m)?,
            v: g.download(&b.v)?,
        })
    }

    /// Loads parameters and AdamW moments (from [`Trainer::state`] or any layout's).
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        let (g, b) = (&self.model.gpu, &self.model.buffers);
        st.check(b.layout.total)?;
        g.upload(&b.params, &st.params)?;
        g.upload(&b.m, &st.m)?;
        g.upload(&b.v, &st.v)
    }

    /// SHA-256 over the parameter bytes (little-endian f32, the flat layout).
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.model.params()?))
    }
}

/// The CPU twin of [`Trainer::step`] on host vectors (the full model's layout). Returns the
/// step's mean loss and the gradient norm.
pub fn cpu_step(
    cfg: &TrainConfig,
    params: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    batches: &[(Vec<u32>, Vec<u32>)],
    s: usize,
) -> Result<StepStats> {
    let layout = cfg.model.layout(&cfg.model.blocks());
    let dloss = 1.0 / cfg.tokens_per_step() as f32;
    let mut grads = vec![0.0; layout.total];
    let mut loss = 0.0f64;
    for (x, y) in batches {
        let l = cpu_model::forward_backward(
            &cfg.model, &layout, params, &mut grads, x, y, cfg.micro, dloss,
        )?;
        loss += l.iter().map(|&x| x as f64).sum::<f64>();
    }
    let h = cfg.adam_at(s);
    let norm = cpu::grad_norm(&grads);
    for (r, decay) in layout.decay_segments() {
        let (m, v) = (&mut m[r.clone()], &mut v[r.clone()]);
        let decay_end = if decay { r.len() } else { 0 };
        cpu::adamw(
            &mut params[r.clone()],
            &grads[r],
            m,
            v,
            &h,
            h.clip_scale(norm),
            decay_end,
        );
    }
    Ok(StepStats {
        loss: (loss / cfg.tokens_per_step() as f64) as f32,
        grad_norm: norm,
        lr: h.lr,
    })
}
