//! One entry point for every layout: a [`Mesh`] (dp × tp × pp, schedule, microbatches,
//! chunks) placed on devices and trained step by step, with the per-axis costs of each step
//! (pipeline bubble, data- and tensor-parallel communication) and the model state in the
//! one-device layout for checkpoints, whatever the layout.
//!
//! ```text
//! Engine::new(gpus, cfg, mesh) ─ mesh.validate (before any device work)
//!   └─ DpPipeline: dp replicas × (pp stages of tp-rank groups) on devices (r·pp + s)·tp + k
//! step(batches = dp × m microbatches) ─▶ every replica runs its schedule on its share,
//!   checks loss and gradients are finite ─▶ all-reduce per (stage, tp rank) ─▶ AdamW
//! ```
//!
//! Plain data parallelism (dp > 1, tp = pp = 1, no ZeRO) runs on [`DataParallel`]: gradient
//! buckets are all-reduced on a communication thread while backward continues.
//! With a ZeRO stage and tp = pp = 1 the steps run on a [`Zero`] group instead (stages 1–3):
//! the same batches, the same state in the one-device layout, sharded as the stage says. With
//! tensor or pipeline stages, ZeRO-1 shards each stage's data-parallel group
//! ([`crate::parallel::zero1`]).
//!
//! One device is the degenerate layout (dp = tp = pp = 1): one pipeline stage, one rank, the
//! same bits as [`crate::train::Trainer`].

use crate::collective::Ledger;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::link::Link;
use crate::memory::Usage;
use crate::mesh::{Coords, Mesh};
use crate::model::Block;
use crate::parallel::data::{DataParallel, DpOptions};
use crate::parallel::hybrid::DpPipeline;
use crate::parallel::zero::Zero;
use crate::pipeline::executor::{Fault, Options};
use crate::pipeline::partition::Balance;
use crate::pipeline::timeline::summarize;
use crate::pipeline::Schedule;
use crate::step::{ModelState, StepStats, TrainConfig};

/// Knobs of an engine that do not change its result.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Link model of the data-parallel all-reduce and of pipeline sends.
    pub link: Link,
    /// Link model of the tensor-parallel all-reduces.
    pub tp_link: Link,
    /// One device at a time (clean device-clock times on virtual devices).
    pub serial: bool,
    /// Test hook: an injected fault (see [`Fault`]); `device` is the schedule device.
    pub fault: Option<Fault>,
    /// Longest a pipeline stage waits for a neighbour.
    pub recv_timeout: std::time::Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            link: Link::nvlink(),
            tp_link: Link::nvlink(),
            serial: false,
            fault: None,
            recv_timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// Where one device's work sits.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Placement {
    pub device: usize,
    pub adapter: String,
    pub coords: Coords,
    /// The blocks of its stage ("emb h0 h1").
    pub blocks: String,
}

/// What one step cost, per axis.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepCosts {
    pub stats: StepStats,
    /// Pipeline bubble of replica 0 on the device clock (idle share of the busiest device);
    /// `None` without pipeline parallelism.
    pub bubble: Option<f64>,
    /// Analytic bubble of the schedule.
    pub bubble_theory: Option<f64>,
    /// Device-clock seconds of replica 0's step (kernels + tensor-parallel comm + sends; plain
    /// DP: compute + exposed comm); 0 where not measured (ZeRO groups).
    pub device_step: f64,
    /// Data-parallel all-reduce: bytes the busiest rank sent, and link-model seconds.
    pub dp_bytes: u64,
    pub dp_comm: f64,
    /// Tensor-parallel all-reduces of replica 0's groups: bytes the busiest rank sent, and
    /// link-model seconds summed over the groups.
    pub tp_bytes: u64,
    pub tp_comm: f64,
    /// Wall seconds of the step.
    pub wall: f64,
    /// Per device: bytes held now and the peak of each memory-ledger category so far.
    pub memory: Vec<Usage>,
}

/// What runs the steps: replicas of tensor-parallel pipelines, plain data-parallel replicas
/// (gradient buckets all-reduced while backward runs), or a ZeRO group.
enum Inner {
    Pipe(DpPipeline),
    Data(Box<DataParallel>),
    Zero(Box<Zero>),
}

/// A model trained under one layout.
pub struct Engine {
    pub mesh: Mesh,
    pub cfg: TrainConfig,
    pub opts: EngineOptions,
    inner: Inner,
    schedule: Schedule,
    placement: Vec<Placement>,
    gpus: Vec<Gpu>,
}

impl Engine {
    /// Checks `mesh` for `cfg` and `gpus.len()` devices, then places and initialises the model
    /// (every layout starts from one device's initial weights). `cfg.grad_accum` must equal
    /// `mesh.microbatches`: each replica accumulates that many microbatches per step.
    pub fn new(gpus: &[Gpu], cfg: TrainConfig, mesh: Mesh, opts: EngineOptions) -> Result<Engine> {
        cfg.validate()?;
        mesh.validate(&cfg.model, cfg.micro.b, cfg.micro.t, gpus.len())?;
        if cfg.grad_accum != mesh.microbatches {
            return Err(Error::Config(format!(
                "the configuration accumulates {} microbatches but the layout runs {} per replica; \
                 set both to the same value",
                cfg.grad_accum, mesh.microbatches
            )));
        }
        let schedule = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks)?;
        let popts = Options {
            tp: mesh.tp,
            tp_link: opts.tp_link.clone(),
            serial: opts.serial,
            fault: opts.fault,
            recv_timeout: opts.recv_timeout,
            ..Options::default()
        };
        let flat = mesh.tp == 1 && mesh.pp == 1;
        let dpo = DpOptions {
            link: opts.link.clone(),
            serial: opts.serial,
            ..DpOptions::default()
        };
        let inner = if mesh.zero > 0 && flat {
            Inner::Zero(Box::new(Zero::new(gpus, cfg.clone(), dpo, mesh.zero)?))
        } else if flat && mesh.dp > 1 && opts.fault.is_none() {
            // (the pipeline executor carries the fault hooks, so a faulted run stays there)
            Inner::Data(Box::new(DataParallel::new(gpus, cfg.clone(), dpo)?))
        } else {
            // ZeRO-1 with tensor or pipeline stages: each stage's data-parallel group shards
            let mut p = DpPipeline::with_zero(
                gpus,
                mesh.dp,
                cfg.clone(),
                schedule.clone(),
                &Balance::Params,
                popts,
                mesh.zero,
            )?;
            p.link = opts.link.clone();
            Inner::Pipe(p)
        };
        let stages = match &inner {
            Inner::Pipe(p) => p.pipes[0].stages.clone(),
            Inner::Zero(_) | Inner::Data(_) => vec![cfg.model.blocks()],
        };
        let placement = (0..mesh.devices())
            .map(|d| {
                let c = mesh.coords(d);
                let blocks: Vec<String> = (0..mesh.chunks)
                    .flat_map(|k| stages[schedule.stage(c.stage, k)].clone())
                    .map(|b| match b {
                        Block::Embedding => "emb".to_string(),
                        Block::Layer(l) => format!("h{l}"),
                        Block::Head => "head".to_string(),
                    })
                    .collect();
                Placement {
                    device: d,
                    adapter: format!("{} ({})", gpus[d].adapter_name(), gpus[d].label),
                    coords: c,
                    blocks: blocks.join(" "),
                }
            })
            .collect();
        Ok(Engine {
            mesh,
            cfg,
            opts,
            inner,
            schedule,
            placement,
            gpus: gpus.to_vec(),
        })
    }

    /// Microbatches one step takes: dp × m (replica r takes the r-th contiguous share).
    pub fn batches_per_step(&self) -> usize {
        self.mesh.dp * self.mesh.microbatches
    }

    /// Where every device's work sits.
    pub fn placement(&self) -> &[Placement] {
        &self.placement
    }

    /// One optimizer step, index `s` (sets the learning rate and Adam's bias correction).
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<StepCosts> {
        let t0 = std::time::Instant::now();
        let inner = match &mut self.inner {
            Inner::Zero(z) => {
                let r = z.step(batches, s)?;
                let wall = t0.elapsed().as_secs_f64();
                // (ZeRO's chain does not time its kernels: no device-clock step)
                return Ok(flat_costs(
                    r.stats,
                    &r.bytes_per_rank,
                    r.comm_link,
                    0.0,
                    wall,
                    r.memory,
                ));
            }
            Inner::Data(dp) => {
                let r = dp.step(batches, s)?;
                let (wall, dev) = (
                    t0.elapsed().as_secs_f64(),
                    r.compute_device + r.exposed_device,
                );
                return Ok(flat_costs(
                    r.stats,
                    &r.bytes_per_rank,
                    r.comm_device,
                    dev,
                    wall,
                    r.memory,
                ));
            }
            Inner::Pipe(p) => p,
        };
        let stats = inner.step(batches, s)?;
        let wall = t0.elapsed().as_secs_f64();
        let rep = &inner.reports[0];
        let tokens = self.cfg.tokens_per_step();
        let (bubble, bubble_theory, device_step) = if self.mesh.pp > 1 {
            let sum = summarize(&self.schedule, rep, &self.opts.link, tokens)?;
            (Some(sum.device_bubble), Some(sum.theory), sum.device_step)
        } else {
            (None, None, rep.events.iter().map(|e| e.compute).sum())
        };
        let dp = inner.ledger.for_step(s);
        let (mut tp_bytes, mut tp_comm) = (0u64, 0.0f64);
        for c in inner.pipes[0].tp_comm() {
            let l: Ledger = c.ledger.for_step(s);
            tp_bytes = tp_bytes.max(l.sent_by_rank(self.mesh.tp).into_iter().max().unwrap_or(0));
            tp_comm += l.link_clock();
        }
        Ok(StepCosts {
            stats,
            bubble,
            bubble_theory,
            device_step,
            dp_bytes: dp.sent_by_rank(self.mesh.dp).into_iter().max().unwrap_or(0),
            dp_comm: dp.link_clock(),
            tp_bytes,
            tp_comm,
            wall,
            memory: self.gpus.iter().map(|g| g.memory()).collect(),
        })
    }

    /// Parameters and AdamW moments in the one-device layout (replica 0's, or assembled from
    /// the ZeRO shards; all replicas hold the same bits).
    pub fn state(&self) -> Result<ModelState> {
        match &self.inner {
            Inner::Pipe(p) => p.state(),
            Inner::Data(d) => d.state(),
            Inner::Zero(z) => z.state(),
        }
    }

    /// Loads a state (from any layout) into every replica, stage, tensor rank or shard.
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        match &self.inner {
            Inner::Pipe(p) => p.set_state(st),
            Inner::Data(d) => d.set_state(st),
            Inner::Zero(z) => z.set_state(st),
        }
    }

    /// SHA-256 of the parameters in the one-device layout.
    pub fn checksum(&self) -> Result<String> {
        match &self.inner {
            Inner::Pipe(p) => p.pipes[0].checksum(),
            Inner::Data(d) => d.checksum(),
            Inner::Zero(z) => z.checksum(),
        }
    }
}

/// The costs of a step without pipeline or tensor stages: only data-parallel traffic.
fn flat_costs(
    stats: StepStats,
    bytes_per_rank: &[u64],
    dp_comm: f64,
    device_step: f64,
    wall: f64,
    memory: Vec<Usage>,
) -> StepCosts {
    StepCosts {
        stats,
        bubble: None,
        bubble_theory: None,
        device_step,
        dp_bytes: bytes_per_rank.iter().copied().max().unwrap_or(0),
        dp_comm,
        tp_bytes: 0,
        tp_comm: 0.0,
        wall,
        memory,
    }
}
