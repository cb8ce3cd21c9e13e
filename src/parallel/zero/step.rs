//! One ZeRO step's schedule on the calling thread: per microbatch, every block's forward and
//! backward on every rank, with the stage's collectives between blocks (stage 3: gather block
//! i into slot i % 2 and prefetch i ± 1; last microbatch: reduce each bucket once its gradients
//! are final).

use std::time::Instant;

use super::{Zero, ZeroStage};
use crate::collective::{self, Ledger};
use crate::error::Result;
use crate::gpu::{Gpu, View};
use crate::parallel::chain::Chain;

/// The collectives of one step, over the ranks of a [`Zero`].
pub(super) struct Comm<'a> {
    pub(super) z: &'a Zero,
    pub(super) ledger: Ledger,
    pub(super) wall: f64,
}

impl Comm<'_> {
    /// The compute part of a step (see [`Zero::compute`]).
    pub(super) fn run(
        &mut self,
        batches: &[(Vec<u32>, Vec<u32>)],
        k: usize,
        st: ZeroStage,
        loss: &mut f64,
    ) -> Result<()> {
        let z = self.z;
        let work = if st >= ZeroStage::Stage2 {
            Some(z.work()?)
        } else {
            for r in &z.ranks {
                r.optim.zero_grads()?;
            }
            None
        };
        let chains: Vec<&Chain> = match &work {
            Some(w) => w.iter().map(|w| &w.chain).collect(),
            None => z.ranks.iter().filter_map(|r| r.chain.as_ref()).collect(),
        };
        let full_grads: Vec<View> = match &work {
            Some(w) => w.iter().map(|w| w.grads.clone()).collect(),
            None => z.ranks.iter().map(|r| r.grads.clone()).collect(),
        };
        let slots: Vec<Vec<View>> = match &work {
            Some(w) => w.iter().map(|w| w.slots.clone()).collect(),
            None => Vec::new(),
        };
        let nb = z.spans.len();
        let gather = st == ZeroStage::Stage3;
        let mut reduced = vec![false; z.grid.units.len()];
        for j in 0..k {
            for (r, c) in chains.iter().enumerate() {
                let (x, y) = &batches[r * k + j];
                z.ranks[r].gpu.upload(c.tokens(), x)?;
                z.ranks[r].gpu.upload(c.targets(), y)?;
            }
            if gather {
                self.gather(0, &slots)?;
            }
            for i in 0..nb {
                for (r, c) in chains.iter().enumerate() {
                    z.ranks[r].gpu.run(&c.forward[i])?;
                }
                if gather && i + 1 < nb {
                    self.gather(i + 1, &slots)?; // prefetch while block i computes
                }
            }
            for c in &chains {
                *loss += c.losses()?.iter().map(|&l| l as f64).sum::<f64>();
            }
            if gather {
                self.gather(nb - 1, &slots)?;
            }
            for i in (0..nb).rev() {
                for (r, c) in chains.iter().enumerate() {
                    z.ranks[r].gpu.run(&c.backward[i])?;
                }
                if j + 1 == k {
                    // buckets whose every gradient is final once block i is done
                    let from = z.spans[i].range.start;
                    for u in (0..reduced.len()).rev() {
                        if !reduced[u] && z.grid.units[u].range.start >= from {
                            self.reduce(u, &full_grads)?;
                            reduced[u] = true;
                        }
                    }
                }
                if gather && i > 0 {
                    self.gather(i - 1, &slots)?; // prefetch for the next backward
                }
            }
        }
        for r in &z.ranks {
            r.gpu.sync()?;
        }
        Ok(())
    }

    fn gpus(&self) -> Vec<Gpu> {
        self.z.ranks.iter().map(|r| r.gpu.clone()).collect()
    }

    /// Reduces unit `u` of the full gradients `full[r]`: all-reduce (stage 0), reduce-scatter in
    /// place (stage 1) or into the gradient shard (stages 2, 3).
    fn reduce(&mut self, u: usize, full: &[View]) -> Result<()> {
        let t = Instant::now();
        let z = self.z;
        let unit = &z.grid.units[u];
        let (a, n) = (unit.range.start, unit.range.len());
        let rel: Vec<usize> = unit.bounds.iter().map(|b| b - a).collect();
        let views: Vec<View> = full.iter().map(|f| f.slice(a, n)).collect();
        let (gpus, o, link) = (self.gpus(), &z.opts.collective, &z.opts.link);
        match z.stage {
            ZeroStage::Stage0 => {
                collective::all_reduce_in(&gpus, &views, &rel, o, &mut self.ledger, link)?
            }
            st => {
                let outs: Vec<View> = (0..z.degree())
                    .map(|r| {
                        let c = z.grid.chunk(u, r);
                        if st == ZeroStage::Stage1 {
                            full[r].slice(c.start, c.len())
                        } else {
                            z.ranks[r].grads.slice(unit.storage[r], c.len())
                        }
                    })
                    .collect();
                collective::reduce_scatter_to(
                    &gpus,
                    &views,
                    &rel,
                    &outs,
                    o,
                    &mut self.ledger,
                    link,
                )?
            }
        }
        self.wall += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Stages 1, 2: all-gathers unit `u` of the full parameters from each rank's updated chunk.
    pub(super) fn gather_params(&mut self, u: usize) -> Result<()> {
        let t = Instant::now();
        let z = self.z;
        let unit = &z.grid.units[u];
        let (a, n) = (unit.range.start, unit.range.len());
        let rel: Vec<usize> = unit.bounds.iter().map(|b| b - a).collect();
        let views: Vec<View> = z.ranks.iter().map(|r| r.params.slice(a, n)).collect();
        let ins: Vec<View> = (0..z.degree())
            .map(|r| {
                let c = z.grid.chunk(u, r);
                z.ranks[r].params.slice(c.start, c.len())
            })
            .collect();
        let (gpus, o, link) = (self.gpus(), &z.opts.collective, &z.opts.link);
        collective::all_gather_from(&gpus, &ins, &rel, &views, o, &mut self.ledger, link)?;
        self.wall += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Stage 3: gathers block `i`'s parameters from the shards into slot `i % 2` of each rank.
    fn gather(&mut self, i: usize, slots: &[Vec<View>]) -> Result<()> {
        let t = Instant::now();
        let z = self.z;
        let span = &z.spans[i];
        let gpus = self.gpus();
        for part in z.grid.parts(span.range.clone()) {
            let ins: Vec<View> = (0..z.degree())
                .map(|r| {
                    let len = part.bounds[r + 1] - part.bounds[r];
                    z.ranks[r].params.slice(part.storage[r], len)
                })
                .collect();
            let outs: Vec<View> = slots
                .iter()
                .map(|s| s[i % 2].slice(part.sub.start - span.range.start, part.sub.len()))
                .collect();
            let (o, link) = (&z.opts.collective, &z.opts.link);
            collective::all_gather_from(
                &gpus,
                &ins,
                &part.bounds,
                &outs,
                o,
                &mut self.ledger,
                link,
            )?;
        }
        self.wall += t.elapsed().as_secs_f64();
        Ok(())
    }
}
