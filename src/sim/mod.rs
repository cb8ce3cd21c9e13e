//! The step of a layout too large to run here, simulated: the runtime's own lowering of the
//! layout for every device that behaves differently, each op costed from a calibration
//! (compute) and the cluster's links or the calibration's measured host-staged transfers
//! (communication, [`CommSource`]), replayed on the device clock the
//! runtime replays its measured steps on ([`crate::runtime::replay`]).
//!
//! ```text
//! GptConfig + Mesh ─shape─▶ SimChunk per (stage position, chunk): marks, segment FLOPs, buckets
//!   ─lower_replicas─▶ Plan (replica 0, or every replica when they differ)
//!   ─cost─▶ seconds per op:  compute   calibration (per segment, layer and end + FLOPs · s/FLOP)
//!                            tp        ring all-reduce of b·T·h activations over the tp link
//!                            send      b·T·h activations, one message, intra- or inter-node
//!                            dp        ring all-reduce / reduce-scatter / all-gather of a bucket
//!                                      (ZeRO-3: of a block) over the dp group's slowest link
//!                            norm      a tree over every device: 2⌈log₂ N⌉ latencies
//!                            optimizer calibration (per parameter of the device's shard)
//!   ─replay─▶ step, bubble, exposed communication per axis (each axis replayed free)
//! ```
//!
//! **Replicas simulated once.** Data-parallel replicas run identical op lists; when every
//! replica's pipeline transfers cross the same kind of link as replica 0's (the tp and dp
//! groups run on one link kind each by the cluster's placement rule), their costs are identical
//! too, every replica reaches each collective at the same time, and a collective costed for its
//! whole group gives every member the same span. Then only replica 0 is lowered and replayed
//! (each group cut to its members in replica 0), and memory and time grow with tp · pp, not
//! with the device count. Otherwise every replica is simulated. `tests/sim.rs` checks both give
//! the same clock.

pub mod calibration;
pub mod report;
pub mod shape;

pub use calibration::{Calibration, Fit, Links, Terms};
pub use shape::{chunks, op_terms, SimChunk, Work};

use crate::cost::activation::predict;
use crate::cost::comm::{ring_allreduce_time, ring_collective_time};
use crate::cost::zero::{runtime_state_bytes, stage};
use crate::cost::Cluster;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::mesh::Mesh;
use crate::model::{GptConfig, Micro, Recompute};
use crate::pipeline::partition::Balance;
use crate::pipeline::schedule::Schedule;
use crate::precision::Precision;
use crate::runtime::ir::{Op, Plan};
use crate::runtime::lower::lower_replicas;
use crate::runtime::replay::{replay, replay_free, Clock, Free};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The model; its context is the sequence length.
    pub model: GptConfig,
    /// Sequences per microbatch.
    pub micro_b: usize,
    pub mesh: Mesh,
    pub cluster: Cluster,
    pub calibration: Calibration,
    pub precision: Precision,
    pub recompute: Recompute,
    /// Largest gradient bucket, bytes.
    pub bucket_bytes: usize,
    /// Simulate every replica even when they behave alike (to check that they do).
    pub every_replica: bool,
    /// What prices communication.
    pub comm: CommSource,
}

/// What prices the simulated step's communication.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommSource {
    /// The cluster's links: the intra-node link within a node, the inter-node link across.
    #[default]
    Cluster,
    /// The calibration's measured host-staged communication ([`Links`]) on every group,
    /// staging included: what the runtime's own transfers cost on the machine measured.
    Calibration,
}

/// Exposed seconds of each axis's communication: the makespan less the makespan of the same
/// replay with that axis free.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Exposed {
    pub dp: f64,
    pub tp: f64,
    pub pp: f64,
}

/// One device's predicted memory: model state (parameters, gradients, optimizer state, the
/// ZeRO-3 gather slots) and activations at their peak.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceMemory {
    pub state: f64,
    pub activations: f64,
}

/// The simulated step.
#[derive(Clone, Debug)]
pub struct Simulated {
    pub spec: Spec,
    /// The lowered programs of the simulated devices (replica 0's, or every replica's).
    pub plan: Plan,
    /// Replicas simulated (1 when they behave alike).
    pub replicas: usize,
    pub chunks: Vec<Vec<SimChunk>>,
    /// Seconds of each op of each simulated device.
    pub cost: Vec<Vec<f64>>,
    pub clock: Clock,
    /// Idle share of replica 0's busiest device over the span of the passes.
    pub bubble: f64,
    pub exposed: Exposed,
    /// Per device of replica 0.
    pub memory: Vec<DeviceMemory>,
    /// Tokens per step over every replica, and the model FLOPs of the step (6·N·tokens plus
    /// attention's 12·L·T·h per token).
    pub tokens: usize,
    pub model_flops: f64,
}

impl Simulated {
    /// Device-clock seconds of the step.
    pub fn step(&self) -> f64 {
        self.clock.makespan
    }

    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.step()
    }

    /// Model FLOP utilisation against `peak` FLOP/s per device.
    pub fn mfu(&self, peak: f64) -> f64 {
        self.model_flops / (self.step() * self.spec.mesh.devices() as f64 * peak)
    }
}

/// Simulates one step of `spec`; errors name what is impossible about the layout.
pub fn simulate(spec: &Spec) -> Result<Simulated> {
    let (cfg, mesh, cluster) = (&spec.model, &spec.mesh, &spec.cluster);
    let links = match spec.comm {
        CommSource::Cluster => None,
        CommSource::Calibration => Some(spec.calibration.links.clone().ok_or_else(|| {
            Error::Config(format!(
                "the calibration from {} has no communication measured; make one with \
                 `--calibrate FILE`, or price communication from the cluster's links",
                spec.calibration.adapter
            ))
        })?),
    };
    cluster.validate()?;
    if mesh.devices() > cluster.devices() {
        return Err(Error::Config(format!(
            "{} needs {} devices; the cluster has {}",
            mesh.describe(),
            mesh.devices(),
            cluster.devices()
        )));
    }
    mesh.validate(cfg, spec.micro_b, cfg.ctx, mesh.devices())?;
    let schedule = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks)?;
    let (p, g, _) = spec.precision.pgk();
    let chunks = chunks(
        cfg,
        mesh,
        &schedule,
        spec.micro_b,
        cfg.ctx,
        spec.recompute,
        spec.bucket_bytes,
        g as usize,
    )?;
    let shapes: Vec<Vec<_>> = chunks
        .iter()
        .map(|cs| cs.iter().map(|c| c.shape.clone()).collect())
        .collect();
    let first = lower_replicas(mesh, &schedule, &shapes, true, 1)?;
    let replicas = match spec.every_replica || !replicas_alike(&first, mesh, cluster) {
        true => mesh.dp,
        false => 1,
    };
    let plan = match replicas {
        1 => first,
        _ => lower_replicas(mesh, &schedule, &shapes, true, replicas)?,
    };
    // the ring link of the tp group and of the dp group: measured, or the cluster's
    let (tp_link, dp_link) = match &links {
        Some(l) => (l.ring_link(), l.ring_link()),
        None => (
            cluster.group_link(1, mesh.tp).0,
            cluster.group_link(mesh.tp * mesh.pp, mesh.dp).0,
        ),
    };
    let costs = Costs {
        spec,
        links,
        tp_link,
        dp_link,
        chunks: &chunks,
        act: (spec.micro_b * cfg.ctx * cfg.channels * spec.precision.element_bytes()) as f64,
        p,
        g,
    };
    let cost: Vec<Vec<f64>> = plan
        .programs
        .iter()
        .map(|prog| {
            prog.ops
                .iter()
                .map(|op| costs.op(prog.device, op))
                .collect()
        })
        .collect();
    let clock = replay(&plan, mesh, &cost)?;
    let free = |f: Free| -> Result<f64> {
        Ok((clock.makespan - replay_free(&plan, mesh, &cost, f)?.makespan).max(0.0))
    };
    let exposed = Exposed {
        dp: clock.exposed_dp,
        tp: free(Free::TP)?,
        pp: free(Free::PP)?,
    };
    let bubble = clock.bubble(0..mesh.pp * mesh.tp);
    let memory = memory(spec, &chunks)?;
    let tokens = mesh.dp * mesh.microbatches * spec.micro_b * cfg.ctx;
    let n = cfg.param_count() as f64;
    let attention = 12.0 * (cfg.layers * cfg.ctx * cfg.channels) as f64;
    Ok(Simulated {
        spec: spec.clone(),
        plan,
        replicas,
        chunks,
        cost,
        clock,
        bubble,
        exposed,
        memory,
        tokens,
        model_flops: (6.0 * n + attention) * tokens as f64,
    })
}

/// Whether every replica's pipeline transfers cross the kind of link replica 0's do.
fn replicas_alike(first: &Plan, mesh: &Mesh, cluster: &Cluster) -> bool {
    let node = |d: usize| d / cluster.devices_per_node.max(1);
    let mut pairs: Vec<(usize, usize)> = first
        .programs
        .iter()
        .flat_map(|p| {
            p.ops.iter().filter_map(move |op| match op {
                Op::Send { to, .. } => Some((p.device, *to)),
                _ => None,
            })
        })
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let stride = mesh.pp * mesh.tp;
    (1..mesh.dp).all(|r| {
        pairs
            .iter()
            .all(|&(a, b)| (node(a) == node(b)) == (node(a + r * stride) == node(b + r * stride)))
    })
}

/// What costing an op needs.
struct Costs<'a> {
    spec: &'a Spec,
    /// Measured host-staged communication, when it prices the step's.
    links: Option<Links>,
    /// The rings of the tp and dp groups.
    tp_link: Link,
    dp_link: Link,
    chunks: &'a [Vec<SimChunk>],
    /// Bytes of one microbatch's activations (or their gradient) at a stage boundary.
    act: f64,
    /// Bytes per parameter and per gradient.
    p: f64,
    g: f64,
}

impl Costs<'_> {
    fn op(&self, device: usize, op: &Op) -> f64 {
        let (mesh, cluster, cal) = (&self.spec.mesh, &self.spec.cluster, &self.spec.calibration);
        let at = mesh.coords(device);
        let chunk = |c: usize| &self.chunks[at.stage][c];
        let (tp_link, dp_link) = (self.tp_link, self.dp_link);
        // what staging `bytes` on each of a group's d devices adds
        let staged = |bytes: f64, d: usize| match &self.links {
            Some(l) if d > 1 => l.staging(bytes, d),
            _ => 0.0,
        };
        match op {
            Op::Compute { action, segs } => {
                let c = chunk(action.chunk);
                let class = Calibration::class(action.kind, c.shape.split);
                cal.passes[class].seconds(op_terms(&c.work[action.kind.index()][segs.clone()]))
            }
            Op::TpAllReduce { .. } => {
                ring_allreduce_time(self.act, mesh.tp, tp_link) + staged(self.act, mesh.tp)
            }
            Op::Send { to, .. } => {
                let per_node = cluster.devices_per_node.max(1);
                let link = match (&self.links, device / per_node == to / per_node) {
                    (Some(l), _) => l.message_link(),
                    (None, true) => cluster.intra,
                    (None, false) => cluster.inter,
                };
                // the sender's download and the receiver's upload, one device at a time
                let staging = self.links.as_ref().map_or(0.0, |l| l.staging(self.act, 1));
                link.message_time(self.act) + staging
            }
            Op::Recv { .. } => 0.0,
            Op::ReduceGrad {
                chunk: c,
                bucket,
                scatter,
            } => {
                let bytes = chunk(*c).buckets[*bucket] as f64 * self.g;
                staged(bytes, mesh.dp)
                    + match scatter {
                        true => ring_collective_time(bytes, mesh.dp, dp_link),
                        false => ring_allreduce_time(bytes, mesh.dp, dp_link),
                    }
            }
            Op::GatherParams { chunk: c, bucket } => {
                let bytes = chunk(*c).buckets[*bucket] as f64 * self.p;
                staged(bytes, mesh.dp) + ring_collective_time(bytes, mesh.dp, dp_link)
            }
            Op::Unshard { chunk: c, block } => {
                let bytes = chunk(*c).block_params[*block] as f64 * self.p;
                staged(bytes, mesh.dp) + ring_collective_time(bytes, mesh.dp, dp_link)
            }
            Op::GradNorm => {
                let n = mesh.devices();
                let latency = match &self.links {
                    Some(l) => l.message.per_segment,
                    None => cluster.group_link(1, n).0.latency_s,
                };
                2.0 * (n as f64).log2().ceil() * latency
            }
            Op::Optimizer => {
                let params: usize = self.chunks[at.stage].iter().map(|c| c.params).sum();
                let shard = match mesh.zero > 0 && mesh.dp > 1 {
                    true => params.div_ceil(mesh.dp),
                    false => params,
                };
                cal.optimizer.seconds([1.0, 0.0, 0.0, shard as f64, 0.0])
            }
        }
    }
}

/// Replica 0's devices' model state (the runtime's own formula) and activation peak (the
/// activation predictor's).
fn memory(spec: &Spec, chunks: &[Vec<SimChunk>]) -> Result<Vec<DeviceMemory>> {
    let mesh = &spec.mesh;
    let one = Mesh {
        dp: 1,
        zero: 0,
        ..*mesh
    };
    let micro = Micro {
        b: spec.micro_b,
        t: spec.model.ctx,
    };
    let acts = predict(
        &spec.model,
        micro,
        &one,
        &Balance::Params,
        spec.recompute,
        spec.precision,
    )?;
    let zero = stage(if mesh.dp > 1 { mesh.zero } else { 0 })?;
    Ok(acts
        .iter()
        .enumerate()
        .map(|(d, a)| {
            let cs = &chunks[mesh.coords(d).stage];
            let params = cs.iter().map(|c| c.params).sum();
            let slot = cs
                .iter()
                .flat_map(|c| c.block_params.iter().copied())
                .max()
                .unwrap_or(0);
            DeviceMemory {
                state: runtime_state_bytes(zero, params, mesh.dp, slot, spec.precision.pgk()),
                activations: a.total as f64,
            }
        })
        .collect())
}
