//! The model state of a runtime in the one-device layout: gathered from every stage, tensor
//! rank and (ZeRO-1) moment shard for checkpoints and checksums, and scattered back from any
//! layout's state (resharding through the flat one-device view).
//!
//! ```text
//! one-device flat ─cut by stage─▶ stage-local flat ─tp::shard─▶ rank-local flat (params, m, v)
//!                                                  ─grid chunks─▶ ZeRO-1 moment shards
//! ```

use super::chunk::Chunk;
use super::exec::Runtime;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::mesh::Coords;
use crate::parallel::tensor as tp;
use crate::step::{checksum, ModelState};

/// Which per-parameter buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Params,
    M,
    V,
}

impl Runtime {
    /// The chunk of model stage `stage` on (replica, tensor rank), with its device's GPU.
    fn chunk_at(&self, replica: usize, stage: usize, tp_rank: usize) -> (&Gpu, &Chunk) {
        let (pos, local) = self.schedule.place(stage);
        let d = self.mesh.device(Coords {
            replica,
            stage: pos,
            tp_rank,
        });
        let w = &self.workers[d];
        (&w.gpu, &w.chunks[local])
    }

    /// `which` of (stage, tensor rank) in the stage's rank-local layout: replica 0's buffer,
    /// or the shards of every replica put together (ZeRO moments, ZeRO-3 parameters).
    fn local(&self, stage: usize, tp_rank: usize, which: Which) -> Result<Vec<f32>> {
        let (gpu, c) = self.chunk_at(0, stage, tp_rank);
        if shard_of(c, which).is_none() {
            return gpu.download(full_of(c, which));
        }
        let mut flat = vec![0.0f32; c.grid.total];
        for r in 0..self.mesh.dp {
            let (gpu, c) = self.chunk_at(r, stage, tp_rank);
            let view = shard_of(c, which)
                .ok_or_else(|| Error::Config("a ZeRO rank holds no shard".into()))?;
            let shard: Vec<f32> = gpu.download(view)?;
            for (u, unit) in c.grid.units.iter().enumerate() {
                let ch = c.grid.chunk(u, r);
                let at = unit.storage[r];
                flat[ch.clone()].copy_from_slice(&shard[at..at + ch.len()]);
            }
        }
        Ok(flat)
    }

    /// Loads `src` (stage-local layout of one tensor rank) into `which` of that (stage, rank)
    /// on every replica.
    fn put_local(&self, stage: usize, tp_rank: usize, which: Which, src: &[f32]) -> Result<()> {
        for r in 0..self.mesh.dp {
            let (gpu, c) = self.chunk_at(r, stage, tp_rank);
            match shard_of(c, which) {
                None => gpu.upload(full_of(c, which), src)?,
                Some(view) => {
                    let mut shard = vec![0.0f32; view.len];
                    for (u, unit) in c.grid.units.iter().enumerate() {
                        let ch = c.grid.chunk(u, r);
                        let at = unit.storage[r];
                        shard[at..at + ch.len()].copy_from_slice(&src[ch]);
                    }
                    gpu.upload(view, &shard)?;
                }
            }
        }
        Ok(())
    }

    /// One buffer in the one-device layout.
    fn gather(&self, which: Which) -> Result<Vec<f32>> {
        let model = &self.cfg.model;
        let full = model.layout(&model.blocks());
        let mut flat = vec![0.0f32; full.total];
        for (s, blocks) in self.stages.iter().enumerate() {
            let ranks = (0..self.mesh.tp)
                .map(|k| self.local(s, k, which))
                .collect::<Result<Vec<_>>>()?;
            let part = tp::gather(model, blocks, &ranks)?;
            for t in &model.layout(blocks).tensors {
                full.slice_mut(&mut flat, &t.name)?
                    .copy_from_slice(&part[t.offset..t.offset + t.len]);
            }
        }
        Ok(flat)
    }

    /// The inverse of [`Runtime::gather`].
    fn scatter(&self, which: Which, src: &[f32]) -> Result<()> {
        let model = &self.cfg.model;
        let full = model.layout(&model.blocks());
        for (s, blocks) in self.stages.iter().enumerate() {
            let layout = model.layout(blocks);
            let mut part = vec![0.0f32; layout.total];
            for t in &layout.tensors {
                part[t.offset..t.offset + t.len].copy_from_slice(full.slice(src, &t.name)?);
            }
            for (k, shard) in tp::shard(model, blocks, &part, self.mesh.tp)?
                .iter()
                .enumerate()
            {
                self.put_local(s, k, which, shard)?;
            }
        }
        Ok(())
    }

    /// Parameters and AdamW moments in the one-device layout (every replica holds the same
    /// parameters; ZeRO-1 moments are assembled from their shards).
    pub fn state(&self) -> Result<ModelState> {
        Ok(ModelState {
            params: self.gather(Which::Params)?,
            m: self.gather(Which::M)?,
            v: self.gather(Which::V)?,
        })
    }

    /// Loads a state given in the one-device layout (from any layout) into every replica,
    /// stage, tensor rank and shard.
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        let model = &self.cfg.model;
        st.check(model.layout(&model.blocks()).total)?;
        self.scatter(Which::Params, &st.params)?;
        self.scatter(Which::M, &st.m)?;
        self.scatter(Which::V, &st.v)
    }

    /// The full model's flat parameters (one-device layout).
    pub fn params(&self) -> Result<Vec<f32>> {
        self.gather(Which::Params)
    }

    /// Whether every replica holds replica 0's parameters bit for bit (ZeRO-3 holds one
    /// sharded copy: always true).
    pub fn replicas_agree(&self) -> Result<bool> {
        for (s, _) in self.stages.iter().enumerate() {
            for k in 0..self.mesh.tp {
                let (gpu, c) = self.chunk_at(0, s, k);
                if c.params_sharded {
                    continue;
                }
                let p0: Vec<f32> = gpu.download(&c.buffers.params)?;
                for r in 1..self.mesh.dp {
                    let (gpu, c) = self.chunk_at(r, s, k);
                    let p: Vec<f32> = gpu.download(&c.buffers.params)?;
                    if p.iter().zip(&p0).any(|(a, b)| a.to_bits() != b.to_bits()) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    /// SHA-256 of the parameters in the one-device layout.
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.params()?))
    }
}

/// The rank's shard of `which`, when it is sharded.
fn shard_of(c: &Chunk, which: Which) -> Option<&View> {
    match which {
        Which::Params => c.params_sharded.then_some(&c.buffers.params),
        Which::M => c.moments.as_ref().map(|m| &m.0),
        Which::V => c.moments.as_ref().map(|m| &m.1),
    }
}

/// The full (unsharded) buffer of `which`.
fn full_of(c: &Chunk, which: Which) -> &View {
    match which {
        Which::Params => &c.buffers.params,
        Which::M => &c.buffers.m,
        Which::V => &c.buffers.v,
    }
}
