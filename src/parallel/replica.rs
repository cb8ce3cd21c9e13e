//! One data-parallel replica's work in a step, and the communication loop that reduces the
//! gradient buckets as replicas announce them.

use std::time::Instant;

use crate::collective::{self, Algo, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::Op;
use crate::link::Link;
use crate::model::gpu_model::GpuModel;
use crate::optim::Optimizer;
use crate::parallel::accumulate::TreeAccumulator;
use crate::parallel::bucket::Bucket;

/// What one replica's thread measured.
pub(super) struct ReplicaRun {
    pub(super) loss: f64,
    /// Wall clock end of its compute, from the step start.
    pub(super) end_wall: f64,
    /// Device clock: its kernel time, and when each bucket's gradients were final.
    pub(super) device: f64,
    pub(super) ready: Vec<f64>,
}

pub(super) struct Replica {
    pub(super) gpu: Gpu,
    pub(super) model: GpuModel,
    pub(super) optim: Optimizer,
    pub(super) step_ops: Vec<Op>,
    pub(super) tree: Option<TreeAccumulator>,
}

impl Replica {
    /// Zero grads, then forward + backward of each microbatch; returns the summed token loss.
    /// Zero grads, then forward + backward of each microbatch. The last backward runs block by
    /// block, timing each and (with `ready`) announcing each bucket as soon as it is final.
    pub(super) fn run(
        &mut self,
        share: &[(Vec<u32>, Vec<u32>)],
        buckets: &[Bucket],
        ready_tx: Option<&crossbeam_channel::Sender<usize>>,
        t0: Instant,
    ) -> Result<ReplicaRun> {
        self.optim.zero_grads()?;
        let (mut loss, mut device) = (0.0, 0.0);
        let mut ready = vec![0.0; buckets.len()];
        for (i, (x, y)) in share.iter().enumerate() {
            if let Some(t) = &self.tree {
                self.gpu.run(std::slice::from_ref(&t.zero))?;
            }
            self.gpu.upload(&self.model.tokens, x)?;
            self.gpu.upload(&self.model.targets, y)?;
            let last = i + 1 == share.len() && self.tree.is_none();
            if !last {
                device += self.gpu.run_timed(&self.step_ops)?.as_secs_f64();
            } else {
                device += self.gpu.run_timed(&self.model.forward)?.as_secs_f64();
                // run backward up to each point where a group of gradients is final
                let mut from = 0;
                for (point, (end, _)) in self.model.grad_ready.iter().enumerate() {
                    device += self
                        .gpu
                        .run_timed(&self.model.backward[from..*end])?
                        .as_secs_f64();
                    from = *end;
                    for (b, bucket) in buckets.iter().enumerate() {
                        if bucket.ready_point == point {
                            ready[b] = device;
                            if let Some(tx) = ready_tx {
                                let _ = tx.send(b);
                            }
                        }
                    }
                }
                if from < self.model.backward.len() {
                    device += self
                        .gpu
                        .run_timed(&self.model.backward[from..])?
                        .as_secs_f64();
                }
            }
            loss += self.model.losses()?.iter().map(|&l| l as f64).sum::<f64>();
            if let Some(t) = &mut self.tree {
                t.push()?;
            }
        }
        if let Some(t) = &mut self.tree {
            // the tree's total exists only after the last microbatch: every bucket is ready now
            t.finish()?;
            self.gpu.sync()?;
            for (b, r) in ready.iter_mut().enumerate() {
                *r = device;
                if let Some(tx) = ready_tx {
                    let _ = tx.send(b);
                }
            }
        }
        self.gpu.sync()?;
        Ok(ReplicaRun {
            loss,
            end_wall: t0.elapsed().as_secs_f64(),
            device,
            ready,
        })
    }
}

/// Reduces buckets in order, each once all `d` replicas announced it; returns each bucket's
/// (start, end) on the wall clock. Ends early with an error if a replica stops announcing.
#[allow(clippy::too_many_arguments)]
pub(super) fn comm_loop(
    rx: &crossbeam_channel::Receiver<usize>,
    d: usize,
    gpus: &[Gpu],
    views: &[Vec<View>],
    algo: Algo,
    opts: &Opts,
    ledger: &mut Ledger,
    link: &Link,
    t0: Instant,
) -> Result<Vec<(f64, f64)>> {
    let nb = views.len();
    let mut count = vec![0usize; nb];
    let mut out = Vec::with_capacity(nb);
    while out.len() < nb {
        if count[out.len()] < d {
            let b = rx.recv().map_err(|_| {
                Error::Device(format!(
                    "a replica stopped before bucket {} was ready",
                    out.len()
                ))
            })?;
            count[b] += 1;
            continue;
        }
        let b = out.len();
        let start = t0.elapsed().as_secs_f64();
        collective::all_reduce(gpus, &views[b], algo, opts, ledger, link)?;
        out.push((start, t0.elapsed().as_secs_f64()));
    }
    Ok(out)
}
