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

use std::time::Instant;

use crate::collective::{Algo, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::link::Link;
use crate::memory::Usage;
use crate::model::{fit, gpu_model::GpuModel};
use crate::optim::{global_norm_sq, Optimizer};
use crate::parallel::accumulate::{Accumulation, TreeAccumulator};
use crate::parallel::bucket::{buckets, device_schedule, Bucket, BucketTiming};
use crate::parallel::replica::{comm_loop, Replica, ReplicaRun};
use crate::step::{checksum, ModelState, StepStats, TrainConfig};

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
    /// Start each bucket's all-reduce as soon as its backward is done, on a communication
    /// thread, while backward continues (off: all-reduce after the whole backward).
    pub overlap: bool,
    /// Run the replicas' compute one at a time, so each kernel time is its own on a shared
    /// adapter (clean device clock; the wall clock then shows no parallelism).
    pub serial: bool,
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
            overlap: true,
            serial: false,
        }
    }
}

/// What one data-parallel step did, on both clocks (seconds).
#[derive(Clone, Debug)]
pub struct DpStepReport {
    pub stats: StepStats,
    /// Wall clock: end of the slowest replica's forward/backward.
    pub compute_wall: f64,
    /// Wall clock: time spent in all-reduces (summed over buckets).
    pub comm_wall: f64,
    /// Wall clock: comm that ran past the end of compute (not hidden by backward).
    pub exposed_wall: f64,
    /// Device clock: the slowest replica's kernel time.
    pub compute_device: f64,
    /// Device clock: the all-reduces on the link model (summed over buckets).
    pub comm_device: f64,
    /// Device clock: comm past the end of compute.
    pub exposed_device: f64,
    /// Bytes each rank sent between ranks during the step's all-reduces.
    pub bytes_per_rank: Vec<u64>,
    pub buckets: Vec<BucketTiming>,
    pub step_wall: f64,
    /// Per device: bytes by category now, and each category's peak during the step.
    pub memory: Vec<Usage>,
}

/// d replicas trained together.
pub struct DataParallel {
    pub cfg: TrainConfig,
    pub opts: DpOptions,
    replicas: Vec<Replica>,
    /// Gradient buckets in backward order, reduced one collective each.
    pub buckets: Vec<Bucket>,
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
        // before the host copy of the weights and any buffer: every replica must fit
        for g in gpus {
            fit::check_model(&cfg.model, cfg.micro, 1, &g.limits)?;
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
        let m0 = &replicas[0].model;
        let buckets = buckets(&m0.buffers.layout, &m0.grad_ready, opts.bucket_bytes);
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
        for r in &self.replicas {
            r.gpu.reset_memory_peaks();
        }
        let nb = self.buckets.len();
        let gpus: Vec<Gpu> = self.replicas.iter().map(|r| r.gpu.clone()).collect();
        let views: Vec<Vec<View>> = self
            .buckets
            .iter()
            .map(|b| {
                self.replicas
                    .iter()
                    .map(|r| r.model.buffers.grads.slice(b.range.start, b.range.len()))
                    .collect()
            })
            .collect();
        let (tx, rx) = crossbeam_channel::unbounded::<usize>();
        let mut ledger = std::mem::take(&mut self.ledger);
        ledger.step = s;
        let (overlap, algo, opts, link) = (
            self.opts.overlap,
            self.opts.algo,
            self.opts.collective,
            self.opts.link,
        );
        let buckets = &self.buckets;
        let (serial, lock) = (self.opts.serial, std::sync::Mutex::new(()));
        let (runs, comm) = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .replicas
                .iter_mut()
                .enumerate()
                .map(|(r, rep)| {
                    let share = &batches[r * k..(r + 1) * k];
                    let tx = tx.clone();
                    let lock = &lock;
                    scope.spawn(move || {
                        let _one_at_a_time =
                            serial.then(|| lock.lock().unwrap_or_else(|e| e.into_inner()));
                        rep.run(share, buckets, overlap.then_some(&tx), t0)
                            .map_err(|e| worker(r, s, e))
                    })
                })
                .collect();
            drop(tx);
            // overlap: the communication thread reduces bucket b once every replica has it;
            // otherwise the same loop runs after every replica has finished
            let comm = if overlap {
                let h = scope.spawn(|| {
                    comm_loop(&rx, d, &gpus, &views, algo, &opts, &mut ledger, &link, t0)
                });
                Some(h)
            } else {
                None
            };
            let runs: Vec<Result<ReplicaRun>> = handles
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
                .collect();
            let comm = comm.map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Device("communication thread panicked".into())))
            });
            (runs, comm)
        });
        let comm = match comm {
            Some(c) => c,
            None if runs.iter().all(|r| r.is_ok()) => {
                let (all_tx, all_rx) = crossbeam_channel::unbounded();
                for b in 0..nb {
                    for _ in 0..d {
                        let _ = all_tx.send(b);
                    }
                }
                drop(all_tx);
                comm_loop(
                    &all_rx,
                    d,
                    &gpus,
                    &views,
                    algo,
                    &opts,
                    &mut ledger,
                    &link,
                    t0,
                )
            }
            None => Ok(Vec::new()),
        };
        self.ledger = ledger;
        let runs = runs.into_iter().collect::<Result<Vec<_>>>()?;
        let walls = comm?;
        let loss: f64 = runs.iter().map(|r| r.loss).sum();
        let compute_wall = runs.iter().map(|r| r.end_wall).fold(0.0, f64::max);
        let compute_device = runs.iter().map(|r| r.device).fold(0.0, f64::max);
        // per-bucket link cost: the ledger's clock over that collective call's entries
        let step_ledger = self.ledger.for_step(s);
        let calls: Vec<usize> = {
            let mut c: Vec<usize> = step_ledger.entries.iter().map(|e| e.call).collect();
            c.sort_unstable();
            c.dedup();
            c
        };
        let link_cost: Vec<f64> = calls
            .iter()
            .map(|&c| {
                Ledger {
                    entries: step_ledger
                        .entries
                        .iter()
                        .filter(|e| e.call == c)
                        .cloned()
                        .collect(),
                    ..Ledger::new()
                }
                .link_clock()
            })
            .collect();
        let mut timing: Vec<BucketTiming> = (0..nb)
            .map(|b| BucketTiming {
                bytes: 4 * self.buckets[b].range.len() as u64,
                ready_device: runs.iter().map(|r| r.ready[b]).fold(0.0, f64::max),
                start_wall: walls.get(b).map_or(0.0, |w| w.0),
                end_wall: walls.get(b).map_or(0.0, |w| w.1),
                ..Default::default()
            })
            .collect();
        let comm_end_device = device_schedule(&mut timing, &link_cost, compute_device, overlap);
        let comm_end_wall = walls.iter().map(|w| w.1).fold(0.0, f64::max);
        // after the all-reduce every replica holds the same gradients: rank 0's norm is everyone's
        let parts = self.replicas[0].optim.tensor_sq()?;
        let mean_loss = (loss / (self.cfg.tokens_per_step() * d) as f64) as f32;
        check_finite(mean_loss, &parts, s)?;
        let norm_sq = global_norm_sq(&parts, &self.canonical);
        let h = self.cfg.adam_at(s);
        for r in &self.replicas {
            r.optim.step(&h, norm_sq)?;
        }
        Ok(DpStepReport {
            stats: StepStats {
                loss: mean_loss,
                grad_norm: norm_sq.sqrt(),
                lr: h.lr,
            },
            compute_wall,
            comm_wall: walls.iter().map(|w| w.1 - w.0).sum(),
            exposed_wall: (comm_end_wall - compute_wall).max(0.0),
            compute_device,
            comm_device: link_cost.iter().sum(),
            exposed_device: (comm_end_device - compute_device).max(0.0),
            bytes_per_rank: step_ledger.sent_by_rank(d),
            buckets: timing,
            step_wall: t0.elapsed().as_secs_f64(),
            memory: self.replicas.iter().map(|r| r.gpu.memory()).collect(),
        })
    }

    /// Parameters and AdamW moments (replica 0's; every replica holds the same bits).
    pub fn state(&self) -> Result<ModelState> {
        let (g, b) = (&self.replicas[0].gpu, &self.replicas[0].model.buffers);
        Ok(ModelState {
            params: g.download(&b.params)?,
            m: g.download(&b.m)?,
            v: g.download(&b.v)?,
        })
    }

    /// Loads parameters and AdamW moments (one-device layout, from any layout) into every
    /// replica.
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        for r in &self.replicas {
            let b = &r.model.buffers;
            st.check(b.layout.total)?;
            r.gpu.upload(&b.params, &st.params)?;
            r.gpu.upload(&b.m, &st.m)?;
            r.gpu.upload(&b.v, &st.v)?;
        }
        Ok(())
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

/// Stops the step before AdamW when the loss or a (reduced) gradient is not finite.
fn check_finite(loss: f32, parts: &[(String, f32)], step: usize) -> Result<()> {
    let bad = if !loss.is_finite() {
        Some(("loss", format!("the loss is {loss}")))
    } else {
        parts.iter().find(|(_, v)| !v.is_finite()).map(|(n, v)| {
            (
                "gradient check",
                format!("the all-reduced gradient of {n} is not finite (Σg² = {v})"),
            )
        })
    };
    match bad {
        Some((action, what)) => Err(Error::Worker {
            device: 0,
            stage: 0,
            action: action.into(),
            step,
            msg: format!("{what}; stopping before the optimizer step"),
        }),
        None => Ok(()),
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
