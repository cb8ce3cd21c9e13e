//! The model state of a pipeline in the one-device layout (gather and scatter through every
//! stage and tensor rank, for checkpoints and resharding) and the finiteness check that stops
//! a step before its optimizer update.

use super::{worker_error, Pipeline};
use crate::error::{Error, Result};
use crate::gpu::View;
use crate::model::{gpu_model::GpuModel, Block};
use crate::parallel::tensor as tp;
use crate::params::Buffers;
use crate::step::ModelState;

impl Pipeline {
    /// Stops a step before its optimizer update when the loss or a gradient is not finite,
    /// naming the device, stage and tensor, so a NaN never reaches the parameters (or a
    /// checkpoint). `parts` is [`Pipeline::tensor_sq`] of this step.
    pub fn check_finite(&self, loss: f32, parts: &[(String, f32)], step: usize) -> Result<()> {
        let global = |stage: usize| {
            let (d, _) = self.schedule.place(stage);
            self.opts.device_base + d * self.opts.tp
        };
        if !loss.is_finite() {
            let last = self.stages.len() - 1;
            return Err(worker_error(
                global(last),
                last,
                "loss",
                step,
                format!("the loss is {loss}; stopping before the optimizer step"),
            ));
        }
        if let Some((name, v)) = parts.iter().find(|(_, v)| !v.is_finite()) {
            let block = block_of(name);
            let stage = self
                .stages
                .iter()
                .position(|b| b.contains(&block))
                .unwrap_or(0);
            return Err(worker_error(
                global(stage),
                stage,
                "gradient check",
                step,
                format!(
                    "the gradient of {name} is not finite (Σg² = {v}); stopping before the \
                     optimizer step"
                ),
            ));
        }
        Ok(())
    }

    /// The full model's flat parameters (one-device layout), gathered from every stage.
    pub fn gather_params(&self) -> Result<Vec<f32>> {
        self.gather(|b| &b.params)
    }

    /// Parameters and AdamW moments in the one-device layout (for checkpoints).
    pub fn state(&self) -> Result<ModelState> {
        Ok(ModelState {
            params: self.gather(|b| &b.params)?,
            m: self.gather(|b| &b.m)?,
            v: self.gather(|b| &b.v)?,
        })
    }

    /// Loads parameters and AdamW moments given in the one-device layout into every stage and
    /// tensor-parallel rank (resharding through the flat views: any layout can resume any
    /// other's state).
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        self.scatter(&st.params, |m, local| {
            m.gpu.upload(&m.buffers.params, &local)
        })?;
        self.scatter(&st.m, |m, local| m.gpu.upload(&m.buffers.m, &local))?;
        self.scatter(&st.v, |m, local| m.gpu.upload(&m.buffers.v, &local))
    }

    /// One per-parameter buffer (`pick` of each rank's [`Buffers`]) gathered into the
    /// one-device layout.
    fn gather(&self, pick: impl Fn(&Buffers) -> &View) -> Result<Vec<f32>> {
        self.gather_with(|_, _, m| m.gpu.download(pick(&m.buffers)))
    }

    /// The one-device buffer assembled from `local(stage, tp rank, its model)`: each rank's
    /// buffer in its local layout (`cfg.layout_tp(stage blocks, tp)`).
    pub fn gather_with(
        &self,
        local: impl Fn(usize, usize, &GpuModel) -> Result<Vec<f32>>,
    ) -> Result<Vec<f32>> {
        let full = self.cfg.model.layout(&self.cfg.model.blocks());
        let mut flat = vec![0.0f32; full.total];
        for d in &self.devices {
            for c in &d.chunks {
                let ranks = c.slots[0]
                    .iter()
                    .enumerate()
                    .map(|(r, m)| local(c.stage, r, m))
                    .collect::<Result<Vec<Vec<f32>>>>()?;
                let part = tp::gather(&self.cfg.model, &c.blocks, &ranks)?;
                let layout = self.cfg.model.layout(&c.blocks);
                for t in &layout.tensors {
                    full.slice_mut(&mut flat, &t.name)?
                        .copy_from_slice(&part[t.offset..t.offset + t.len]);
                }
            }
        }
        Ok(flat)
    }

    /// The inverse of [`Pipeline::gather_with`]: `src` in the one-device layout cut into every
    /// (stage, tensor rank)'s local buffer, handed to `put(its model, local buffer)`.
    pub fn scatter_with(
        &self,
        src: &[f32],
        mut put: impl FnMut(usize, usize, &GpuModel, Vec<f32>) -> Result<()>,
    ) -> Result<()> {
        let full = self.cfg.model.layout(&self.cfg.model.blocks());
        if src.len() != full.total {
            return Err(Error::Config(format!(
                "a model state buffer has {} elements but the model layout needs {}",
                src.len(),
                full.total
            )));
        }
        for d in &self.devices {
            for c in &d.chunks {
                let layout = self.cfg.model.layout(&c.blocks);
                let mut part = vec![0.0f32; layout.total];
                for x in &layout.tensors {
                    part[x.offset..x.offset + x.len].copy_from_slice(full.slice(src, &x.name)?);
                }
                let shards = tp::shard(&self.cfg.model, &c.blocks, &part, self.opts.tp)?;
                for (r, (m, shard)) in c.slots[0].iter().zip(shards).enumerate() {
                    put(c.stage, r, m, shard)?;
                }
            }
        }
        Ok(())
    }

    fn scatter(
        &self,
        src: &[f32],
        mut put: impl FnMut(&GpuModel, Vec<f32>) -> Result<()>,
    ) -> Result<()> {
        self.scatter_with(src, |_, _, m, local| put(m, local))
    }

    /// Each (stage, tensor-parallel rank)'s model (rank 0 slot), in stage then rank order —
    /// the order of [`Pipeline::stage_grads`].
    pub fn stage_models(&self) -> Vec<(usize, usize, &GpuModel)> {
        let mut out = Vec::new();
        for d in &self.devices {
            for c in &d.chunks {
                for (r, m) in c.slots[0].iter().enumerate() {
                    out.push((c.stage, r, m));
                }
            }
        }
        out.sort_by_key(|x| (x.0, x.1));
        out
    }
}

/// The block that owns parameter tensor `name` ("h3.fcw" → layer 3).
fn block_of(name: &str) -> Block {
    match name {
        "wte" | "wpe" => Block::Embedding,
        _ => match name
            .strip_prefix('h')
            .and_then(|r| r.split('.').next())
            .and_then(|l| l.parse().ok())
        {
            Some(l) => Block::Layer(l),
            None => Block::Head,
        },
    }
}
