//! A ZeRO group's model state in the one-device layout: assembled from the shards for a
//! checkpoint, and cut into shards again when resuming (under any layout).

use super::{Rank, Zero, ZeroStage};
use crate::error::Result;
use crate::gpu::View;
use crate::step::ModelState;

impl Zero {
    /// Parameters and AdamW moments in the one-device layout, assembled from the shards.
    pub fn state(&self) -> Result<ModelState> {
        let moments_sharded = self.stage != ZeroStage::Stage0;
        Ok(ModelState {
            params: self.params(0)?,
            m: self.assemble(|r| &r._moments.0, moments_sharded)?,
            v: self.assemble(|r| &r._moments.1, moments_sharded)?,
        })
    }

    /// Loads a state given in the one-device layout (from any layout): every rank takes its
    /// shards of the sharded buffers and the whole of the others.
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        st.check(self.grid.total)?;
        let params_sharded = self.stage == ZeroStage::Stage3;
        let moments_sharded = self.stage != ZeroStage::Stage0;
        for (q, r) in self.ranks.iter().enumerate() {
            for (view, src, sharded) in [
                (&r.params, &st.params, params_sharded),
                (&r._moments.0, &st.m, moments_sharded),
                (&r._moments.1, &st.v, moments_sharded),
            ] {
                if !sharded {
                    r.gpu.upload(view, src)?;
                    continue;
                }
                let mut host = vec![0.0f32; self.grid.shard_len(q)];
                for (u, unit) in self.grid.units.iter().enumerate() {
                    let c = self.grid.chunk(u, q);
                    let at = unit.storage[q];
                    host[at..at + c.len()].copy_from_slice(&src[c]);
                }
                r.gpu.upload(view, &host)?;
            }
        }
        Ok(())
    }

    /// One per-rank buffer in the full flat layout: rank 0's when not sharded, else every
    /// rank's chunks put back in place.
    fn assemble(&self, pick: impl Fn(&Rank) -> &View, sharded: bool) -> Result<Vec<f32>> {
        if !sharded {
            return self.ranks[0].gpu.download(pick(&self.ranks[0]));
        }
        let mut flat = vec![0.0f32; self.grid.total];
        for (q, rank) in self.ranks.iter().enumerate() {
            let shard: Vec<f32> = rank.gpu.download(pick(rank))?;
            for (u, unit) in self.grid.units.iter().enumerate() {
                let c = self.grid.chunk(u, q);
                let at = unit.storage[q];
                flat[c.clone()].copy_from_slice(&shard[at..at + c.len()]);
            }
        }
        Ok(flat)
    }
}
