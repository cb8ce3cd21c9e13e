//! The host side of bf16 storage (packing two bf16 per u32 word, as the kernels store them) and
//! AdamW's hyper-parameters. Every kernel's plain-Rust twin, the specification the kernels are
//! tested against, lives with the tests (`tests/twins`).

mod bf16;
pub use bf16::{pack_bf16, round_bf16, unpack_bf16};

/// AdamW hyper-parameters of one step. `t` counts steps from 1.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub t: u32,
    /// Global-norm clip threshold; 0 disables clipping.
    pub clip: f32,
}

impl Default for AdamW {
    fn default() -> Self {
        AdamW {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            t: 1,
            clip: 1.0,
        }
    }
}

impl AdamW {
    /// The factor gradients are multiplied by, given their global norm.
    pub fn clip_scale(&self, norm: f32) -> f32 {
        if self.clip > 0.0 && norm > self.clip {
            self.clip / norm
        } else {
            1.0
        }
    }
}
