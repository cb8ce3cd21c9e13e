//! What every runner shares about a training step, whatever the layout: the run's
//! configuration ([`TrainConfig`]: model, microbatch, accumulation, schedule of the learning
//! rate), a step's result ([`StepStats`]), the model state in the one-device layout
//! ([`ModelState`], what checkpoints hold) and its checksum.

use sha2::{Digest, Sha256};

use crate::cpu::AdamW;
use crate::data::hex;
use crate::error::{Error, Result};
use crate::model::{GptConfig, Micro};

/// Parameters and AdamW moments of the whole model in the one-device layout
/// (`cfg.layout(&cfg.blocks())`): what a checkpoint holds, whatever layout trained it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelState {
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

impl ModelState {
    /// Checks all three buffers have the layout's `total` elements.
    pub fn check(&self, total: usize) -> Result<()> {
        for (name, b) in [("params", &self.params), ("m", &self.m), ("v", &self.v)] {
            if b.len() != total {
                return Err(Error::Config(format!(
                    "model state {name} has {} elements but the model layout needs {total}",
                    b.len()
                )));
            }
        }
        Ok(())
    }
}

/// Everything that defines a training run (recorded in the run record).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TrainConfig {
    pub model: GptConfig,
    pub micro: Micro,
    /// Microbatches accumulated per optimizer step.
    pub grad_accum: usize,
    pub steps: usize,
    /// Peak learning rate and the other AdamW settings (`t` is ignored: the step counts).
    pub adam: AdamW,
    /// Linear warm-up steps, then cosine decay to `min_lr_frac`·lr.
    pub warmup: usize,
    pub min_lr_frac: f32,
    pub seed: u64,
}

impl TrainConfig {
    pub fn tokens_per_step(&self) -> usize {
        self.micro.tokens() * self.grad_accum
    }

    /// Learning rate at step `s` (0-based).
    pub fn lr_at(&self, s: usize) -> f32 {
        let lr = self.adam.lr;
        if s < self.warmup {
            return lr * (s + 1) as f32 / self.warmup as f32;
        }
        let span = self.steps.saturating_sub(self.warmup).max(1);
        let frac = ((s - self.warmup) as f32 / span as f32).min(1.0);
        let min = lr * self.min_lr_frac;
        min + 0.5 * (lr - min) * (1.0 + (std::f32::consts::PI * frac).cos())
    }

    /// AdamW hyper-parameters of step `s` (0-based).
    pub fn adam_at(&self, s: usize) -> AdamW {
        AdamW {
            lr: self.lr_at(s),
            t: s as u32 + 1,
            ..self.adam
        }
    }

    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        self.micro.validate(&self.model)?;
        if self.grad_accum == 0 {
            return Err(Error::Config(
                "gradient accumulation must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Result of one optimizer step.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct StepStats {
    /// Mean token loss over the step's microbatches.
    pub loss: f32,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    pub lr: f32,
}

/// `"sha256:<hex>"` of any bytes (a configuration, a command line).
pub fn checksum_bytes(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// `"sha256:<hex>"` of a flat f32 parameter vector.
pub fn checksum(flat: &[f32]) -> String {
    checksum_bytes(bytemuck::cast_slice::<f32, u8>(flat))
}
