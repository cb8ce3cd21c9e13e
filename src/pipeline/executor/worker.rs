//! One device's thread during a step: its actions in schedule order, inputs from the channels
//! (or a local hand-off), every pass over its tensor-parallel group, outputs to the next
//! stage; an error or a panic becomes a named failure.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::{Device, Event, FaultKind, Key, Options, Payload};
use crate::error::Error;
use crate::model::gpu_model::GpuModel;
use crate::parallel::tensor::{self as tp, Pass};
use crate::pipeline::schedule::{Action, Flow, Kind, Schedule};

pub(super) struct WorkerFailure {
    /// false when the failure is only a consequence of another worker's (a disconnect).
    pub(super) primary: bool,
    pub(super) error: Error,
}

pub(super) fn worker_error(
    device: usize,
    stage: usize,
    action: &str,
    step: usize,
    msg: String,
) -> Error {
    Error::Worker {
        device,
        stage,
        action: action.to_string(),
        step,
        msg,
    }
}

/// The state one device thread works with during one step.
pub(super) struct Worker<'a> {
    pub(super) d: usize,
    pub(super) step: usize,
    pub(super) schedule: &'a Schedule,
    pub(super) batches: &'a [(Vec<u32>, Vec<u32>)],
    pub(super) opts: &'a Options,
    pub(super) serial: &'a Mutex<()>,
    pub(super) t0: Instant,
    pub(super) tx: HashMap<Key, Sender<Payload>>,
    pub(super) rx: HashMap<Key, Receiver<Payload>>,
    /// Hand-offs between chunks on the same device.
    pub(super) local: HashMap<(usize, Flow), Vec<f32>>,
}

impl Worker<'_> {
    pub(super) fn run(
        mut self,
        dev: &mut Device,
    ) -> std::result::Result<(Vec<Event>, f64), WorkerFailure> {
        let mut events = Vec::with_capacity(self.schedule.actions[self.d].len());
        let mut loss = 0.0f64;
        for (i, a) in self.schedule.actions[self.d].iter().enumerate() {
            let stage = self.schedule.stage(self.d, a.chunk);
            let label = self.schedule.label(self.d, a);
            let (d, step) = (self.opts.device_base + self.d * self.opts.tp, self.step);
            let fail = |primary: bool, msg: String| WorkerFailure {
                primary,
                error: worker_error(d, stage, &label, step, msg),
            };
            let fault = self
                .opts
                .fault
                .filter(|f| f.device == self.d && f.action == i && f.step == self.step)
                .map(|f| f.kind);
            match fault {
                Some(FaultKind::Error) => return Err(fail(true, "injected fault".into())),
                Some(FaultKind::DeviceLost) => {
                    return Err(fail(true, "device lost (injected)".into()))
                }
                Some(FaultKind::Stall) => std::thread::sleep(std::time::Duration::from_secs(600)),
                _ => {}
            }
            // a panic inside the action ends this worker with a named error, not a dead thread
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if fault == Some(FaultKind::Panic) {
                    panic!("injected panic");
                }
                self.action(dev, a, stage, &label)
            }));
            let result = match result {
                Ok(r) => r,
                Err(payload) => {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    return Err(fail(true, format!("worker panicked: {what}")));
                }
            };
            match result {
                Ok((ev, l)) => {
                    events.push(ev);
                    loss += l;
                }
                Err((primary, e)) => return Err(fail(primary, e.to_string())),
            }
            if fault == Some(FaultKind::Nan) {
                if a.kind == Kind::F && stage + 1 == self.schedule.stages() {
                    // a forward of the last stage: the loss it computed
                    loss = f64::NAN;
                } else {
                    let m = &dev.chunks[a.chunk].slots[0][0];
                    m.gpu
                        .upload(&m.buffers.grads.slice(0, 1), &[f32::NAN])
                        .map_err(|e| fail(true, e.to_string()))?;
                }
            }
        }
        Ok((events, loss))
    }

    /// Runs one action. Errors carry `primary = false` when caused by a peer's disappearance.
    fn action(
        &mut self,
        dev: &mut Device,
        a: &Action,
        stage: usize,
        label: &str,
    ) -> std::result::Result<(Event, f64), (bool, Error)> {
        let sched = self.schedule;
        let last = stage + 1 == sched.stages();
        let input = match sched.input(self.d, a) {
            Some(m) if m.from == self.d => {
                Some(self.local.remove(&(m.micro, m.flow)).ok_or_else(|| {
                    (
                        true,
                        Error::Config(format!("local hand-off for microbatch {} missing", m.micro)),
                    )
                })?)
            }
            Some(m) => {
                let rx = self
                    .rx
                    .get(&(m.from, m.to, m.flow))
                    .ok_or((true, Error::Config("no channel".into())))?;
                let (micro, src, data) = rx.recv_timeout(self.opts.recv_timeout).map_err(|e| {
                    let primary = matches!(e, crossbeam_channel::RecvTimeoutError::Timeout);
                    (
                        primary,
                        Error::Device(format!(
                            "waiting for {:?} of microbatch {} from device {}: {e}",
                            m.flow, m.micro, m.from
                        )),
                    )
                })?;
                if micro != m.micro || src != m.stage {
                    return Err((
                        true,
                        Error::Config(format!(
                            "expected microbatch {} from stage {}, got {micro} from {src}",
                            m.micro, m.stage
                        )),
                    ));
                }
                Some(data)
            }
            None => None,
        };
        let guard = if self.opts.serial {
            Some(self.serial.lock().unwrap_or_else(|e| e.into_inner()))
        } else {
            None
        };
        let start = self.t0.elapsed().as_secs_f64();
        let chunk = &mut dev.chunks[a.chunk];
        let comm = &mut dev.comm;
        let e = |e: Error| (true, e);
        let mut loss = 0.0;
        let cost;
        let mut out = None;
        match a.kind {
            Kind::F => {
                let slot = (0..chunk.slots.len())
                    .find(|s| !chunk.held.values().any(|h| h == s))
                    .ok_or_else(|| {
                        (
                            true,
                            Error::Config(format!(
                                "stage {stage}: no free activation slot for microbatch {}",
                                a.micro
                            )),
                        )
                    })?;
                chunk.held.insert(a.micro, slot);
                chunk.peak = chunk.peak.max(chunk.held.len());
                let ranks = &chunk.slots[slot];
                let (x, y) = &self.batches[a.micro];
                for m in ranks {
                    match &input {
                        Some(act) => m.gpu.upload(&m.resid[0], act).map_err(e)?,
                        None => m.gpu.upload(&m.tokens, x).map_err(e)?,
                    }
                    if last {
                        m.gpu.upload(&m.targets, y).map_err(e)?;
                    }
                }
                let refs: Vec<&GpuModel> = ranks.iter().collect();
                cost = tp::run_pass(&refs, Pass::Forward, comm, !self.opts.serial).map_err(e)?;
                if last {
                    loss = ranks[0]
                        .losses()
                        .map_err(e)?
                        .iter()
                        .map(|&l| l as f64)
                        .sum();
                } else {
                    out = Some(ranks[0].output().clone());
                }
            }
            Kind::B | Kind::W => {
                let slot = *chunk.held.get(&a.micro).ok_or_else(|| {
                    (
                        true,
                        Error::Config(format!(
                            "stage {stage}: backward of microbatch {} before its forward",
                            a.micro
                        )),
                    )
                })?;
                let ranks = &chunk.slots[slot];
                if let Some(g) = &input {
                    for m in ranks {
                        m.gpu.upload(&m.dresid, g).map_err(e)?;
                    }
                }
                // unsplit B: the whole backward; split: B input gradients, W weight gradients
                let pass = if a.kind == Kind::W {
                    Pass::Weight
                } else {
                    Pass::Backward
                };
                let refs: Vec<&GpuModel> = ranks.iter().collect();
                cost = tp::run_pass(&refs, pass, comm, !self.opts.serial).map_err(e)?;
                if a.kind == Kind::B && stage > 0 {
                    out = Some(ranks[0].dresid.clone());
                }
                if a.kind == Kind::W || !ranks[0].split {
                    chunk.held.remove(&a.micro);
                }
            }
        }
        drop(guard);
        let (mut bytes_out, mut send_time) = (0, 0.0);
        if let (Some(view), Some(msg)) = (out, sched.output(self.d, a)) {
            let ts = Instant::now();
            let data: Vec<f32> = dev.gpus[0].download(&view).map_err(e)?;
            bytes_out = (data.len() * 4) as u64;
            if msg.to == self.d {
                self.local.insert((msg.micro, msg.flow), data);
            } else {
                let tx = self
                    .tx
                    .get(&(msg.from, msg.to, msg.flow))
                    .ok_or((true, Error::Config("no channel".into())))?;
                tx.send((a.micro, stage, data)).map_err(|_| {
                    (
                        false,
                        Error::Device(format!(
                            "device {} stopped before receiving microbatch {}",
                            msg.to, a.micro
                        )),
                    )
                })?;
            }
            send_time = ts.elapsed().as_secs_f64();
        }
        let end = self.t0.elapsed().as_secs_f64();
        let ev = Event {
            device: self.d,
            stage,
            label: label.to_string(),
            action: *a,
            start,
            end,
            compute: cost.compute + cost.comm,
            tp_comm: cost.comm,
            bytes_out,
            send_time,
        };
        Ok((ev, loss))
    }
}
