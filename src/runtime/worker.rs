//! One device's worker: it owns only its device — its chunks' buffers, models and optimizers —
//! and its communicators (pipeline, tensor- and data-parallel groups, and the world for the
//! gradient norm), and runs its program op by op. Host staging is spelled out in every
//! communication op: download → communicator → upload.
//!
//! A failing op (an error, a panic, a lost device, a non-finite gradient) ends the worker's
//! step with an error naming its device, stage, action and step, and aborts its communicators,
//! so every peer waiting on it stops at once instead of waiting out a timeout.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use super::chunk::Chunk;
use super::ir::Op;
use super::norm::{verdict, Share};
use crate::collective::{Algo, Ledger};
use crate::comm::{Communicator, Tag};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::mesh::{Coords, Mesh};
use crate::parallel::tensor::{split_of, Split};
use crate::pipeline::executor::{Fault, FaultKind};
use crate::pipeline::schedule::{Action, Flow, Kind, Schedule};
use crate::step::{StepStats, TrainConfig};

/// A worker's communicators.
pub struct Comms {
    /// The pipeline devices of this (replica, tensor rank): rank = pipeline position.
    pub pp: Box<dyn Communicator>,
    /// The tensor-parallel group of this (replica, stage): rank = tensor rank.
    pub tp: Box<dyn Communicator>,
    /// The data-parallel group of this (stage, tensor rank): rank = replica.
    pub dp: Box<dyn Communicator>,
    /// Every device: rank = global device.
    pub world: Box<dyn Communicator>,
}

impl Comms {
    fn all(&self) -> [&dyn Communicator; 4] {
        [&*self.pp, &*self.tp, &*self.dp, &*self.world]
    }
    fn set_step(&mut self, s: usize) {
        for c in [&mut self.pp, &mut self.tp, &mut self.dp, &mut self.world] {
            c.ledger_mut().step = s;
        }
    }
}

/// What one op did: wall interval (seconds from the step start), kernel time, link-model
/// time of its communication, bytes it sent.
#[derive(Clone, Debug, Default)]
pub struct OpRecord {
    pub start: f64,
    pub end: f64,
    pub device: f64,
    pub link: f64,
    pub bytes: u64,
}

/// A worker's step: a record per op and the step's statistics.
pub struct WorkerRun {
    pub records: Vec<OpRecord>,
    pub stats: StepStats,
}

pub(super) struct Failure {
    /// false when only the consequence of a peer's failure.
    pub primary: bool,
    pub error: Error,
}

/// The per-step inputs every worker shares.
pub(super) struct StepIn<'a> {
    /// This replica's microbatches.
    pub batches: &'a [(Vec<u32>, Vec<u32>)],
    pub step: usize,
    pub fault: Option<Fault>,
    /// A fault in the `action`-th gradient reduction of `device` instead of a pass.
    pub reduce_fault: Option<Fault>,
    pub serial: Option<&'a Mutex<()>>,
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
}

/// The step's working state of one worker.
#[derive(Default)]
struct Scratch {
    /// Inputs that arrived, by the consuming action.
    inbox: HashMap<Action, Vec<f32>>,
    /// Outputs waiting for their send, by the producing action.
    outbox: HashMap<Action, Vec<f32>>,
    loss: f64,
    /// The schedule action the current compute belongs to, and its index in the list.
    action: usize,
    reductions: usize,
    local_bad: Option<(usize, String)>,
    norm_sq: f32,
    mean_loss: f32,
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
            Op::GradNorm => (self.stage_of(0), "gradient norm".into()),
            Op::Optimizer => (self.stage_of(0), "optimizer".into()),
        }
    }

    /// Runs this worker's program for step `input.step`.
    pub(super) fn run_step(&mut self, input: &StepIn) -> std::result::Result<WorkerRun, Failure> {
        let s = input.step;
        self.comms.set_step(s);
        let mut sc = Scratch::default();
        let mut records = Vec::with_capacity(self.ops.len());
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
        Ok(WorkerRun {
            records,
            stats: StepStats {
                loss: sc.mean_loss,
                grad_norm: sc.norm_sq.sqrt(),
                lr: self.cfg.lr_at(s),
            },
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
                let _one = input
                    .serial
                    .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
                rec.device = self.compute(action, segs.clone(), input, sc)?;
            }
            Op::TpAllReduce { action, cut } => {
                let c = &self.chunks[action.chunk];
                let slot = *c.held.get(&action.micro).ok_or_else(|| missing(action))?;
                let view = c.cut_view(slot, action.kind, *cut)?;
                let mut host: Vec<f32> = self.gpu.download(&view)?;
                rec.link = comm_call(&mut *self.comms.tp, |c| {
                    c.all_reduce(&mut host, Algo::Ring, None, false)
                })?;
                self.gpu.upload(&view, &host)?;
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
                    self.gpu
                        .upload(&c.buffers.grads.slice(range.start, 1), &[f32::NAN])?;
                }
                rec.link = self.reduce(*chunk, *bucket, *scatter, sc)?;
            }
            Op::GradNorm => self.grad_norm(input.step, sc)?,
            Op::Optimizer => {
                let _one = input
                    .serial
                    .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
                let h = self.cfg.adam_at(input.step);
                let t = Instant::now();
                for c in &self.chunks {
                    c.optim.step(&h, sc.norm_sq)?;
                }
                self.gpu.sync()?;
                rec.device = t.elapsed().as_secs_f64();
            }
            Op::GatherParams { chunk, bucket } => {
                let c = &self.chunks[*chunk];
                let (range, rel) = c.bucket_geometry(*bucket);
                let view = c.buffers.params.slice(range.start, range.len());
                let mut host: Vec<f32> = self.gpu.download(&view)?;
                rec.link = comm_call(&mut *self.comms.dp, |c| c.all_gather(&mut host, &rel))?;
                self.gpu.upload(&view, &host)?;
            }
        }
        rec.end = input.t0.elapsed().as_secs_f64();
        Ok(rec)
    }

    /// Segments `segs` of `a`: inputs before the first, outputs and hooks after the last.
    fn compute(
        &mut self,
        a: &Action,
        segs: std::ops::Range<usize>,
        input: &StepIn,
        sc: &mut Scratch,
    ) -> Result<f64> {
        let stage = self.stage_of(a.chunk);
        let last_stage = stage + 1 == self.schedule.stages();
        let n = self.chunks[a.chunk].segments[pass(a.kind)].len();
        let fault = input
            .fault
            .filter(|f| f.device == self.device && f.step == input.step);
        if segs.start == 0 {
            if fault.is_some_and(|f| f.action == sc.action) {
                match fault.map(|f| f.kind) {
                    Some(FaultKind::Error) => return Err(Error::Device("injected fault".into())),
                    Some(FaultKind::DeviceLost) => {
                        return Err(Error::Device("device lost (injected)".into()))
                    }
                    Some(FaultKind::Panic) => panic!("injected panic"),
                    Some(FaultKind::Stall) => {
                        std::thread::sleep(std::time::Duration::from_secs(600))
                    }
                    _ => {}
                }
            }
            self.stage_in(a, last_stage, input, sc)?;
        }
        let c = &self.chunks[a.chunk];
        let slot = *c.held.get(&a.micro).ok_or_else(|| missing(a))?;
        let t = self
            .gpu
            .run_timed(c.ops(slot, a.kind, &segs))?
            .as_secs_f64();
        if segs.end == n {
            self.stage_out(a, slot, last_stage, sc)?;
            if fault.is_some_and(|f| f.action == sc.action && f.kind == FaultKind::Nan) {
                if a.kind == Kind::F && last_stage {
                    sc.loss = f64::NAN;
                } else {
                    let g = &self.chunks[a.chunk].buffers.grads;
                    self.gpu.upload(&g.slice(0, 1), &[f32::NAN])?;
                }
            }
            sc.action += 1;
        }
        Ok(t)
    }

    /// Before a pass: a slot for a forward, its input (tokens, or the received activation /
    /// gradient), the targets on the last stage.
    fn stage_in(&mut self, a: &Action, last: bool, input: &StepIn, sc: &mut Scratch) -> Result<()> {
        let c = &mut self.chunks[a.chunk];
        let slot = match a.kind {
            Kind::F => {
                let free = (0..c.slots.len())
                    .find(|s| !c.held.values().any(|h| h == s))
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "stage {}: no free activation slot for microbatch {}",
                            c.stage, a.micro
                        ))
                    })?;
                c.held.insert(a.micro, free);
                c.peak = c.peak.max(c.held.len());
                free
            }
            _ => *c.held.get(&a.micro).ok_or_else(|| missing(a))?,
        };
        let m = &c.slots[slot];
        let got = sc.inbox.remove(a);
        match (a.kind, got) {
            (Kind::F, Some(act)) => self.gpu.upload(&m.resid[0], &act)?,
            (Kind::F, None) => {
                let (x, _) = batch(input, a.micro)?;
                self.gpu.upload(&m.tokens, x)?
            }
            (Kind::B, Some(g)) => self.gpu.upload(&m.dresid, &g)?,
            _ => {}
        }
        if a.kind == Kind::F && last {
            let (_, y) = batch(input, a.micro)?;
            self.gpu.upload(&m.targets, y)?;
        }
        Ok(())
    }

    /// After a pass: the loss (last stage), the output for the next stage (to the outbox, or
    /// straight to the inbox of a chunk on this device), the slot freed after its backward.
    fn stage_out(&mut self, a: &Action, slot: usize, last: bool, sc: &mut Scratch) -> Result<()> {
        let c = &mut self.chunks[a.chunk];
        let m = &c.slots[slot];
        if a.kind == Kind::F && last {
            sc.loss += m.losses()?.iter().map(|&l| l as f64).sum::<f64>();
        }
        let out = match a.kind {
            Kind::F if !last => Some(m.output()),
            Kind::B if c.stage > 0 => Some(&m.dresid),
            _ => None,
        };
        if let (Some(view), Some(msg)) = (out, self.schedule.output(self.place.stage, a)) {
            let data: Vec<f32> = self.gpu.download(view)?;
            if msg.to == self.place.stage {
                let (_, chunk) = self.schedule.place(match msg.flow {
                    Flow::Activation => msg.stage + 1,
                    Flow::Gradient => msg.stage - 1,
                });
                let kind = if msg.flow == Flow::Activation {
                    Kind::F
                } else {
                    Kind::B
                };
                let consumer = Action {
                    kind,
                    micro: a.micro,
                    chunk,
                };
                sc.inbox.insert(consumer, data);
            } else {
                sc.outbox.insert(*a, data);
            }
        }
        if a.kind == Kind::W || (a.kind == Kind::B && !m.split) {
            c.held.remove(&a.micro);
        }
        Ok(())
    }

    /// Bucket `bucket` of chunk `chunk` over the data-parallel group: download, check it is
    /// finite (so a NaN is named where it started), sum (or reduce-scatter), upload.
    fn reduce(
        &mut self,
        chunk: usize,
        bucket: usize,
        scatter: bool,
        sc: &mut Scratch,
    ) -> Result<f64> {
        let rank = self.place.replica;
        let stage = self.stage_of(chunk);
        let c = &self.chunks[chunk];
        let (range, rel) = c.bucket_geometry(bucket);
        let view = c.buffers.grads.slice(range.start, range.len());
        let mut host: Vec<f32> = self.gpu.download(&view)?;
        if sc.local_bad.is_none() {
            if let Some(i) = host.iter().position(|x| !x.is_finite()) {
                let at = range.start + i;
                let layout = &c.buffers.layout;
                let name = layout
                    .tensors
                    .iter()
                    .find(|t| (t.offset..t.offset + t.len.max(1)).contains(&at))
                    .map_or("a padding element".to_string(), |t| t.name.clone());
                sc.local_bad = Some((stage, name));
            }
        }
        let link = if scatter {
            let l = comm_call(&mut *self.comms.dp, |d| {
                d.reduce_scatter(&mut host, &rel, false)
            })?;
            let own = c.own_part(bucket, rank);
            let rel_own = own.start - range.start..own.end - range.start;
            if !own.is_empty() {
                let dst = c.buffers.grads.slice(own.start, own.len());
                self.gpu.upload(&dst, &host[rel_own])?;
            }
            l
        } else {
            let l = comm_call(&mut *self.comms.dp, |d| {
                d.all_reduce(&mut host, Algo::Ring, Some(&rel), false)
            })?;
            self.gpu.upload(&view, &host)?;
            l
        };
        Ok(link)
    }

    /// The reduction fault hook: fails in the `action`-th gradient reduction of the step
    /// (`true`: the bucket is to be poisoned with a NaN).
    fn reduce_fault(&self, input: &StepIn, sc: &mut Scratch) -> Result<bool> {
        let i = sc.reductions;
        sc.reductions += 1;
        let hit = input
            .reduce_fault
            .filter(|f| f.device == self.device && f.step == input.step && f.action == i);
        match hit.map(|f| f.kind) {
            Some(FaultKind::Panic) => panic!("injected panic"),
            Some(FaultKind::Nan) => Ok(true),
            None => Ok(false),
            Some(FaultKind::Stall) => {
                std::thread::sleep(std::time::Duration::from_secs(600));
                Ok(false)
            }
            Some(k) => Err(Error::Device(format!("injected fault ({k:?})"))),
        }
    }

    /// The world's byte all-gather of every device's share; the verdict every device reaches.
    fn grad_norm(&mut self, step: usize, sc: &mut Scratch) -> Result<()> {
        let last = self
            .chunks
            .iter()
            .any(|c| c.stage + 1 == self.schedule.stages());
        let counts = self.mesh.zero == 1 || self.place.replica == 0;
        let mut share = Share {
            device: self.device,
            stage: self.chunks[0].stage,
            loss: if self.place.tp_rank == 0 {
                sc.loss
            } else {
                0.0
            },
            has_loss: last && self.place.tp_rank == 0,
            parts: Vec::new(),
            local_bad: sc.local_bad.clone(),
        };
        for c in &self.chunks {
            for p in c.optim.parts_sq()? {
                let whole_copy = self.place.tp_rank > 0 && split_of(&p.tensor) == Split::Whole;
                if counts && !whole_copy {
                    share.parts.push((c.stage, p));
                } else if !p.sq.is_finite() && share.local_bad.is_none() {
                    // a part nobody counts (a replica's or a tensor rank's copy) is checked
                    // here, so a NaN in a copy cannot slip into its optimizer step
                    share.local_bad = Some((c.stage, p.tensor));
                }
            }
        }
        let all = self.comms.world.all_gather_bytes(share.encode())?;
        let shares = all
            .iter()
            .map(|b| Share::decode(b))
            .collect::<Result<Vec<_>>>()?;
        let (loss, norm_sq) = verdict(&shares, &self.canonical, step)?;
        let tokens = (self.cfg.tokens_per_step() * self.mesh.dp) as f64;
        sc.mean_loss = (loss / tokens) as f32;
        sc.norm_sq = norm_sq;
        Ok(())
    }
}

fn pass(kind: Kind) -> usize {
    match kind {
        Kind::F => 0,
        Kind::B => 1,
        Kind::W => 2,
    }
}

fn missing(a: &Action) -> Error {
    Error::Config(format!("{a:?}: its input or activations are missing"))
}

fn batch<'a>(input: &'a StepIn, micro: usize) -> Result<&'a (Vec<u32>, Vec<u32>)> {
    input
        .batches
        .get(micro)
        .ok_or_else(|| Error::Config(format!("microbatch {micro} is missing from the step")))
}

fn tag(flow: Flow, micro: usize, stage: usize) -> Tag {
    Tag {
        flow: match flow {
            Flow::Activation => 0,
            Flow::Gradient => 1,
        },
        micro,
        stage,
    }
}

/// Runs one communicator call; returns the link-model seconds of the hops it recorded.
fn comm_call(
    c: &mut dyn Communicator,
    f: impl FnOnce(&mut dyn Communicator) -> Result<()>,
) -> Result<f64> {
    let before = c.ledger().entries.len();
    f(c)?;
    let entries = c.ledger().entries[before..].to_vec();
    Ok(Ledger {
        entries,
        ..Ledger::default()
    }
    .link_clock())
}
