//! The device clock of a whole step: every device's program replayed with measured kernel
//! times and link-model communication times, communication included.
//!
//! ```text
//! device d:  compute stream ── F/B/W, AdamW, tensor-parallel all-reduces (blocking, as in Megatron)
//!            comm stream    ── gradient reductions, ZeRO gathers (async: overlap compute; a
//!                              ZeRO-3 block's compute waits for its gather, issued one block ahead)
//!            link (d → e)   ── pipeline sends, one message at a time per direction
//! a collective starts when its whole group has reached it; the gradient norm waits for the
//! device's comm stream (every bucket reduced) and for every device
//! ```
//!
//! Exposed data-parallel communication is the step's makespan minus the makespan of the same
//! replay with data-parallel reductions and gathers free ([`Free`] frees any axis); the pipeline
//! bubble is measured over the span of the passes (F, B, W), as the schedule's theory counts it.
//! A plan of the first replicas only ([`super::lower::lower_replicas`]) replays with each
//! group cut to the devices it holds: identical replicas reach every collective at the same
//! time, so the figures are those of the whole mesh when each op's cost is the whole group's.

use std::collections::{HashMap, VecDeque};

use super::check::group;
use super::ir::{Op, Plan};
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::pipeline::schedule::Flow;

/// The replayed step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Clock {
    /// Device-clock seconds of the step (the last stream of any device to finish).
    pub makespan: f64,
    /// Per device: seconds of its passes' kernels and tensor-parallel all-reduces.
    pub busy: Vec<f64>,
    /// Per device: when its last pass ended.
    pub passes_end: Vec<f64>,
    /// Per device: link-model seconds of its data-parallel reductions and gathers.
    pub dp_comm: Vec<f64>,
    /// Seconds the step is longer because of data-parallel communication.
    pub exposed_dp: f64,
    /// Per device, per op of its program: (start, end) on the device clock. A send spans its
    /// time on the link, a receive its wait, a collective its whole group's time.
    pub spans: Vec<Vec<(f64, f64)>>,
}

impl Clock {
    /// Idle share of the busiest device over the span of the passes (replica 0's devices,
    /// `first..first + n`).
    pub fn bubble(&self, devices: std::ops::Range<usize>) -> f64 {
        let span = devices
            .clone()
            .map(|d| self.passes_end[d])
            .fold(0.0, f64::max);
        let busy = devices.map(|d| self.busy[d]).fold(0.0, f64::max);
        1.0 - busy / span.max(1e-12)
    }
}

fn is_dp(op: &Op) -> bool {
    matches!(
        op,
        Op::ReduceGrad { .. } | Op::GatherParams { .. } | Op::Unshard { .. }
    )
}

/// Replays `plan` with `cost[d][i]`, the seconds of op i of device d (kernel seconds for
/// compute and the optimizer, link-model seconds for communication).
pub fn replay(plan: &Plan, mesh: &Mesh, cost: &[Vec<f64>]) -> Result<Clock> {
    let full = replay_free(plan, mesh, cost, Free::default())?;
    let free = replay_free(plan, mesh, cost, Free::DP)?;
    Ok(Clock {
        exposed_dp: (full.makespan - free.makespan).max(0.0),
        ..full
    })
}

/// Which communication a replay takes as free (zero seconds): the makespan without it, less the
/// makespan with it, is the part of it the step exposes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Free {
    /// Data-parallel reductions and gathers.
    pub dp: bool,
    /// Tensor-parallel all-reduces.
    pub tp: bool,
    /// Pipeline sends.
    pub pp: bool,
}

impl Free {
    pub const DP: Free = Free {
        dp: true,
        tp: false,
        pp: false,
    };
    pub const TP: Free = Free {
        dp: false,
        tp: true,
        pp: false,
    };
    pub const PP: Free = Free {
        dp: false,
        tp: false,
        pp: true,
    };
}

/// Replays `plan` as [`replay`] does with the communication `free` takes as free
/// (`exposed_dp` left 0).
pub fn replay_free(plan: &Plan, mesh: &Mesh, cost: &[Vec<f64>], free: Free) -> Result<Clock> {
    let n = plan.programs.len();
    if cost.len() != n
        || cost
            .iter()
            .zip(&plan.programs)
            .any(|(c, p)| c.len() != p.ops.len())
    {
        return Err(Error::Config(
            "the replay needs one time per op of every program".into(),
        ));
    }
    let mut pc = vec![0usize; n];
    let (mut compute, mut comm) = (vec![0.0f64; n], vec![0.0f64; n]);
    let mut clock = Clock {
        busy: vec![0.0; n],
        passes_end: vec![0.0; n],
        dp_comm: vec![0.0; n],
        spans: plan
            .programs
            .iter()
            .map(|p| vec![(0.0, 0.0); p.ops.len()])
            .collect(),
        ..Clock::default()
    };
    let mut link_free: HashMap<(usize, usize), f64> = HashMap::new();
    let mut arrivals: HashMap<(usize, usize, Flow), VecDeque<f64>> = HashMap::new();
    // ZeRO-3: when each (device, chunk, block)'s gathered parameters are in place
    let mut gathered: HashMap<(usize, usize, usize), f64> = HashMap::new();
    loop {
        let mut moved = false;
        for d in 0..n {
            let p = &plan.programs[d];
            while let Some(op) = p.ops.get(pc[d]) {
                let c = cost[d][pc[d]];
                match op {
                    Op::Compute { action, segs } => {
                        let shape = &plan.shapes[p.place.stage][action.chunk];
                        if shape.gather {
                            let block = shape.block_of(action.kind, segs.start);
                            let at = gathered.get(&(d, action.chunk, block)).copied();
                            compute[d] = compute[d].max(at.unwrap_or(0.0));
                        }
                        clock.spans[d][pc[d]] = (compute[d], compute[d] + c);
                        compute[d] += c;
                        clock.busy[d] += c;
                        clock.passes_end[d] = compute[d];
                    }
                    Op::Optimizer => {
                        let start = compute[d].max(comm[d]);
                        compute[d] = start + c;
                        clock.spans[d][pc[d]] = (start, compute[d]);
                    }
                    Op::Send { to, flow, .. } => {
                        let c = if free.pp { 0.0 } else { c };
                        let l = link_free.entry((d, *to)).or_insert(0.0);
                        let start = l.max(compute[d]);
                        *l = start + c;
                        clock.spans[d][pc[d]] = (start, start + c);
                        arrivals
                            .entry((d, *to, *flow))
                            .or_default()
                            .push_back(start + c);
                    }
                    Op::Recv { from, flow, .. } => {
                        match arrivals
                            .get_mut(&(*from, d, *flow))
                            .and_then(VecDeque::pop_front)
                        {
                            Some(t) => {
                                clock.spans[d][pc[d]] = (compute[d], compute[d].max(t));
                                compute[d] = compute[d].max(t);
                            }
                            None => break,
                        }
                    }
                    other => {
                        let mut g = group(mesh, p.place, other).unwrap_or_default();
                        g.retain(|&q| q < n);
                        // every member must stand at this same call
                        let all = g
                            .iter()
                            .all(|&q| plan.programs[q].ops.get(pc[q]) == Some(other));
                        if !all {
                            break;
                        }
                        let dp = is_dp(other);
                        let ready = |q: usize| match other {
                            Op::GradNorm => compute[q].max(comm[q]),
                            _ if dp => compute[q].max(comm[q]),
                            _ => compute[q],
                        };
                        let start = g.iter().map(|&q| ready(q)).fold(0.0, f64::max);
                        let dur = g.iter().map(|&q| cost[q][pc[q]]).fold(0.0, f64::max);
                        let tp = matches!(other, Op::TpAllReduce { .. });
                        let dur = if (dp && free.dp) || (tp && free.tp) {
                            0.0
                        } else {
                            dur
                        };
                        for &q in &g {
                            clock.spans[q][pc[q]] = (start, start + dur);
                            if let Op::Unshard { chunk, block } = other {
                                gathered.insert((q, *chunk, *block), start + dur);
                            }
                            if dp {
                                comm[q] = start + dur;
                                clock.dp_comm[q] += dur;
                            } else {
                                compute[q] = start + dur;
                                if tp {
                                    clock.busy[q] += dur;
                                    clock.passes_end[q] = compute[q];
                                }
                            }
                            if q != d {
                                pc[q] += 1;
                            }
                        }
                    }
                }
                pc[d] += 1;
                moved = true;
            }
        }
        if pc
            .iter()
            .zip(&plan.programs)
            .all(|(&i, p)| i >= p.ops.len())
        {
            break;
        }
        if !moved {
            return Err(Error::Config(
                "the replay of the device programs is stuck".into(),
            ));
        }
    }
    clock.makespan = (0..n).map(|d| compute[d].max(comm[d])).fold(0.0, f64::max);
    Ok(clock)
}
