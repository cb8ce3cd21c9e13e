//! Twins of `kernels::optim` under bf16: the global norm of packed bf16 gradients and AdamW on f32
//! master weights and moments from packed bf16 gradients, writing packed bf16 parameters.

use crate::twins::{adamw, AdamW};
use crate::twins::{pack_bf16, unpack_bf16};

/// Σ g² over the `n` bf16 gradients in `words` (summed in f64, as [`crate::twins::grad_norm`]).
pub fn grad_norm_squared_bf16(words: &[u32], n: usize) -> f64 {
    unpack_bf16(words, n)
        .iter()
        .map(|&g| g as f64 * g as f64)
        .sum()
}

/// One AdamW step: `master`, `m`, `v` (f32, `n` each) updated from the packed gradients with
/// `grad_scale`; returns the new packed bf16 parameters (⌈n/2⌉ words) = the rounded master.
pub fn adamw_bf16(
    master: &mut [f32],
    grads: &[u32],
    m: &mut [f32],
    v: &mut [f32],
    h: &AdamW,
    grad_scale: f32,
    decay: &[std::ops::Range<usize>],
) -> Vec<u32> {
    let g = unpack_bf16(grads, master.len());
    adamw(master, &g, m, v, h, grad_scale, decay);
    pack_bf16(master)
}
