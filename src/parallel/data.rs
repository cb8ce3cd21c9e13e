//! Data parallelism: d replicas of the whole model, one per device, each taking its share of the
//! global batch; parameter gradients summed across replicas by a host-staged all-reduce (ring or
//! naive), bucket by bucket; then the same AdamW step on every replica.
//!
//! ```text
//! global batch: [mb0 mb1 | mb2 mb3 | mb4 mb5 | mb6 mb7]      d = 4 replicas × k = 2 microbatches
//!                replica 0  replica 1  replica 2  replica 3   (contiguous shares, in order)
//! each replica: zero grads → k × (forward, backward: grads +=) → all-reduce(grads, Σ over ranks)
//!               → per-tensor Σg² (identical on every rank) → clip + AdamW
//! ```
//!
//! The loss of every token is weighted 1/(global tokens), so the summed gradient is the mean
//! gradient of the global batch, as on one device. Summation order across replicas is fixed by
//! the algorithm (never by arrival), so a layout gives the same bits run after run; it differs
//! from one device's order, so DP matches one device within float tolerance, not in bits.

use std::ops::Range;
use std::time::Instant;

use crate::collective::{self, Algo, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::Op;
use crate::model::gpu_model::GpuModel;
use crate::optim::{global_norm_sq, Optimizer};
use crate::parallel::accumulate::{Accumulation, TreeAccumulator};
use crate::pipeline::simulate::Link;
use crate::train::{checksum, StepStats, TrainConfig};

/// Default bucket size (PyTorch DDP's 25 MB).
pub const BUCKET_BYTES: usize = 25 << 20;

/// Knobs of data-parallel training.
#[derive(Clone, Debug)]
pub struct DpOptions {
    pub algo: Algo,
    /// Link model for the device-clock cost of each transfer.
    pub link: Link,
    /// Largest gradient bucket, in bytes (buckets split at tensor boundaries).
    pub bucket_bytes: usize,
    /// Options of every all-reduce (test hooks: jitter, injected faults).
    pub collective: Opts,
    /// `PairwiseTree` (with `Algo::Tree` and power-of-two d and accumulation) makes DP = 1, 2,
    /// 4 … bit-identical for one global batch; see [`super::accumulate`].
    pub accumulation: Accumulation,
}

impl Default for DpOptions {
    fn default() -> Self {
        DpOptions {
            algo: Algo::Ring,
            link: Link::nvlink(),
            bucket_bytes: BUCKET_BYTES,
            collective: Opts::default(),
            accumulation: Accumulation::Sequential,
        }
    }
}

/// What one data-parallel step did.
#[derive(Clone, Debug)]
pub struct DpStepReport {
    pub stats: StepStats,
    /// Wall time of the replicas' forward/backward (the slowest replica), seconds.
    pub compute_wall: f64,
    /// Wall time of the gradient all-reduce, seconds (not overlapped: all of it is exposed).
    pub comm_wall: f64,
    /// Bytes each rank sent between ranks during the step's all-reduce.
    pub bytes_per_rank: Vec<u64>,
    /// The all-reduce's time on the link model (device clock), seconds.
    pub comm_link: f64,
    pub step_wall: f64,
}

struct Replica {
    gpu: Gpu,
    model: GpuModel,
    optim: Optimizer,
    step_ops: Vec<Op>,
    tree: Option<TreeAccumulator>,
}

/// d replicas trained together.
pub struct DataParallel {
    pub cfg: TrainConfig,
    pub opts: DpOptions,
    replicas: Vec<Replica>,
    /// Contiguous ranges of the flat gradient buffer, reduced one collective each.
    pub buckets: Vec<Range<usize>>,
    canonical: Vec<String>,
    /// Every transfer of every step.
    pub ledger: Ledger,
}

impl DataParallel {
    /// One replica per device in `gpus`; `cfg.grad_accum` is the microbatches *per replica*.
    pub fn new(gpus: &[Gpu], cfg: TrainConfig, opts: DpOptions) -> Result<DataParallel> {
        cfg.validate()?;
        if gpus.is_empty() {
            return Err(Error::Config(
                "data parallelism needs at least one device (d = 0)".into(),
            ));
        }
        let d = gpus.len();
        if opts.accumulation == Accumulation::PairwiseTree
            && (opts.algo != Algo::Tree || !d.is_power_of_two())
        {
            return Err(Error::Config(format!(
                "layout-invariant accumulation needs the tree all-reduce and a power-of-two number of replicas (got {} with d = {d})",
                opts.algo.name()
            )));
        }
        let dloss = 1.0 / (cfg.tokens_per_step() * d) as f32;
        let init = cfg
            .model
            .init(&cfg.model.layout(&cfg.model.blocks()), cfg.seed);
        let replicas = gpus
            .iter()
            .map(|g| {
                let model = GpuModel::new(g, cfg.model, &cfg.model.blocks(), cfg.micro, dloss)?;
                model.set_params(&init)?;
                let optim = Optimizer::new(g, &model.buffers)?;
                let step_ops = model
                    .forward
                    .iter()
                    .chain(&model.backward)
                    .cloned()
                    .collect();
                let tree = match opts.accumulation {
                    Accumulation::Sequential => None,
                    Accumulation::PairwiseTree => Some(TreeAccumulator::new(
                        g,
                        &model.buffers.grads,
                        cfg.grad_accum,
                    )?),
                };
                Ok(Replica {
                    gpu: g.clone(),
                    model,
                    optim,
                    step_ops,
                    tree,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let buckets = buckets(&replicas[0].model, opts.bucket_bytes);
        Ok(DataParallel {
            canonical: cfg.model.canonical_names(),
            cfg,
            opts,
            replicas,
            buckets,
            ledger: Ledger::new(),
        })
    }

    pub fn degree(&self) -> usize {
        self.replicas.len()
    }

    /// Splits a global batch of `global` sequences into per-replica microbatches of `micro_b`:
    /// checks that d × micro_b divides it and returns the microbatches per replica.
    pub fn accumulation(global: usize, d: usize, micro_b: usize) -> Result<usize> {
        if d == 0 {
            return Err(Error::Config(
                "data-parallel degree d must be at least 1".into(),
            ));
        }
        if micro_b == 0 || global == 0 || !global.is_multiple_of(d * micro_b) {
            return Err(Error::Config(format!(
                "the global batch of {global} sequences is not divisible by d × microbatch = {d} × {micro_b}"
            )));
        }
        Ok(global / (d * micro_b))
    }

    /// One step over the global batch: `d × grad_accum` microbatches, replica r taking the
    /// r-th contiguous share.
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<DpStepReport> {
        let (d, k) = (self.degree(), self.cfg.grad_accum);
        if batches.len() != d * k {
            return Err(Error::Config(format!(
                "a step needs d × accumulation = {} microbatches, got {}",
                d * k,
                batches.len()
            )));
        }
        let t0 = Instant::now();
        let results: Vec<Result<f64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .replicas
                .iter_mut()
                .enumerate()
                .map(|(r, rep)| {
                    let share = &batches[r * k..(r + 1) * k];
                    scope.spawn(move || rep.run(share).map_err(|e| worker(r, s, e)))
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| {
                    h.join().unwrap_or_else(|_| {
                        Err(worker(
                            r,
                            s,
                            Error::Device("replica thread panicked".into()),
                        ))
                    })
                })
                .collect()
        });
        let mut loss = 0.0;
        for r in results {
            loss += r?;
        }
        let compute_wall = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let gpus: Vec<Gpu> = self.replicas.iter().map(|r| r.gpu.clone()).collect();
        self.ledger.step = s;
        for b in &self.buckets {
            let views: Vec<View> = self
                .replicas
                .iter()
                .map(|r| r.model.buffers.grads.slice(b.start, b.len()))
                .collect();
            collective::all_reduce(
                &gpus,
                &views,
                self.opts.algo,
                &self.opts.collective,
                &mut self.ledger,
                &self.opts.link,
            )?;
        }
        let comm_wall = t1.elapsed().as_secs_f64();
        // after the all-reduce every replica holds the same gradients: rank 0's norm is everyone's
        let norm_sq = global_norm_sq(&self.replicas[0].optim.tensor_sq()?, &self.canonical);
        let h = self.cfg.adam_at(s);
        for r in &self.replicas {
            r.optim.step(&h, norm_sq)?;
        }
        let step_ledger = self.ledger.for_step(s);
        Ok(DpStepReport {
            stats: StepStats {
                loss: (loss / (self.cfg.tokens_per_step() * d) as f64) as f32,
                grad_norm: norm_sq.sqrt(),
                lr: h.lr,
            },
            compute_wall,
            comm_wall,
            bytes_per_rank: step_ledger.sent_by_rank(d),
            comm_link: step_ledger.link_clock(),
            step_wall: t0.elapsed().as_secs_f64(),
        })
    }

    /// Replica `r`'s flat parameters.
    pub fn params(&self, r: usize) -> Result<Vec<f32>> {
        self.replicas[r].model.params()
    }

    /// SHA-256 of replica 0's parameters (every replica holds the same bits: see
    /// [`DataParallel::replicas_agree`]).
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.params(0)?))
    }

    /// True when every replica's parameters equal replica 0's bit for bit.
    pub fn replicas_agree(&self) -> Result<bool> {
        let p0 = self.params(0)?;
        for r in 1..self.degree() {
            if self
                .params(r)?
                .iter()
                .zip(&p0)
                .any(|(a, b)| a.to_bits() != b.to_bits())
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl Replica {
    /// Zero grads, then forward + backward of each microbatch; returns the summed token loss.
    fn run(&mut self, share: &[(Vec<u32>, Vec<u32>)]) -> Result<f64> {
        self.optim.zero_grads()?;
        let mut loss = 0.0;
        for (x, y) in share {
            if let Some(t) = &self.tree {
                self.gpu.run(std::slice::from_ref(&t.zero))?;
            }
            self.gpu.upload(&self.model.tokens, x)?;
            self.gpu.upload(&self.model.targets, y)?;
            self.gpu.run(&self.step_ops)?;
            loss += self.model.losses()?.iter().map(|&l| l as f64).sum::<f64>();
            if let Some(t) = &mut self.tree {
                t.push()?;
            }
        }
        if let Some(t) = &mut self.tree {
            t.finish()?;
        }
        self.gpu.sync()?;
        Ok(loss)
    }
}

fn worker(rank: usize, step: usize, e: Error) -> Error {
    match e {
        e @ Error::Worker { .. } => e,
        e => Error::Worker {
            device: rank,
            stage: 0,
            action: "forward/backward".into(),
            step,
            msg: e.to_string(),
        },
    }
}

/// Contiguous ranges of the flat buffer, split at tensor boundaries, each at most `bytes`
/// (a single larger tensor is a bucket of its own), covering `[0, total)`.
fn buckets(model: &GpuModel, bytes: usize) -> Vec<Range<usize>> {
    let layout = &model.buffers.layout;
    let limit = (bytes / 4).max(1);
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for (i, t) in layout.tensors.iter().enumerate() {
        let end = layout.tensors.get(i + 1).map_or(layout.total, |n| n.offset);
        if end - start > limit && t.offset > start {
            out.push(start..t.offset);
            start = t.offset;
        }
    }
    if start < layout.total {
        out.push(start..layout.total);
    }
    out
}
