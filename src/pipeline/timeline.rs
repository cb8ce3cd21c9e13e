//! What a pipeline step cost, on two clocks, next to theory:
//!
//! - **wall clock**: the executor's real intervals. On separate adapters this is the truth; on
//!   virtual devices sharing one adapter, devices slow each other down.
//! - **device clock**: each action's measured kernel time replayed over the schedule's
//!   dependencies with every device an independent resource and each transfer costed by a
//!   [`Link`] — what p independent devices would do.
//!
//! Bubble, as the formula means it: the idle share of the *busiest* device's time,
//! `1 − busy_max / makespan` — for balanced stages exactly `(p−1)/(m+p−1)` under GPipe/1F1B.
//! Stage imbalance is reported apart, `1 − busy_mean / busy_max`, and so is the total idle
//! share of all devices (`idle`), which is roughly bubble + imbalance.
//!
//! Also writes a Chrome trace (opens in Perfetto / chrome://tracing): one track per device,
//! compute on the device clock and the wall clock as separate processes.

use serde_json::json;

use super::event::StepReport;
use super::schedule::{Action, Kind, Schedule};
use super::simulate::{replay, Replay};
use super::theory::bubble;
use crate::error::{Error, Result};
use crate::link::Link;

/// One step, summarised.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub schedule: String,
    pub p: usize,
    pub m: usize,
    pub v: usize,
    /// Analytic bubble of the schedule.
    pub theory: f64,
    pub wall_step: f64,
    /// Idle share of the busiest device on the wall clock.
    pub wall_bubble: f64,
    /// Busy seconds per device on the wall clock (action spans: staging + compute).
    pub wall_busy: Vec<f64>,
    pub device_step: f64,
    /// Idle share of the busiest device on the device clock (comparable with `theory`).
    pub device_bubble: f64,
    /// Idle share of all devices on the device clock (bubble plus imbalance).
    pub device_idle: f64,
    /// Stage imbalance on the device clock: `1 − mean busy / max busy`.
    pub imbalance: f64,
    /// Busy seconds per device on the device clock (kernel time).
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

/// The analytic bubble of `s` (the planner's formula).
pub fn theory(s: &Schedule) -> f64 {
    bubble(s.kind, s.v, s.p, s.m)
}

fn find<'a>(r: &'a StepReport, device: usize, a: &Action) -> Option<&'a super::event::Event> {
    r.events
        .iter()
        .find(|e| e.device == device && e.action == *a)
}

/// The device-clock replay of a measured step over `link`. Every F (B, W) of one stage does
/// identical work, so each action is costed at the median kernel time of its stage's actions of
/// the same kind in this step: scheduler noise on a shared machine drops out, real differences
/// between stages stay.
pub fn device_clock(s: &Schedule, r: &StepReport, link: &Link) -> Result<Replay> {
    let mut by_kind: std::collections::HashMap<(usize, usize, Kind), Vec<f64>> = Default::default();
    for (d, list) in s.actions.iter().enumerate() {
        for a in list {
            let e = find(r, d, a)
                .ok_or_else(|| Error::Config(format!("no measurement for {}", s.label(d, a))))?;
            by_kind
                .entry((d, a.chunk, a.kind))
                .or_default()
                .push(e.compute);
        }
    }
    let median: std::collections::HashMap<(usize, usize, Kind), f64> = by_kind
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            (k, v[v.len() / 2])
        })
        .collect();
    let cost = |d: usize, a: &Action| median.get(&(d, a.chunk, a.kind)).copied().unwrap_or(0.0);
    // bytes sent after an action do not depend on the device: any event of that action
    let bytes = |a: &Action| {
        r.events
            .iter()
            .find(|e| e.action == *a)
            .map_or(0, |e| e.bytes_out)
    };
    replay(s, &cost, link, &bytes)
}

/// Summarises one measured step of `s` on both clocks; `tokens` per step.
pub fn summarize(s: &Schedule, r: &StepReport, link: &Link, tokens: usize) -> Result<Summary> {
    let dev = device_clock(s, r, link)?;
    let mut wall_busy = vec![0.0; s.p];
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
    let wall_bubble = 1.0 - max(&wall_busy) / wall_step;
    let busy_max = max(&dev.busy).max(1e-12);
    let busy_mean = dev.busy.iter().sum::<f64>() / s.p as f64;
    Ok(Summary {
        schedule: s.kind.name().to_string(),
        p: s.p,
        m: s.m,
        v: s.v,
        theory: theory(s),
        wall_step,
        wall_bubble,
        wall_busy,
        device_step: dev.makespan,
        device_bubble: 1.0 - busy_max / dev.makespan.max(1e-12),
        device_idle: dev.bubble,
        imbalance: 1.0 - busy_mean / busy_max,
        device_busy: dev.busy.clone(),
        tokens_per_s_wall: tokens as f64 / wall_step,
        tokens_per_s_device: tokens as f64 / dev.makespan.max(1e-12),
        peak_held: r.peak_held.clone(),
        memory: r.memory.clone(),
        link: link.name.to_string(),
    })
}

/// A Chrome trace of one step: process 0 = device clock (one thread per device, plus one per
/// link direction), process 1 = wall clock (one thread per device).
pub fn chrome_trace(s: &Schedule, r: &StepReport, link: &Link) -> Result<serde_json::Value> {
    let dev = device_clock(s, r, link)?;
    let us = |t: f64| t * 1e6;
    let mut ev = Vec::new();
    for (pid, name) in [
        (0, format!("device clock ({})", link.name)),
        (1, "wall clock".to_string()),
    ] {
        ev.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}));
        for d in 0..s.p {
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": d, "args": {"name": format!("device {d}")}}));
        }
    }
    for sp in &dev.actions {
        ev.push(json!({"ph": "X", "pid": 0, "tid": sp.device, "name": s.label(sp.device, &sp.action),
            "cat": format!("{:?}", sp.action.kind), "ts": us(sp.start), "dur": us(sp.end - sp.start)}));
    }
    for t in &dev.transfers {
        let tid = 100 + t.from * s.p + t.to;
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": format!("link {}→{}", t.from, t.to)}}));
        ev.push(json!({"ph": "X", "pid": 0, "tid": tid, "name": format!("{} {} B", s.label(t.from, &t.action), t.bytes),
            "cat": "transfer", "ts": us(t.start), "dur": us(t.end - t.start)}));
    }
    for e in &r.events {
        ev.push(json!({"ph": "X", "pid": 1, "tid": e.device, "name": e.label, "cat": "wall",
            "ts": us(e.start), "dur": us(e.end - e.start), "args": {"kernel_s": e.compute, "bytes_out": e.bytes_out}}));
    }
    Ok(json!({"traceEvents": ev, "displayTimeUnit": "ms"}))
}
