//! What a simulated step is read as: its critical path, in words, and a Chrome trace of chosen
//! devices.
//!
//! ```text
//! critical path   from the op that ends last, back to the step's start: each op's start was
//!                 set by the op before it on its device (same time), by the send its receive
//!                 waited for, or by the group member a collective waited for; the path's time
//!                 split by what it spent it on
//! trace           one row per stream (compute, data-parallel comm) of each chosen device, every
//!                 op a complete event ("X") in µs, named as the plan prints it
//! ```

use super::Simulated;
use crate::runtime::ir::Op;
use crate::runtime::replay::Clock;

/// What a piece of the critical path spent its time on.
pub const PARTS: [&str; 8] = [
    "forward",
    "backward",
    "weight grad",
    "tp all-reduce",
    "pipeline send",
    "dp comm",
    "grad norm",
    "optimizer",
];

fn part(op: &Op) -> usize {
    match op {
        Op::Compute { action, .. } => action.kind.index(),
        Op::TpAllReduce { .. } => 3,
        Op::Send { .. } | Op::Recv { .. } => 4,
        Op::ReduceGrad { .. } | Op::GatherParams { .. } | Op::Unshard { .. } => 5,
        Op::GradNorm => 6,
        Op::Optimizer => 7,
    }
}

/// The critical path of a simulated step.
#[derive(Clone, Debug, PartialEq)]
pub struct CriticalPath {
    /// (device, op index), last op first.
    pub ops: Vec<(usize, usize)>,
    /// Seconds of the path in each of [`PARTS`].
    pub seconds: [f64; 8],
}

impl CriticalPath {
    /// "critical path 1.234 s: backward 41 %, forward 22 %, …; through devices 0–7".
    pub fn words(&self) -> String {
        let total: f64 = self.seconds.iter().sum();
        let mut parts: Vec<(usize, f64)> = self
            .seconds
            .iter()
            .copied()
            .enumerate()
            .filter(|p| p.1 > 0.0)
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let shares: Vec<String> = parts
            .iter()
            .map(|(i, s)| format!("{} {:.0} %", PARTS[*i], 100.0 * s / total.max(1e-300)))
            .collect();
        let mut devices: Vec<usize> = self.ops.iter().map(|o| o.0).collect();
        devices.sort_unstable();
        devices.dedup();
        let through = match devices.len() {
            0 => String::new(),
            1 => format!("; on device {}", devices[0]),
            n if n <= 8 => format!(
                "; through devices {}",
                devices
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            n => format!("; through {n} devices ({}…{})", devices[0], devices[n - 1]),
        };
        format!(
            "critical path {}: {}{through}",
            seconds(total),
            shares.join(", ")
        )
    }
}

/// Seconds as s / ms / µs.
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// The critical path of `sim` (see the module doc).
pub fn critical_path(sim: &Simulated) -> CriticalPath {
    let (plan, clock) = (&sim.plan, &sim.clock);
    let span = |d: usize, i: usize| clock.spans[d][i];
    let eps = 1e-9 * clock.makespan.max(1e-12);
    let near = |a: f64, b: f64| (a - b).abs() <= eps;
    let Some(mut cur) = last_op(clock) else {
        return CriticalPath {
            ops: vec![],
            seconds: [0.0; 8],
        };
    };
    let mut out = CriticalPath {
        ops: vec![],
        seconds: [0.0; 8],
    };
    // every collective's calls by their span: a group's members share one
    let mut calls: std::collections::HashMap<(u64, u64), Vec<(usize, usize)>> = Default::default();
    for p in &plan.programs {
        for (j, op) in p.ops.iter().enumerate() {
            if is_collective(op) {
                let (s, e) = span(p.device, j);
                calls
                    .entry((s.to_bits(), e.to_bits()))
                    .or_default()
                    .push((p.device, j));
            }
        }
    }
    let bound: usize = plan.programs.iter().map(|p| p.ops.len()).sum();
    for _ in 0..=bound {
        let (d, i) = cur;
        let op = &plan.programs[d].ops[i];
        let (s, e) = span(d, i);
        out.ops.push(cur);
        // the op before `i` on device `q` that ended when this one started
        let before = |q: usize, i: usize| match s > eps {
            true => (0..i).rev().find(|&j| near(span(q, j).1, s)),
            false => None,
        };
        let next = match op {
            Op::Recv { from, flow, .. } if e > s + eps => send_of(sim, d, i, *from, *flow),
            Op::Recv { .. } => before(d, i).map(|j| (d, j)),
            _ if is_collective(op) => {
                out.seconds[part(op)] += e - s;
                // the member that came last: a member's op before this call ending at `s`
                calls[&(s.to_bits(), e.to_bits())]
                    .iter()
                    .filter(|&&(q, j)| &plan.programs[q].ops[j] == op)
                    .find_map(|&(q, j)| before(q, j).map(|b| (q, b)))
            }
            _ => {
                out.seconds[part(op)] += e - s;
                before(d, i).map(|j| (d, j))
            }
        };
        match next {
            Some(n) => cur = n,
            None => break,
        }
    }
    out
}

fn is_collective(op: &Op) -> bool {
    matches!(
        op,
        Op::TpAllReduce { .. }
            | Op::ReduceGrad { .. }
            | Op::GatherParams { .. }
            | Op::Unshard { .. }
            | Op::GradNorm
    )
}

/// The op that ends last (the first of the last device's ops at that time).
fn last_op(clock: &Clock) -> Option<(usize, usize)> {
    let mut best: Option<((usize, usize), f64)> = None;
    for (d, spans) in clock.spans.iter().enumerate() {
        for (i, &(_, e)) in spans.iter().enumerate() {
            if best.is_none_or(|(_, b)| e > b) {
                best = Some(((d, i), e));
            }
        }
    }
    best.map(|b| b.0)
}

/// The send that receive `i` of device `d` (from `from`, flow `flow`) took its message from:
/// the k-th such send for the k-th such receive.
fn send_of(
    sim: &Simulated,
    d: usize,
    i: usize,
    from: usize,
    flow: crate::pipeline::schedule::Flow,
) -> Option<(usize, usize)> {
    let ops = &sim.plan.programs.get(from)?.ops;
    let k = sim.plan.programs[d].ops[..i]
        .iter()
        .filter(|o| matches!(o, Op::Recv { from: f, flow: w, .. } if *f == from && *w == flow))
        .count();
    ops.iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Op::Send { to, flow: w, .. } if *to == d && *w == flow))
        .nth(k)
        .map(|(j, _)| (from, j))
}

/// A Chrome trace (`chrome://tracing`, Perfetto) of `devices`: per device a compute row and a
/// data-parallel comm row, every op in µs.
pub fn chrome_trace(sim: &Simulated, devices: &[usize]) -> serde_json::Value {
    let plan = &sim.plan;
    let mut events = Vec::new();
    for &d in devices.iter().filter(|&&d| d < plan.programs.len()) {
        let p = &plan.programs[d];
        events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": d,
            "args": {"name": format!("device {d} (r{} s{} t{})", p.place.replica, p.place.stage, p.place.tp_rank)}
        }));
        for (i, op) in p.ops.iter().enumerate() {
            let (s, e) = sim.clock.spans[d][i];
            if e <= s {
                continue;
            }
            let tid = match part(op) {
                5 => "dp comm",
                4 => "pipeline link",
                _ => "compute",
            };
            events.push(serde_json::json!({
                "name": op.label(plan.v, |a| plan.segments(p.place.stage, a)),
                "cat": PARTS[part(op)], "ph": "X", "pid": d, "tid": tid,
                "ts": s * 1e6, "dur": (e - s) * 1e6,
            }));
        }
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}
