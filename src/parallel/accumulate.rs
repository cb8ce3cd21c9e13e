//! Layout-invariant gradient accumulation: microbatch gradients summed in one fixed pairwise
//! tree over the global microbatch index, so one device, 2 or 4 replicas compute the same bits.
//!
//! ```text
//! microbatches   g0   g1   g2   g3   g4   g5   g6   g7
//! one replica      \  /      \  /      \  /      \  /        (binary counter of level buffers:
//!                 g01        g23       g45       g67          push i merges while level ℓ is
//!                    \      /             \      /            occupied: grads += L[ℓ])
//!                     g0123                g4567
//!                          \              /                  replicas: the same tree's top,
//!                            g01234567                       host-staged (collective Algo::Tree)
//! ```
//!
//! IEEE addition is commutative, so `a + b` and `b + a` agree bitwise; only the grouping matters,
//! and the grouping is the tree. With a power-of-two count per replica and a power-of-two number
//! of replicas, each replica's local tree is a subtree of the global one. Cost: one extra
//! gradient-sized buffer per tree level (⌈log₂ k⌉ + 1 of them) and a copy or add per microbatch.

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{elementwise as ke, Dispatch};
use crate::memory::Category;
use crate::precision::Precision;

/// How parameter gradients accumulate over a step's microbatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Accumulation {
    /// `grads +=` microbatch after microbatch (cheapest; order depends on the layout).
    #[default]
    Sequential,
    /// The fixed pairwise tree above (layout-invariant bits).
    PairwiseTree,
}

/// The level buffers and pre-built ops of one device's pairwise accumulation.
pub struct TreeAccumulator {
    gpu: Gpu,
    /// Zeroes `grads` before each microbatch (its backward then leaves exactly g_i there).
    pub zero: Dispatch,
    save: Vec<Dispatch>,    // L[ℓ] = grads
    merge: Vec<Dispatch>,   // grads += L[ℓ]
    restore: Vec<Dispatch>, // grads = L[ℓ]
    occupied: Vec<bool>,
    levels: Vec<View>,
}

impl TreeAccumulator {
    /// For `count` microbatches per step (a power of two) over the gradient buffer `grads`
    /// in precision `p` (bf16: packed words; each level's add widens, adds in f32 and rounds to
    /// bf16, as the bf16 tree all-reduce does between ranks).
    pub fn new(gpu: &Gpu, grads: &View, count: usize, p: Precision) -> Result<TreeAccumulator> {
        if !count.is_power_of_two() {
            return Err(Error::Config(format!(
                "pairwise-tree accumulation needs a power-of-two number of microbatches per device, not {count}"
            )));
        }
        let n_levels = count.trailing_zeros() as usize + 1;
        let levels: Vec<View> = (0..n_levels)
            .map(|l| gpu.buffer_in(Category::Gradients, &format!("grad.tree{l}"), grads.len))
            .collect();
        Ok(TreeAccumulator {
            gpu: gpu.clone(),
            zero: ke::fill(gpu, p, grads, 0.0)?,
            save: levels
                .iter()
                .map(|l| ke::copy(gpu, p, l, grads))
                .collect::<Result<_>>()?,
            merge: levels
                .iter()
                .map(|l| ke::add(gpu, p, grads, l))
                .collect::<Result<_>>()?,
            restore: levels
                .iter()
                .map(|l| ke::copy(gpu, p, grads, l))
                .collect::<Result<_>>()?,
            occupied: vec![false; n_levels],
            levels,
        })
    }

    /// Bytes of the level buffers (the mode's memory cost).
    pub fn bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.bytes()).sum()
    }

    /// Takes the gradient of the microbatch just computed (in `grads`) into the tree.
    pub fn push(&mut self) -> Result<()> {
        let mut ops = Vec::new();
        let mut level = 0;
        while self.occupied.get(level) == Some(&true) {
            ops.push(self.merge[level].clone());
            self.occupied[level] = false;
            level += 1;
        }
        let slot = self.save.get(level).ok_or_else(|| {
            Error::Config("more microbatches pushed than the tree was built for".into())
        })?;
        ops.push(slot.clone());
        self.occupied[level] = true;
        self.gpu.run(&ops)
    }

    /// Leaves the step's total in `grads` and empties the tree.
    pub fn finish(&mut self) -> Result<()> {
        let full: Vec<usize> = (0..self.occupied.len())
            .filter(|&l| self.occupied[l])
            .collect();
        if full.len() != 1 {
            return Err(Error::Config(format!(
                "pairwise tree finished with {} partial sums; push a power-of-two count",
                full.len()
            )));
        }
        self.occupied.iter_mut().for_each(|o| *o = false);
        self.gpu.run(std::slice::from_ref(&self.restore[full[0]]))
    }
}
