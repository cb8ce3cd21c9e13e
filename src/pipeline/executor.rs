//! The one executor: runs any [`Schedule`] with one OS thread per device and bounded crossbeam
//! channels as the microbatch queues, host-staged (download → channel → upload).
//!
//! ```text
//! device d thread:  for action in schedule.actions[d]:
//!   F: input = tokens (stage 0) | recv activation ◀─ stage s−1;  forward ops;  send ─▶ stage s+1
//!   B: input = dlogits (last stage) | recv gradient ◀─ stage s+1; backward ops; send ─▶ stage s−1
//!   W: weight-gradient ops (zero-bubble schedules)
//! ```
//!
//! Each stage keeps one activation slot per microbatch it may hold at once (from the schedule:
//! GPipe m, 1F1B at most p), all sharing the stage's parameter and gradient buffers. Parameter
//! gradients accumulate in B order, which every schedule runs in microbatch order, so a pipeline
//! computes bit for bit what one device computes. A failing worker returns an error naming its
//! device, stage, action and step; the others see their channels disconnect and stop; no
//! receive waits longer than `recv_timeout`.
//!
//! Tensor parallelism: with `Options::tp` = t, each pipeline device is a group of t GPUs
//! (schedule device d = GPUs `[d·t, (d+1)·t)`), each stage's blocks are split over the group
//! ([`crate::parallel::tensor`]), and the device's thread runs every pass on all t ranks with
//! the tensor-parallel all-reduces between segments. Activations are replicated across the
//! group, so inputs go to every rank and outputs are read from rank 0.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

mod state;
mod worker;

use worker::{worker_error, Worker, WorkerFailure};

use super::partition::{stage_blocks, Balance};
use super::schedule::{Action, Flow, Schedule};
use super::validate::validate;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::Op;
use crate::link::Link;
use crate::memory::Usage;
use crate::model::{fit, gpu_model::GpuModel, Block, GptConfig, Micro, TpRank};
use crate::optim::{global_norm_sq, Optimizer};
use crate::parallel::tensor::{self as tp, TpComm};
use crate::params::Buffers;
use crate::step::{checksum, StepStats, TrainConfig};

/// Knobs of the executor.
#[derive(Clone, Debug)]
pub struct Options {
    /// Capacity of each (from, to, flow) channel, in messages.
    pub channel_bound: usize,
    /// Run one device at a time (a global lock around each action's work) for clean durations.
    pub serial: bool,
    pub recv_timeout: Duration,
    /// Test hook: fail on `device` at its `action`-th action of step `step`.
    pub fault: Option<Fault>,
    /// Tensor-parallel degree: GPUs per schedule device.
    pub tp: usize,
    /// Link model of the tensor-parallel all-reduces (inside a group).
    pub tp_link: Link,
    /// The AdamW moments live elsewhere (sharded by a caller over a data-parallel group):
    /// allocate none here and build no optimizer; [`Pipeline::apply`] and
    /// [`Pipeline::tensor_sq`] do nothing.
    pub external_optimizer: bool,
    /// Global index of this pipeline's first GPU: errors name devices by `device_base + d·tp`
    /// (a data-parallel replica r of a dp × tp × pp layout sets r·pp·tp).
    pub device_base: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            channel_bound: 2,
            serial: false,
            recv_timeout: Duration::from_secs(120),
            fault: None,
            tp: 1,
            tp_link: Link::nvlink(),
            device_base: 0,
            external_optimizer: false,
        }
    }
}

/// Test hook: at its `action`-th action of step `step`, schedule device `device` fails as
/// `kind` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub device: usize,
    pub action: usize,
    pub step: usize,
    pub kind: FaultKind,
}

/// How an injected fault shows itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultKind {
    /// The action returns an error.
    #[default]
    Error,
    /// The worker thread panics inside the action.
    Panic,
    /// The device reports itself lost.
    DeviceLost,
    /// The action hangs (sleeps ten minutes) before running: a step that cannot finish, for
    /// the graceful-stop tests (a signal's grace period runs out while it hangs).
    Stall,
    /// The action completes, then a NaN lands in the loss (a forward of the last stage) or in
    /// the stage's gradients (any other action); the finiteness check before the optimizer
    /// step catches it.
    Nan,
}

impl FaultKind {
    /// "error", "panic", "lost", "nan" or "stall".
    pub fn by_name(name: &str) -> Result<FaultKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(FaultKind::Error),
            "panic" => Ok(FaultKind::Panic),
            "lost" | "device-lost" => Ok(FaultKind::DeviceLost),
            "stall" => Ok(FaultKind::Stall),
            "nan" => Ok(FaultKind::Nan),
            _ => Err(Error::Config(format!(
                "unknown fault kind {name:?}: expected error, panic, lost, nan or stall"
            ))),
        }
    }
}

/// One executed action: wall-clock interval (seconds from the step start), measured device time
/// of its kernels, and the bytes it sent to a neighbour stage.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    pub device: usize,
    pub stage: usize,
    pub label: String,
    #[serde(skip)]
    pub action: Action,
    pub start: f64,
    pub end: f64,
    /// Device-clock seconds of the action: its kernels (a tensor-parallel segment costs its
    /// slowest rank) plus its tensor-parallel all-reduces on the link model (`tp_comm`).
    pub compute: f64,
    /// The tensor-parallel all-reduce part of `compute` (0 without tensor parallelism).
    pub tp_comm: f64,
    pub bytes_out: u64,
    /// Host-staging time of the send (download + channel), seconds.
    pub send_time: f64,
}

/// What one pipeline step did.
#[derive(Clone, Debug)]
pub struct StepReport {
    pub stats: StepStats,
    pub events: Vec<Event>,
    /// Wall time of the schedule (threads start → all joined), seconds.
    pub wall: f64,
    /// Most microbatches whose activations a stage held at once, per stage.
    pub peak_held: Vec<usize>,
    /// Per GPU (schedule device order, tensor ranks within): bytes now and each memory-ledger
    /// category's peak so far.
    pub memory: Vec<Usage>,
}

/// One stage (model chunk) on a device: its blocks, activation slots and optimizer.
struct Chunk {
    stage: usize,
    blocks: Vec<Block>,
    /// Activation slot → one model per tensor-parallel rank (all ranks share the slot index).
    slots: Vec<Vec<GpuModel>>,
    /// One optimizer per tensor-parallel rank (none with an external optimizer).
    optims: Vec<Optimizer>,
    /// Per tensor-parallel rank: sets its gradients to zero.
    zero_ops: Vec<Op>,
    /// slot index holding each microbatch's activations.
    held: HashMap<usize, usize>,
    peak: usize,
}

/// One schedule device: a tensor-parallel group of GPUs (one GPU when tp = 1).
struct Device {
    gpus: Vec<Gpu>,
    chunks: Vec<Chunk>,
    comm: TpComm,
}

/// A model split into stages over devices, trained with one schedule.
pub struct Pipeline {
    pub cfg: TrainConfig,
    pub schedule: Schedule,
    /// Blocks of each stage.
    pub stages: Vec<Vec<Block>>,
    devices: Vec<Device>,
    canonical: Vec<String>,
    pub opts: Options,
}

type Payload = (usize, usize, Vec<f32>); // (micro, source stage, data)
type Key = (usize, usize, Flow); // (from device, to device, flow)

impl Pipeline {
    /// Places `schedule.stages()` stages of `cfg.model` on `gpus` (one per schedule device),
    /// initialised exactly like one device with `cfg.seed`. `cfg.grad_accum` must equal m.
    pub fn new(
        gpus: &[Gpu],
        cfg: TrainConfig,
        schedule: Schedule,
        balance: &Balance,
        opts: Options,
    ) -> Result<Pipeline> {
        cfg.validate()?;
        let t = opts.tp;
        cfg.model.check_tp(t)?;
        if gpus.len() != schedule.p * t {
            return Err(Error::Config(format!(
                "schedule for {} devices × tensor-parallel degree {t} needs {} GPUs but {} given",
                schedule.p,
                schedule.p * t,
                gpus.len()
            )));
        }
        if cfg.grad_accum != schedule.m {
            return Err(Error::Config(format!(
                "the schedule has {} microbatches per step but the configuration accumulates {}",
                schedule.m, cfg.grad_accum
            )));
        }
        validate(&schedule, opts.channel_bound)?;
        let stages = stage_blocks(&cfg.model, schedule.stages(), balance)?;
        // every stage on every device of its group fits, before any weights or buffers exist
        for (d, group) in gpus.chunks(t).enumerate() {
            for k in 0..schedule.v {
                for gpu in group {
                    let blocks = &stages[schedule.stage(d, k)];
                    fit::check(&cfg.model, blocks, cfg.micro, t, &gpu.limits)?;
                }
            }
        }
        let slots = schedule.slots_needed();
        let dloss = 1.0 / cfg.tokens_per_step() as f32;
        let mut devices = Vec::with_capacity(schedule.p);
        for (d, group) in gpus.chunks(t).enumerate() {
            let mut chunks = Vec::with_capacity(schedule.v);
            for (k, &held) in slots[d].iter().enumerate() {
                let stage = schedule.stage(d, k);
                let blocks = &stages[stage];
                // one-device initialisation, sharded: every layout starts from the same weights
                let full = cfg.model.init(&cfg.model.layout(blocks), cfg.seed);
                let shards = tp::shard(&cfg.model, blocks, &full, t)?;
                let local = cfg.model.layout_tp(blocks, t);
                let mut rank_slots = Vec::with_capacity(t);
                let mut optims = Vec::with_capacity(t);
                let mut zero_ops = Vec::with_capacity(t);
                for (r, gpu) in group.iter().enumerate() {
                    let buffers = if opts.external_optimizer {
                        Buffers::without_moments(gpu, &local)
                    } else {
                        Buffers::new(gpu, &local)
                    };
                    zero_ops.push(crate::kernels::elementwise::fill(gpu, &buffers.grads, 0.0)?);
                    gpu.upload(&buffers.params, &shards[r])?;
                    let models = (0..held.max(1))
                        .map(|_| {
                            GpuModel::with_buffers_tp(
                                gpu,
                                cfg.model,
                                blocks,
                                cfg.micro,
                                dloss,
                                buffers.clone(),
                                schedule.kind.split_backward(),
                                TpRank { t, r },
                            )
                        })
                        .collect::<Result<Vec<_>>>()?;
                    rank_slots.push(models);
                    if !opts.external_optimizer {
                        optims.push(Optimizer::new(gpu, &buffers)?);
                    }
                }
                // transpose rank → slot into slot → rank
                let n_slots = rank_slots[0].len();
                let mut per_slot: Vec<Vec<GpuModel>> = (0..n_slots).map(|_| Vec::new()).collect();
                for models in rank_slots {
                    for (i, m) in models.into_iter().enumerate() {
                        per_slot[i].push(m);
                    }
                }
                chunks.push(Chunk {
                    stage,
                    blocks: blocks.clone(),
                    slots: per_slot,
                    optims,
                    zero_ops,
                    held: HashMap::new(),
                    peak: 0,
                });
            }
            let mut comm = TpComm::new(opts.tp_link);
            comm.ledger.group = (d * t..(d + 1) * t).collect();
            devices.push(Device {
                gpus: group.to_vec(),
                chunks,
                comm,
            });
        }
        Ok(Pipeline {
            canonical: cfg.model.canonical_names(),
            cfg,
            schedule,
            stages,
            devices,
            opts,
        })
    }

    /// Activation slots allocated per stage (the schedule's peak).
    pub fn slots(&self) -> Vec<usize> {
        let mut out = vec![0; self.schedule.stages()];
        for d in &self.devices {
            for c in &d.chunks {
                out[c.stage] = c.slots.len();
            }
        }
        out
    }

    /// One optimizer step over `batches` (m microbatches), step index `s`.
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<StepReport> {
        let mut r = self.run_schedule(batches, s)?;
        let parts = self.tensor_sq()?;
        self.check_finite(r.stats.loss, &parts, s)?;
        let norm_sq = global_norm_sq(&parts, &self.canonical);
        let h = self.cfg.adam_at(s);
        self.apply(&h, norm_sq)?;
        r.stats.grad_norm = norm_sq.sqrt();
        r.stats.lr = h.lr;
        Ok(r)
    }

    /// Σg² of every tensor of every stage, by name (tensor-parallel shards combined into the
    /// one-device tensors, see [`tp::combine_tensor_sq`]).
    pub fn tensor_sq(&self) -> Result<Vec<(String, f32)>> {
        let mut parts = Vec::new();
        for d in &self.devices {
            for c in &d.chunks {
                if c.optims.is_empty() {
                    continue;
                }
                let ranks = c
                    .optims
                    .iter()
                    .map(|o| o.tensor_sq())
                    .collect::<Result<Vec<_>>>()?;
                parts.extend(tp::combine_tensor_sq(&ranks));
            }
        }
        Ok(parts)
    }

    /// AdamW on every stage with hyper-parameters `h` and the global Σg² `norm_sq`.
    pub fn apply(&self, h: &crate::cpu::AdamW, norm_sq: f32) -> Result<()> {
        for d in &self.devices {
            for c in &d.chunks {
                for o in &c.optims {
                    o.step(h, norm_sq)?;
                }
            }
        }
        Ok(())
    }

    /// Each (stage, tensor-parallel rank)'s GPU and gradient buffer, in stage then rank order
    /// (for data parallelism across pipeline replicas: entry i of every replica holds the same
    /// tensors).
    pub fn stage_grads(&self) -> Vec<(Gpu, View)> {
        let mut out: Vec<(usize, usize, Gpu, View)> = Vec::new();
        for d in &self.devices {
            for c in &d.chunks {
                for (r, m) in c.slots[0].iter().enumerate() {
                    out.push((c.stage, r, d.gpus[r].clone(), m.buffers.grads.clone()));
                }
            }
        }
        out.sort_by_key(|x| (x.0, x.1));
        out.into_iter().map(|(_, _, g, v)| (g, v)).collect()
    }

    /// The tensor-parallel communication of each schedule device's group, in device order
    /// (empty ledgers when tp = 1).
    pub fn tp_comm(&self) -> Vec<&TpComm> {
        self.devices.iter().map(|d| &d.comm).collect()
    }

    /// Zeroes the gradients and runs the schedule over `batches`: forward and backward only,
    /// no optimizer step (the report's `grad_norm` and `lr` stay 0).
    pub fn run_schedule(
        &mut self,
        batches: &[(Vec<u32>, Vec<u32>)],
        s: usize,
    ) -> Result<StepReport> {
        if batches.len() != self.schedule.m {
            return Err(Error::Config(format!(
                "step needs {} microbatches, got {}",
                self.schedule.m,
                batches.len()
            )));
        }
        for d in &mut self.devices {
            d.comm.ledger.step = s;
            for c in &d.chunks {
                for (g, op) in d.gpus.iter().zip(&c.zero_ops) {
                    g.run(std::slice::from_ref(op))?;
                }
            }
        }
        let (senders, receivers) = self.channels();
        let serial = Mutex::new(());
        let t0 = Instant::now();
        let results: Vec<std::result::Result<(Vec<Event>, f64), WorkerFailure>> =
            std::thread::scope(|scope| {
                let handles: Vec<_> = self
                    .devices
                    .iter_mut()
                    .enumerate()
                    .map(|(d, dev)| {
                        let my_tx: HashMap<Key, Sender<Payload>> = senders
                            .iter()
                            .filter(|(k, _)| k.0 == d)
                            .map(|(k, v)| (*k, v.clone()))
                            .collect();
                        let my_rx: HashMap<Key, Receiver<Payload>> = receivers
                            .iter()
                            .filter(|(k, _)| k.1 == d)
                            .map(|(k, v)| (*k, v.clone()))
                            .collect();
                        let w = Worker {
                            d,
                            step: s,
                            schedule: &self.schedule,
                            batches,
                            opts: &self.opts,
                            serial: &serial,
                            t0,
                            tx: my_tx,
                            rx: my_rx,
                            local: HashMap::new(),
                        };
                        scope.spawn(move || w.run(dev))
                    })
                    .collect();
                drop(senders);
                drop(receivers);
                handles
                    .into_iter()
                    .enumerate()
                    .map(|(d, h)| {
                        h.join().unwrap_or_else(|_| {
                            Err(WorkerFailure {
                                primary: true,
                                error: worker_error(
                                    self.opts.device_base + d * self.opts.tp,
                                    0,
                                    "?",
                                    s,
                                    "worker thread panicked".into(),
                                ),
                            })
                        })
                    })
                    .collect()
            });
        let wall = t0.elapsed().as_secs_f64();
        let mut events = Vec::new();
        let mut loss = 0.0f64;
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok((ev, l)) => {
                    events.extend(ev);
                    loss += l;
                }
                Err(f) => failures.push(f),
            }
        }
        if !failures.is_empty() {
            // the root cause, not the disconnects it caused
            let pick = failures.iter().position(|f| f.primary).unwrap_or(0);
            return Err(failures.swap_remove(pick).error);
        }
        let mut peak_held = vec![0; self.schedule.stages()];
        for d in &mut self.devices {
            for c in &mut d.chunks {
                peak_held[c.stage] = c.peak;
                c.peak = 0;
            }
        }
        let stats = StepStats {
            loss: (loss / self.cfg.tokens_per_step() as f64) as f32,
            grad_norm: 0.0,
            lr: 0.0,
        };
        Ok(StepReport {
            stats,
            events,
            wall,
            peak_held,
            memory: self
                .devices
                .iter()
                .flat_map(|d| d.gpus.iter().map(|g| g.memory()))
                .collect(),
        })
    }

    /// SHA-256 of the gathered parameters: equal to one device's checksum iff bit-identical.
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.gather_params()?))
    }

    /// One bounded channel per (from, to, flow) that the schedule uses between distinct devices.
    fn channels(
        &self,
    ) -> (
        HashMap<Key, Sender<Payload>>,
        HashMap<Key, Receiver<Payload>>,
    ) {
        let (mut tx, mut rx) = (HashMap::new(), HashMap::new());
        for (d, list) in self.schedule.actions.iter().enumerate() {
            for a in list {
                if let Some(m) = self.schedule.output(d, a) {
                    let key = (m.from, m.to, m.flow);
                    if m.from != m.to && !tx.contains_key(&key) {
                        let (s, r) = bounded(self.opts.channel_bound);
                        tx.insert(key, s);
                        rx.insert(key, r);
                    }
                }
            }
        }
        (tx, rx)
    }
}

/// The stage blocks a pipeline of `stages` stages would use (for reports).
pub fn describe_stages(cfg: &GptConfig, stages: &[Vec<Block>]) -> Vec<String> {
    stages
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let names: Vec<String> = b
                .iter()
                .map(|x| match x {
                    Block::Embedding => "emb".to_string(),
                    Block::Layer(l) => format!("h{l}"),
                    Block::Head => "head".to_string(),
                })
                .collect();
            format!(
                "stage {i}: {} ({} params)",
                names.join(" "),
                cfg.layout(b).count()
            )
        })
        .collect()
}

/// Microbatch shape helper for callers: the global batch split into `m` microbatches.
pub fn micro_of(global_batch: usize, m: usize, t: usize) -> Result<Micro> {
    if m == 0 || !global_batch.is_multiple_of(m) {
        return Err(Error::Config(format!(
            "{m} microbatches do not divide the global batch of {global_batch} sequences"
        )));
    }
    Ok(Micro {
        b: global_batch / m,
        t,
    })
}
