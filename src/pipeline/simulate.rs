//! The unit-cost simulator: the schedule's dependency graph replayed with every device an
//! independent resource that runs its list in order. (Measured costs are replayed by the
//! runtime over the lowered programs, `runtime::replay`, which prices communication too.)
//!
//! - [`simulate_unit`]: every action (F, B, and W for zero-bubble) costs one step and transfers
//!   are free. Unit-cost full backward keeps the textbook numbers exact: GPipe and 1F1B take
//!   `2(m+p−1)` steps, bubble `(p−1)/(m+p−1)`; interleaved takes `2(vm+p−1)` chunk steps, bubble
//!   `(p−1)/(vm+p−1)`. (Costing the full backward 2 and F 1 scales the makespan to `3(m+p−1)`
//!   and leaves the fraction unchanged.) ZB-H1 with F = B = W = 1 is the paper's setting:
//!   `3m+p−1` steps for `m ≥ p`, bubble `(p−1)/(3m+p−1)`.
//! - [`simulate_costed`]: the same with F, B and W at given (measured) costs: the bubble the
//!   schedule has on balanced stages with those pass costs, which the pipeline example prints
//!   beside the unit formula (ZB-H1 with W = F/2 idles more than its unit formula says).

use super::schedule::{Kind, Schedule};
use super::validate::{key, validate};
use crate::error::{Error, Result};

/// The unit-cost simulation of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// Steps until the last action ends.
    pub makespan: usize,
    /// Busy steps per device (its number of actions).
    pub busy: Vec<usize>,
    /// Idle steps over all devices: `p·makespan − Σbusy`.
    pub idle: usize,
    /// Idle fraction: `idle / (p·makespan)`.
    pub bubble: f64,
    /// Per device, the most (microbatch, chunk) pairs whose F has run and whose B (W when the
    /// backward is split) has not: activations held, in units of one chunk's microbatch.
    pub peak_activations: Vec<usize>,
    /// Start step of each action, same shape as `Schedule::actions`.
    pub start: Vec<Vec<usize>>,
}

/// Run `s` with unit costs and free transfers. Errors if `s` is not a valid schedule.
pub fn simulate_unit(s: &Schedule) -> Result<SimResult> {
    let timed = engine(s, [1.0; 3])?;
    // unit costs: every time is a small whole number, exact in f64
    let makespan = timed.makespan as usize;
    let start = timed
        .start
        .iter()
        .map(|l| l.iter().map(|&t| t as usize).collect())
        .collect();
    let busy: Vec<usize> = s.actions.iter().map(Vec::len).collect();
    let idle = s.p * makespan - busy.iter().sum::<usize>();
    let bubble = idle as f64 / (s.p * makespan) as f64;
    Ok(SimResult {
        makespan,
        busy,
        idle,
        bubble,
        peak_activations: peak_activations(s),
        start,
    })
}

/// Per device, the most activations held at once (see [`SimResult::peak_activations`]).
pub fn peak_activations(s: &Schedule) -> Vec<usize> {
    let release = if s.kind.split_backward() {
        Kind::W
    } else {
        Kind::B
    };
    s.actions
        .iter()
        .map(|list| {
            let (mut live, mut peak) = (0usize, 0usize);
            for a in list {
                if a.kind == Kind::F {
                    live += 1;
                    peak = peak.max(live);
                } else if a.kind == release {
                    live = live.saturating_sub(1);
                }
            }
            peak
        })
        .collect()
}

/// Start time of every action (shaped like `Schedule::actions`) and the makespan, in units of
/// the costs given.
struct Timed {
    start: Vec<Vec<f64>>,
    makespan: f64,
}

/// The bubble of `s` with each F, B and W costing `cost = [F, B, W]` seconds (B the full
/// backward unless the schedule splits it), every stage alike and transfers free: the formula
/// of the schedule evaluated at measured pass costs instead of units. Idle share of the busiest
/// device over the makespan, as the device clock reports it.
pub fn simulate_costed(s: &Schedule, cost: [f64; 3]) -> Result<f64> {
    if let Some(c) = cost.iter().find(|c| !c.is_finite() || **c < 0.0) {
        return Err(Error::Config(format!(
            "pass costs must be finite and non-negative, got {c} in {cost:?}"
        )));
    }
    let Timed { makespan, .. } = engine(s, cost)?;
    let busy = s
        .actions
        .iter()
        .map(|l| l.iter().map(|a| cost[a.kind as usize]).sum::<f64>())
        .fold(0.0, f64::max);
    Ok(1.0 - busy / makespan.max(f64::MIN_POSITIVE))
}

/// The engine: each device starts its next action as soon as it is free and the action's
/// inputs are there (`cost[kind]` long); messages arrive when their producer ends.
fn engine(s: &Schedule, cost: [f64; 3]) -> Result<Timed> {
    validate(s, usize::MAX)?;
    let n = 3 * s.stages() * s.m;
    // when each (kind, stage, micro) ended; None: not yet
    let mut ended: Vec<Option<f64>> = vec![None; n];
    let mut start: Vec<Vec<f64>> = s
        .actions
        .iter()
        .map(|l| Vec::with_capacity(l.len()))
        .collect();
    let mut free = vec![0.0f64; s.p];
    let mut makespan = 0.0f64;
    loop {
        let mut progress = false;
        for d in 0..s.p {
            while let Some(a) = s.actions[d].get(start[d].len()) {
                let stage = s.stage(d, a.chunk);
                let mut t = free[d];
                let local = match a.kind {
                    Kind::F => None,
                    Kind::B => Some(Kind::F),
                    Kind::W => Some(Kind::B),
                };
                if let Some(k) = local {
                    // earlier in the list (rule 3)
                    t = t.max(ended[key(s, k, stage, a.micro)].unwrap_or(0.0));
                }
                if let Some(msg) = s.input(d, a) {
                    let kind = if a.kind == Kind::F { Kind::F } else { Kind::B };
                    match ended[key(s, kind, msg.stage, a.micro)] {
                        Some(e) => t = t.max(e),
                        None => break,
                    }
                }
                let end = t + cost[a.kind as usize];
                ended[key(s, a.kind, stage, a.micro)] = Some(end);
                start[d].push(t);
                free[d] = end;
                makespan = makespan.max(end);
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    // Unreachable after validate (a valid schedule runs with unbounded channels); kept as an error.
    if let Some(d) = (0..s.p).find(|&d| start[d].len() < s.actions[d].len()) {
        return Err(Error::Config(format!(
            "device {d} of the {} schedule cannot make progress",
            s.kind
        )));
    }
    Ok(Timed { start, makespan })
}
