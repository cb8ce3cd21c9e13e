//! The optimizer of one device: global-norm clipping and AdamW over its flat buffers.
//!
//! The global gradient norm is made layout-invariant: each device computes Σg² per *tensor*
//! (a fixed-order reduction inside the tensor), the host adds the per-tensor sums in the model's
//! canonical tensor order in f64, and uploads the result. One device, p pipeline stages or d
//! replicas therefore get the same clip factor bit for bit, and so the same parameters.

use crate::cpu::AdamW;
use crate::error::Result;
use crate::gpu::{Gpu, View};
use crate::kernels::{elementwise as ke, optim as ko, Op};
use crate::params::{Buffers, ALIGN};

pub struct Optimizer {
    gpu: Gpu,
    /// Tensor names in the order of `sq`'s slots.
    names: Vec<String>,
    /// Σg² of tensor i at element i·ALIGN.
    sq: View,
    norm_ops: Vec<Op>,
    zero_grads: Op,
    adam_ops: Vec<Op>,
    hp: View,
    norm_sq: View,
}

impl Optimizer {
    pub fn new(gpu: &Gpu, b: &Buffers) -> Result<Optimizer> {
        let names: Vec<String> = b.layout.tensors.iter().map(|t| t.name.clone()).collect();
        let sq = gpu.buffer("grad.tensor_sq", names.len() * ALIGN);
        let longest = b.layout.tensors.iter().map(|t| t.len).max().unwrap_or(1);
        let scratch = gpu.buffer("grad.norm_scratch", ko::norm_scratch_len(longest));
        let mut norm_ops = Vec::new();
        for (i, t) in b.layout.tensors.iter().enumerate() {
            let out = sq.slice(i * ALIGN, 1);
            norm_ops.extend(ko::grad_norm_squared(
                gpu,
                &out,
                &scratch,
                &b.grads.slice(t.offset, t.len),
            )?);
        }
        let hp = gpu.buffer("adam.hp", 8);
        let norm_sq = gpu.buffer("grad.norm_sq", 1);
        // one AdamW dispatch per contiguous decay segment (see params::Layout::decay_segments)
        let mut adam_ops = Vec::new();
        for (r, decay) in b.layout.decay_segments() {
            let v = |x: &View| x.slice(r.start, r.len());
            let decay_end = if decay { r.len() } else { 0 };
            adam_ops.extend(ko::adamw(
                gpu,
                &v(&b.params),
                &v(&b.grads),
                &v(&b.m),
                &v(&b.v),
                &hp,
                &norm_sq,
                decay_end,
            )?);
        }
        Ok(Optimizer {
            gpu: gpu.clone(),
            names,
            sq,
            norm_ops,
            zero_grads: ke::fill(gpu, &b.grads, 0.0)?,
            adam_ops,
            hp,
            norm_sq,
        })
    }

    /// Sets every gradient to zero (start of a step).
    pub fn zero_grads(&self) -> Result<()> {
        self.gpu.run(std::slice::from_ref(&self.zero_grads))
    }

    /// Σg² of every tensor on this device, by name.
    pub fn tensor_sq(&self) -> Result<Vec<(String, f32)>> {
        self.gpu.run(&self.norm_ops)?;
        let sq: Vec<f32> = self.gpu.download(&self.sq)?;
        Ok(self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), sq[i * ALIGN]))
            .collect())
    }

    /// One AdamW step with hyper-parameters `h`, given the global Σg² (for clipping).
    pub fn step(&self, h: &AdamW, norm_sq: f32) -> Result<()> {
        self.gpu.upload(&self.hp, &ko::hyper_words(h))?;
        self.gpu.upload(&self.norm_sq, &[norm_sq])?;
        self.gpu.run(&self.adam_ops)
    }
}

/// Adds per-tensor Σg² in `canonical` name order (f64), whatever device each came from.
pub fn global_norm_sq(parts: &[(String, f32)], canonical: &[String]) -> f32 {
    let mut total = 0.0f64;
    for name in canonical {
        for (n, v) in parts {
            if n == name {
                total += *v as f64;
            }
        }
    }
    total as f32
}
