//! What a pipeline step cost, on two clocks, next to theory — replica 0's devices:
//!
//! - **wall clock**: the workers' real op intervals. On separate adapters this is the truth; on
//!   virtual devices sharing one adapter, devices slow each other down.
//! - **device clock**: the runtime's one replay of the step ([`Runtime::clock`]): every op at
//!   its measured kernel time (each pass at the median of its kind on its device), every
//!   message and collective at its link-model time, each device an independent resource —
//!   what independent devices would do. The bubble in [`crate::engine::StepCosts`] is the same
//!   replay.
//!
//! Bubble, as the formula means it: the idle share of the *busiest* device's time over the
//! span of the passes, `1 − busy_max / span` — for balanced stages exactly `(p−1)/(m+p−1)`
//! under GPipe/1F1B. Stage imbalance is reported apart, `1 − busy_mean / busy_max`, and so is
//! the total idle share of all devices (`idle`), which is roughly bubble + imbalance. Beside
//! the unit formula, `costed` is the schedule's bubble at the step's own median F, B and W
//! (balanced stages, free transfers): what the formula says once the passes are not equal.
//!
//! Also writes a Chrome trace (opens in Perfetto / chrome://tracing): one track per device,
//! compute on the device clock and the wall clock as separate processes.

use std::collections::HashMap;

use serde_json::json;

use super::exec::{Runtime, RuntimeStep};
use super::ir::Op;
use super::replay::Clock;
use crate::error::Result;
use crate::mesh::Coords;
use crate::pipeline::schedule::Action;
use crate::pipeline::simulate_costed;
use crate::pipeline::theory::theory;

/// One step, summarised.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub schedule: String,
    pub p: usize,
    pub m: usize,
    pub v: usize,
    /// Analytic bubble of the schedule.
    pub theory: f64,
    /// The schedule's bubble on balanced stages at this step's pass costs (the median F, B and
    /// W of replica 0's devices on the device clock), transfers free: `theory` with measured
    /// costs in place of units ([`crate::pipeline::simulate_costed`]).
    pub costed: f64,
    pub wall_step: f64,
    /// Idle share of the busiest device on the wall clock.
    pub wall_bubble: f64,
    /// Busy seconds per pipeline device on the wall clock (pass spans: staging + compute).
    pub wall_busy: Vec<f64>,
    /// Device-clock seconds of the passes (from the step's start to the last pass's end).
    pub device_step: f64,
    /// Idle share of the busiest device on the device clock (comparable with `theory`).
    pub device_bubble: f64,
    /// Idle share of all devices on the device clock (bubble plus imbalance).
    pub device_idle: f64,
    /// Stage imbalance on the device clock: `1 − mean busy / max busy`.
    pub imbalance: f64,
    /// Busy seconds per pipeline device on the device clock (kernels and tensor-parallel
    /// all-reduces; the slowest tensor rank).
    pub device_busy: Vec<f64>,
    pub tokens_per_s_wall: f64,
    pub tokens_per_s_device: f64,
    /// Most microbatches' activations held at once, per stage.
    pub peak_held: Vec<usize>,
    pub link: String,
    /// Per GPU: the memory ledger's current bytes and peaks (parameters, gradients, optimizer
    /// state, activations, staging).
    pub memory: Vec<crate::memory::Usage>,
}

impl Runtime {
    /// The global devices of replica 0 at pipeline position `pos`, one per tensor rank.
    fn at_position(&self, pos: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.mesh.tp).map(move |k| {
            self.mesh.device(Coords {
                replica: 0,
                stage: pos,
                tp_rank: k,
            })
        })
    }

    /// Replica 0's step `run` on both clocks, `clock` its device clock ([`Runtime::clock`]);
    /// `tokens` per step (all replicas).
    pub fn summary(&self, run: &RuntimeStep, clock: &Clock, tokens: usize) -> Result<Summary> {
        let r = self.report(run, 0)?;
        let p = self.mesh.pp;
        let mut wall_busy = vec![0.0; p];
        for e in &r.events {
            wall_busy[e.device] += e.end - e.start;
        }
        let first = r
            .events
            .iter()
            .map(|e| e.start)
            .fold(f64::INFINITY, f64::min);
        let last = r.events.iter().map(|e| e.end).fold(0.0, f64::max);
        let wall_step = (last - first).max(1e-12);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let device_busy: Vec<f64> = (0..p)
            .map(|pos| {
                self.at_position(pos)
                    .map(|d| clock.busy[d])
                    .fold(0.0, f64::max)
            })
            .collect();
        let span = (0..p)
            .flat_map(|pos| self.at_position(pos))
            .map(|d| clock.passes_end[d])
            .fold(0.0, f64::max)
            .max(1e-12);
        let busy_max = max(&device_busy).max(1e-12);
        let busy_sum: f64 = device_busy.iter().sum();
        let s = &self.schedule;
        Ok(Summary {
            schedule: s.kind.name().to_string(),
            p: s.p,
            m: s.m,
            v: s.v,
            theory: theory(s),
            costed: simulate_costed(s, self.pass_costs(clock))?,
            wall_step,
            wall_bubble: 1.0 - max(&wall_busy) / wall_step,
            wall_busy,
            device_step: span,
            device_bubble: clock.bubble(0..p * self.mesh.tp),
            device_idle: 1.0 - busy_sum / (p as f64 * span),
            imbalance: 1.0 - busy_sum / p as f64 / busy_max,
            device_busy,
            tokens_per_s_wall: tokens as f64 / wall_step,
            tokens_per_s_device: tokens as f64 / span,
            peak_held: r.peak_held,
            memory: r.memory,
            link: self.opts.link.name.to_string(),
        })
    }

    /// Median device-clock seconds of each pass kind `[F, B, W]` over replica 0's devices (tensor
    /// rank 0 for its stage; a pass cut into segments counts as their sum; 0 for a kind the
    /// schedule does not run).
    fn pass_costs(&self, clock: &Clock) -> [f64; 3] {
        let mut by: [Vec<f64>; 3] = Default::default();
        for pos in 0..self.mesh.pp {
            let Some(d) = self.at_position(pos).next() else {
                continue;
            };
            let mut passes: HashMap<Action, f64> = HashMap::new();
            for (op, &(a, e)) in self.plan.programs[d].ops.iter().zip(&clock.spans[d]) {
                if let Op::Compute { action, .. } = op {
                    *passes.entry(*action).or_default() += e - a;
                }
            }
            for (a, t) in passes {
                by[a.kind as usize].push(t);
            }
        }
        by.map(|mut v| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        })
    }

    /// A Chrome trace of replica 0's step: process 0 = device clock (one thread per device,
    /// plus one per link direction), process 1 = wall clock (one thread per device).
    pub fn chrome_trace(&self, run: &RuntimeStep, clock: &Clock) -> Result<serde_json::Value> {
        let r = self.report(run, 0)?;
        let s = &self.schedule;
        let us = |t: f64| t * 1e6;
        let mut ev = Vec::new();
        for (pid, name) in [
            (0, format!("device clock ({})", self.opts.link.name)),
            (1, "wall clock".to_string()),
        ] {
            ev.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}));
            for d in 0..s.p {
                ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": d, "args": {"name": format!("device {d}")}}));
            }
        }
        for pos in 0..s.p {
            // tensor rank 0 stands for its stage
            let Some(d) = self.at_position(pos).next() else {
                continue;
            };
            let records = &run.runs[d].records;
            let ops = self.plan.programs[d].ops.iter().zip(&clock.spans[d]);
            for ((op, &(a, e)), rec) in ops.zip(records) {
                match op {
                    Op::Compute { action, .. } => {
                        ev.push(
                            json!({"ph": "X", "pid": 0, "tid": pos, "name": s.label(pos, action),
                            "cat": format!("{:?}", action.kind), "ts": us(a), "dur": us(e - a)}),
                        );
                    }
                    Op::Send { action, to, .. } => {
                        let to = self.mesh.coords(*to).stage;
                        let tid = 100 + pos * s.p + to;
                        ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": format!("link {pos}→{to}")}}));
                        ev.push(
                            json!({"ph": "X", "pid": 0, "tid": tid, "name": format!("{} {} B", s.label(pos, action), rec.bytes),
                            "cat": "transfer", "ts": us(a), "dur": us(e - a)}),
                        );
                    }
                    _ => {}
                }
            }
        }
        for e in &r.events {
            ev.push(json!({"ph": "X", "pid": 1, "tid": e.device, "name": e.label, "cat": "wall",
                "ts": us(e.start), "dur": us(e.end - e.start), "args": {"kernel_s": e.compute, "bytes_out": e.bytes_out}}));
        }
        Ok(json!({"traceEvents": ev, "displayTimeUnit": "ms"}))
    }
}
