//! ZeRO-1 inside pipeline and tensor-parallel stages (Megatron's distributed optimizer,
//! DeepSpeed's pipeline engine with ZeRO-1): the data-parallel group of one (stage, tensor
//! rank) — the same slice of the model on every replica — shards its AdamW moments; gradients
//! are reduce-scattered instead of all-reduced, each replica updates its chunk, and the updated
//! parameters are all-gathered.
//!
//! ```text
//! (stage s, tp rank k) on replicas 0..d:  grads G (full, from the schedule)
//!   reduce-scatter(mean) ─▶ replica r owns chunk r of G ─▶ AdamW on chunk r (m, v: chunk r only)
//!   ─▶ all-gather P: every replica holds the updated P again
//! ```
//!
//! Chunks are 64-aligned ([`Grid`] over the stage's flat buffer). Stages 2 and 3 are not
//! offered with pipelines, as in DeepSpeed: the pipeline accumulates gradients over all
//! microbatches of a step before any reduction, so sharding them saves nothing during the
//! schedule, and gathering parameters per microbatch and stage multiplies traffic.

use crate::collective::{self, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::link::Link;
use crate::memory::Category;
use crate::model::gpu_model::GpuModel;
use crate::optim::{NormPart, Optimizer};
use crate::parallel::shard::Grid;
use crate::parallel::tensor::{split_of, Split};

/// The sharded optimizer of one (stage, tensor rank) data-parallel group.
pub struct ShardedGroup {
    pub stage: usize,
    pub tp_rank: usize,
    pub grid: Grid,
    ranks: Vec<ShardRank>,
}

struct ShardRank {
    gpu: Gpu,
    params: View,
    grads: View,
    /// AdamW moments of this replica's chunk only.
    m: View,
    v: View,
    optim: Optimizer,
}

impl ShardedGroup {
    /// `models[r]`: replica r's model of this (stage, tensor rank).
    pub fn new(models: &[&GpuModel], stage: usize, tp_rank: usize) -> Result<ShardedGroup> {
        let Some(first) = models.first() else {
            return Err(Error::Config(
                "ZeRO-1 needs a data-parallel group of at least one replica".into(),
            ));
        };
        let layout = &first.buffers.layout;
        // one unit: the stage's whole flat buffer, cut into d 64-aligned chunks
        let grid = Grid::new(
            std::slice::from_ref(&(0..layout.total)),
            layout.total,
            models.len(),
        )?;
        let ranks = models
            .iter()
            .enumerate()
            .map(|(r, m)| {
                let (g, b) = (&m.gpu, &m.buffers);
                let len = grid.shard_len(r).max(1);
                let mm = g.buffer_in(Category::OptimizerState, "adam.m shard", len);
                let vv = g.buffer_in(Category::OptimizerState, "adam.v shard", len);
                let pieces = grid.pieces(r, false, false);
                let optim = Optimizer::sharded(g, layout, &b.params, &b.grads, &mm, &vv, &pieces)?;
                Ok(ShardRank {
                    gpu: g.clone(),
                    params: b.params.clone(),
                    grads: b.grads.clone(),
                    m: mm,
                    v: vv,
                    optim,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ShardedGroup {
            stage,
            tp_rank,
            grid,
            ranks,
        })
    }

    fn gpus(&self) -> Vec<Gpu> {
        self.ranks.iter().map(|r| r.gpu.clone()).collect()
    }

    /// Chunk r of the mean gradient over the replicas lands in replica r's gradient buffer.
    pub fn reduce_scatter(&self, ledger: &mut Ledger, link: &Link) -> Result<()> {
        let u = &self.grid.units[0];
        let views: Vec<View> = self.ranks.iter().map(|r| r.grads.clone()).collect();
        let outs: Vec<View> = (0..self.ranks.len())
            .map(|r| {
                let c = self.grid.chunk(0, r);
                self.ranks[r].grads.slice(c.start, c.len())
            })
            .collect();
        collective::reduce_scatter_to(
            &self.gpus(),
            &views,
            &u.bounds,
            &outs,
            &Opts::mean(),
            ledger,
            link,
        )
    }

    /// Σg² parts of the owned chunks. A tensor every tensor rank holds whole is counted from
    /// tensor rank 0 only.
    pub fn parts_sq(&self) -> Result<Vec<NormPart>> {
        let mut out = Vec::new();
        for r in &self.ranks {
            out.extend(
                r.optim
                    .parts_sq()?
                    .into_iter()
                    .filter(|p| self.tp_rank == 0 || split_of(&p.tensor) != Split::Whole),
            );
        }
        Ok(out)
    }

    /// AdamW on every replica's chunk.
    pub fn step(&self, h: &crate::cpu::AdamW, norm_sq: f32) -> Result<()> {
        self.ranks.iter().try_for_each(|r| r.optim.step(h, norm_sq))
    }

    /// Every replica gets every updated chunk of the parameters.
    pub fn all_gather(&self, ledger: &mut Ledger, link: &Link) -> Result<()> {
        let u = &self.grid.units[0];
        let ins: Vec<View> = (0..self.ranks.len())
            .map(|r| {
                let c = self.grid.chunk(0, r);
                self.ranks[r].params.slice(c.start, c.len())
            })
            .collect();
        let views: Vec<View> = self.ranks.iter().map(|r| r.params.clone()).collect();
        collective::all_gather_from(
            &self.gpus(),
            &ins,
            &u.bounds,
            &views,
            &Opts::default(),
            ledger,
            link,
        )
    }

    /// The group's full moment buffer (`v` when `second`) in the stage's local layout.
    pub fn moments(&self, second: bool) -> Result<Vec<f32>> {
        let mut flat = vec![0.0f32; self.grid.total];
        for (r, rank) in self.ranks.iter().enumerate() {
            let c = self.grid.chunk(0, r);
            let shard: Vec<f32> = rank.gpu.download(if second { &rank.v } else { &rank.m })?;
            flat[c.clone()].copy_from_slice(&shard[..c.len()]);
        }
        Ok(flat)
    }

    /// Loads the full moment buffer `local` (stage-local layout): each replica its chunk.
    pub fn set_moments(&self, second: bool, local: &[f32]) -> Result<()> {
        if local.len() != self.grid.total {
            return Err(Error::Config(format!(
                "moments of {} elements for a stage of {}",
                local.len(),
                self.grid.total
            )));
        }
        for (r, rank) in self.ranks.iter().enumerate() {
            let c = self.grid.chunk(0, r);
            let mut shard = vec![0.0f32; rank.m.len];
            shard[..c.len()].copy_from_slice(&local[c]);
            rank.gpu
                .upload(if second { &rank.v } else { &rank.m }, &shard)?;
        }
        Ok(())
    }
}
