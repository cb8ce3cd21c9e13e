//! Forward-only evaluation of a whole model on one device: validation loss, greedy generation
//! and exact match on addition, over any [`GpuModel`] whose blocks are the whole model.
//!
//! ```text
//! loss(x, y)   upload tokens [B·T], targets [B·T] ─▶ forward ops ─▶ losses [B·T] ─▶ mean
//! generate     prompts left-aligned in rows of [B, T] ─▶ forward ─▶ logits [B·T, V] ─▶ argmax
//! ```
//!
//! Nothing here writes a parameter, a gradient or an optimizer moment, so the model may be a
//! training run's own (the runtime's slot model on its device,
//! [`crate::runtime::Runtime::whole_model`]) between two steps: evaluation then moves no model
//! state at all. Its activations are overwritten; between steps no pass holds any. A layout
//! that splits the model (pipeline stages, tensor ranks, ZeRO-3) is evaluated on a
//! [`Mirror`]: the whole model on a device of its own, loaded with the gathered parameters
//! only (no optimizer state, nothing written back).

use crate::data::{eval_batch, Corpus, Vocab};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::gpu_model::{BuildOptions, GpuModel};
use crate::model::{GptConfig, Micro, Precision};
use crate::params::{Buffers, Layout};

/// The whole model on a device of its own for evaluating a layout that splits it: parameters
/// (and the gradient buffer its build binds, never written) but no optimizer state; each
/// evaluation uploads the run's parameters in the one-device f32 layout (bf16: rounded to
/// the packed words, as the run's forward reads them).
pub struct Mirror {
    pub model: GpuModel,
    /// The one-device f32 layout the parameters arrive in.
    layout: Layout,
}

impl Mirror {
    /// `cfg` on `gpu` for microbatches of shape `micro`, in precision `prec`.
    pub fn new(gpu: &Gpu, cfg: GptConfig, micro: Micro, prec: Precision) -> Result<Mirror> {
        let blocks = cfg.blocks();
        let layout = cfg.layout(&blocks);
        crate::model::fit::check(&cfg, &blocks, micro, 1, &gpu.limits)?;
        let buffers = Buffers::alloc(gpu, &layout, prec, false);
        let opts = BuildOptions {
            precision: prec,
            ..BuildOptions::default()
        };
        let model = GpuModel::build(gpu, cfg, &blocks, micro, 1.0, buffers, &opts)?;
        Ok(Mirror { model, layout })
    }

    /// Loads the whole model's flat parameters (one-device f32 layout).
    pub fn load(&self, params: &[f32]) -> Result<()> {
        if params.len() != self.layout.total {
            return Err(Error::Config(format!(
                "{} parameters for a model of {}",
                params.len(),
                self.layout.total
            )));
        }
        self.model
            .set_params(&self.layout.relayout(params, &self.model.buffers.layout)?)
    }
}

/// Refuses a model that is not the whole model (a pipeline stage or a tensor-parallel rank).
fn whole(m: &GpuModel) -> Result<()> {
    if m.blocks != m.cfg.blocks() || m.tp.t != 1 {
        return Err(Error::Config(
            "evaluation needs the whole model on one device (every block, one tensor rank)".into(),
        ));
    }
    Ok(())
}

/// Mean loss of one batch of `(tokens, targets)` ([B·T] each) without touching parameters.
pub fn loss(m: &GpuModel, x: &[u32], y: &[u32]) -> Result<f32> {
    whole(m)?;
    let g = &m.gpu;
    g.upload(&m.tokens, x)?;
    g.upload(&m.targets, y)?;
    g.run(&m.forward)?;
    let l = m.losses()?;
    Ok((l.iter().map(|&v| v as f64).sum::<f64>() / l.len() as f64) as f32)
}

/// Mean validation loss over `batches` fixed batches of the validation split.
pub fn val_loss(m: &GpuModel, corpus: &Corpus, batches: usize) -> Result<f32> {
    let mut sum = 0.0;
    for i in 0..batches.max(1) {
        let (x, y) = eval_batch(&corpus.val, m.micro, i, &corpus.val_starts);
        sum += loss(m, &x, &y)?;
    }
    Ok(sum / batches.max(1) as f32)
}

/// Greedy completion of any number of prompts, B at a time (B the microbatch size), each
/// for up to `max_new` tokens or until `stop`. Row r holds prompt r left-aligned; causality
/// makes padding after it harmless.
pub fn generate(
    m: &GpuModel,
    prompts: &[Vec<u32>],
    max_new: usize,
    stop: Option<u32>,
) -> Result<Vec<Vec<u32>>> {
    whole(m)?;
    let Micro { b, t } = m.micro;
    let v = m.cfg.vocab;
    if prompts.len() > b {
        // more prompts than rows: a microbatch of them at a time
        let mut out = Vec::with_capacity(prompts.len());
        for chunk in prompts.chunks(b) {
            out.extend(generate(m, chunk, max_new, stop)?);
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
        m.gpu.upload(&m.tokens, &x)?;
        m.gpu.run(&m.forward)?;
        let logits = m.logits()?;
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

/// Exact-match accuracy of greedy completions after `=` on the first `limit` held-out
/// addition problems.
pub fn addition_accuracy(m: &GpuModel, corpus: &Corpus, limit: usize) -> Result<f32> {
    let Vocab::Chars(_) = corpus.vocab else {
        return Err(Error::Config("accuracy needs the addition corpus".into()));
    };
    let newline = corpus.vocab.encode("\n")?[0];
    let problems = &corpus.val_problems[..limit.min(corpus.val_problems.len())];
    let mut correct = 0;
    for chunk in problems.chunks(m.micro.b) {
        let prompts: Vec<Vec<u32>> = chunk
            .iter()
            .map(|(p, _)| corpus.vocab.encode(p))
            .collect::<Result<_>>()?;
        let outs = generate(m, &prompts, 12, Some(newline))?;
        for ((_, answer), out) in chunk.iter().zip(outs) {
            let text = corpus.vocab.decode(&out);
            correct += (text.trim_end_matches('\n') == answer && text.ends_with('\n')) as usize;
        }
    }
    Ok(correct as f32 / problems.len().max(1) as f32)
}
