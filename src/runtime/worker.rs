//! One device's worker: it owns only its device — its chunks' buffers, models and optimizers —
//! and its communicators (pipeline, tensor- and data-parallel groups, and the world for the
//! gradient norm), and runs its program op by op. Host staging is spelled out in every
//! communication op: download → communicator → upload.
//!
//! A failing op (an error, a panic, a lost device, a non-finite gradient) ends the worker's
//! step with an error naming its device, stage, action and step, and aborts its communicators,
//! so every peer waiting on it stops at once instead of waiting out a timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

mod comms;
mod passes;
mod reduce;
pub use comms::Comms;
use comms::{comm_call, tag};
use passes::missing;

use super::chunk::Chunk;
use super::fault::{Fault, GradScale};
use super::ir::Op;
use super::turn::{Held, Turn};
use crate::collective::{Algo, Ledger};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::mesh::{Coords, Mesh};
use crate::pipeline::schedule::{Action, Schedule};
use crate::step::{StepStats, TrainConfig};

/// What one op did: wall interval (seconds from the step start), kernel time, link-model
/// time of its communication, bytes it sent.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct OpRecord {
    pub start: f64,
    pub end: f64,
    pub device: f64,
    pub link: f64,
    pub bytes: u64,
}

/// A worker's step: a record per op, the step's statistics, and what the step's costs and
/// reports read of the device afterwards — everything one device tells the others after a
/// step, so a process that runs only some devices can still cost the whole step.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WorkerRun {
    /// Global device.
    pub device: usize,
    pub records: Vec<OpRecord>,
    pub stats: StepStats,
    /// Σg² of each tensor of the whole model before clipping, in canonical order (every device
    /// reaches the same figures from the gradient-norm reduction).
    pub tensor_sq: Vec<(String, f32)>,
    /// Bytes this device sent in the step over its data-parallel group, and over its
    /// tensor-parallel group with that group's link-model seconds.
    pub dp_sent: u64,
    pub tp_sent: u64,
    pub tp_link: f64,
    /// (model stage, most microbatches held at once so far) of each chunk.
    pub peaks: Vec<(usize, usize)>,
    /// The device's memory ledger after the step.
    pub memory: crate::memory::Usage,
    /// Queue submits, host waits and dispatches of the device in the step.
    pub counts: crate::gpu::Tally,
}

pub(super) struct Failure {
    /// false when only the consequence of a peer's failure.
    pub primary: bool,
    pub error: Error,
}

/// The per-step inputs every worker shares.
pub(super) struct StepIn {
    /// This replica's microbatches.
    pub batches: Vec<(Vec<u32>, Vec<u32>)>,
    pub step: usize,
    pub fault: Option<Fault>,
    /// A fault in the `action`-th gradient reduction of `device` instead of a pass.
    pub reduce_fault: Option<Fault>,
    /// Test hook: a gradient scaled before the norm (see [`GradScale`]).
    pub grad_scale: Option<GradScale>,
    pub serial: Option<Arc<Turn>>,
    /// Time the passes for the device clock ([`RuntimeOptions::device_clock`]).
    pub timed: bool,
    pub t0: Instant,
}

pub struct Worker {
    pub device: usize,
    pub place: Coords,
    pub gpu: Gpu,
    pub(super) chunks: Vec<Chunk>,
    pub comms: Comms,
    pub(super) ops: Vec<Op>,
    pub(super) schedule: Schedule,
    pub(super) cfg: TrainConfig,
    pub(super) mesh: Mesh,
    pub(super) canonical: Vec<String>,
    /// The all-reduce of unsharded gradient buckets.
    pub(super) dp_algo: Algo,
    /// Per-token losses of the step's last-stage forwards, one [B·T] row per forward in the
    /// order they ran, copied there on the device and read back with the gradient norm's
    /// parts (allocated at the first such forward, for one row per microbatch).
    pub(super) loss_log: Option<crate::gpu::View>,
}

/// The step's working state of one worker.
#[derive(Default)]
struct Scratch {
    /// Inputs that arrived, by the consuming action.
    inbox: HashMap<Action, Vec<f32>>,
    /// Outputs waiting for their send, by the producing action.
    outbox: HashMap<Action, Vec<f32>>,
    /// Rows of `Worker::loss_log` this step filled.
    losses: usize,
    /// An injected fault made the loss NaN.
    nan_loss: bool,
    /// The schedule action the current compute belongs to, and its index in the list.
    action: usize,
    reductions: usize,
    local_bad: Option<(usize, String)>,
    norm_sq: f32,
    tensor_sq: Vec<(String, f32)>,
    mean_loss: f32,
    /// Indices into the step's pass times of the op being run (its device time, read back
    /// once after the step).
    stamps: Vec<usize>,
}

impl Worker {
    /// Model stage of local chunk `c`.
    fn stage_of(&self, c: usize) -> usize {
        self.schedule.stage(self.place.stage, c)
    }

    /// The name of an op in errors: the action label of compute and messages, else the op.
    fn what(&self, op: &Op) -> (usize, String) {
        let label = |a: &Action| self.schedule.label(self.place.stage, a);
        match op {
            Op::Compute { action, .. } | Op::Send { action, .. } | Op::Recv { action, .. } => {
                (self.stage_of(action.chunk), label(action))
            }
            Op::TpAllReduce { action, cut } => (
                self.stage_of(action.chunk),
                format!("{} tensor-parallel all-reduce {cut}", label(action)),
            ),
            Op::ReduceGrad { chunk, bucket, .. } => (
                self.stage_of(*chunk),
                format!("gradient reduction of bucket {bucket}"),
            ),
            Op::GatherParams { chunk, bucket } => (
                self.stage_of(*chunk),
                format!("parameter gather of bucket {bucket}"),
            ),
            Op::Unshard { chunk, block } => (
                self.stage_of(*chunk),
                format!("parameter gather of block {block}"),
            ),
            Op::GradNorm => (self.stage_of(0), "gradient norm".into()),
            Op::Optimizer => (self.stage_of(0), "optimizer".into()),
        }
    }

    /// Runs this worker's program for step `input.step`.
    pub(super) fn run_step(&mut self, input: &StepIn) -> std::result::Result<WorkerRun, Failure> {
        let s = input.step;
        self.comms.set_step(s);
        let counts0 = self.gpu.counts();
        let mut sc = Scratch::default();
        let mut records = Vec::with_capacity(self.ops.len());
        let mut timed: Vec<(usize, usize)> = Vec::new();
        if let Err(e) = self.gpu.discard_pass_times() {
            return Err(self.fail(&Op::Optimizer, s, true, e.to_string()));
        }
        for c in &mut self.chunks {
            c.held.clear();
            if let Err(e) = self.gpu.run(std::slice::from_ref(&c.zero_grads)) {
                return Err(self.fail(&Op::Optimizer, s, true, e.to_string()));
            }
        }
        let ops = std::mem::take(&mut self.ops);
        let mut result = Ok(());
        for op in &ops {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.exec(op, input, &mut sc)
            }));
            let failed = match run {
                Ok(Ok(rec)) => {
                    timed.extend(sc.stamps.drain(..).map(|t| (records.len(), t)));
                    records.push(rec);
                    continue;
                }
                Ok(Err(e @ Error::Aborted(_))) => self.fail(op, s, false, e.to_string()),
                Ok(Err(e @ Error::Worker { .. })) => Failure {
                    primary: true,
                    error: e,
                },
                Ok(Err(e)) => self.fail(op, s, true, e.to_string()),
                Err(payload) => {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    self.fail(op, s, true, format!("worker panicked: {what}"))
                }
            };
            result = Err(failed);
            break;
        }
        self.ops = ops;
        result?;
        // the step's one wait for its timings: every timed pass's device time (no wait when
        // the step timed none)
        let times = match self.gpu.pass_times() {
            Ok(t) => t,
            Err(e) => return Err(self.fail(&Op::Optimizer, s, true, e.to_string())),
        };
        for (r, t) in timed {
            let d = times.get(t).ok_or_else(|| Failure {
                primary: true,
                error: Error::Device(format!("{}: pass time {t} missing", self.gpu.label)),
            })?;
            records[r].device += d.as_secs_f64();
        }
        let sent = |l: &Ledger| {
            let l = l.for_step(s);
            (
                l.sent_by_rank(l.group.len().max(1))
                    .into_iter()
                    .sum::<u64>(),
                l.link_clock(),
            )
        };
        let (dp_sent, _) = sent(self.comms.dp.ledger());
        let (tp_sent, tp_link) = sent(self.comms.tp.ledger());
        Ok(WorkerRun {
            device: self.device,
            records,
            stats: StepStats {
                loss: sc.mean_loss,
                grad_norm: sc.norm_sq.sqrt(),
                lr: self.cfg.lr_at(s),
            },
            tensor_sq: sc.tensor_sq,
            dp_sent,
            tp_sent,
            tp_link,
            peaks: self.chunks.iter().map(|c| (c.stage, c.peak)).collect(),
            memory: self.gpu.memory(),
            counts: self.gpu.counts() - counts0,
        })
    }

    /// The failure of `op` (and the abort that releases every peer).
    fn fail(&self, op: &Op, step: usize, primary: bool, msg: String) -> Failure {
        let (stage, action) = self.what(op);
        let error = Error::Worker {
            device: self.device,
            stage,
            action,
            step,
            msg,
        };
        for c in self.comms.all() {
            c.abort(&error.to_string());
        }
        Failure { primary, error }
    }

    fn exec(&mut self, op: &Op, input: &StepIn, sc: &mut Scratch) -> Result<OpRecord> {
        let start = input.t0.elapsed().as_secs_f64();
        let mut rec = OpRecord {
            start,
            ..OpRecord::default()
        };
        match op {
            Op::Compute { action, segs } => {
                let _one = one(input.serial.as_deref());
                let t = self.compute(action, segs.clone(), input, sc)?;
                sc.stamps.extend(t);
            }
            Op::TpAllReduce { action, cut } => {
                let c = &self.chunks[action.chunk];
                let slot = *c.held.get(&action.micro).ok_or_else(|| missing(action))?;
                let view = c.cut_view(slot, action.kind, *cut)?;
                // partial sums in the chunk's precision (bf16: the bf16 ring, 2 bytes each)
                let p = c.precision;
                // serial: the staging waits for the device while no other device computes
                let mut words: Vec<u32> = {
                    let _one = one(input.serial.as_deref());
                    self.gpu.download(&view)?
                };
                let bounds = crate::comm::even(words.len(), self.mesh.tp);
                rec.link = comm_call(&mut *self.comms.tp, |c| {
                    crate::comm::all_reduce_words(c, p, &mut words, Algo::Ring, &bounds, *cut)
                })?;
                let _one = one(input.serial.as_deref());
                self.gpu.upload(&view, &words)?;
            }
            Op::Send { action, to, flow } => {
                let data = sc.outbox.remove(action).ok_or_else(|| missing(action))?;
                rec.bytes = 4 * data.len() as u64;
                let tag = tag(*flow, action.micro, self.stage_of(action.chunk));
                let to = self.mesh.coords(*to).stage;
                rec.link = comm_call(&mut *self.comms.pp, |c| c.send(to, tag, data))?;
            }
            Op::Recv { action, from, flow } => {
                let m = self
                    .schedule
                    .input(self.place.stage, action)
                    .ok_or_else(|| missing(action))?;
                let from = self.mesh.coords(*from).stage;
                let data = self.comms.pp.recv(from, tag(*flow, m.micro, m.stage))?;
                sc.inbox.insert(*action, data);
            }
            Op::ReduceGrad {
                chunk,
                bucket,
                scatter,
            } => {
                if self.reduce_fault(input, sc)? {
                    // a non-finite gradient arriving at the reduction
                    let c = &self.chunks[*chunk];
                    let (range, _) = c.bucket_geometry(*bucket);
                    // (a packed word: the f32 NaN's high half is a bf16 NaN)
                    let at = c.words(&c.buffers.grads, range).slice(0, 1);
                    self.gpu.upload(&at, &[f32::NAN])?;
                }
                rec.link = self.reduce(*chunk, *bucket, *scatter, input.serial.as_deref(), sc)?;
            }
            Op::GradNorm => {
                if let Some(g) = input
                    .grad_scale
                    .as_ref()
                    .filter(|g| g.device == self.device)
                {
                    self.scale_grad(g)?;
                }
                self.grad_norm(input.step, sc)?
            }
            Op::Optimizer => {
                let _one = one(input.serial.as_deref());
                let h = self.cfg.adam_at(input.step);
                for c in &self.chunks {
                    sc.stamps.extend(c.optim.step(&h, sc.norm_sq, input.timed)?);
                }
                if input.serial.is_some() {
                    self.gpu.sync()?;
                }
            }
            Op::Unshard { chunk, block } => rec.link = self.unshard(*chunk, *block)?,
            Op::GatherParams { chunk, bucket } => {
                // ZeRO-1: the updated parameters in the chunk's precision (bf16: 2 bytes each)
                let c = &self.chunks[*chunk];
                let p = c.precision;
                let (range, rel) = c.bucket_geometry(*bucket);
                let view = c.words(&c.buffers.params, range);
                let mut words: Vec<u32> = {
                    let _one = one(input.serial.as_deref());
                    self.gpu.download(&view)?
                };
                let bounds: Vec<usize> = rel.iter().map(|b| b / p.per_word()).collect();
                rec.link = comm_call(&mut *self.comms.dp, |c| {
                    crate::comm::all_gather_words(c, p, &mut words, &bounds, *bucket)
                })?;
                let _one = one(input.serial.as_deref());
                self.gpu.upload(&view, &words)?;
            }
        }
        rec.end = input.t0.elapsed().as_secs_f64();
        Ok(rec)
    }
}

/// Under serial timing, the turn of this device on the adapter (compute, or staging that waits
/// for the device) while no other device computes.
fn one(serial: Option<&Turn>) -> Option<Held<'_>> {
    serial.map(Turn::take)
}
