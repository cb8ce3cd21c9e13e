//! Two simulators over one engine: the schedule's dependency graph replayed with every device an
//! independent resource that runs its list in order.
//!
//! - [`simulate_unit`]: every action (F, B, and W for zero-bubble) costs one step and transfers
//!   are free. Unit-cost full backward keeps the textbook numbers exact: GPipe and 1F1B take
//!   `2(m+p−1)` steps, bubble `(p−1)/(m+p−1)`; interleaved takes `2(vm+p−1)` chunk steps, bubble
//!   `(p−1)/(vm+p−1)`. (Costing the full backward 2 and F 1 scales the makespan to `3(m+p−1)`
//!   and leaves the fraction unchanged; `replay` shows it.) ZB-H1 with F = B = W = 1 is the
//!   paper's setting: `3m+p−1` steps for `m ≥ p`, bubble `(p−1)/(3m+p−1)`.
//! - [`replay`]: the device clock. Each action costs what `cost` says (seconds, e.g. measured);
//!   each message between devices becomes a transfer of `bytes(action)` bytes over a [`Link`]:
//!   it waits for its direction of the link to be free, occupies it for `bytes / bandwidth`, and
//!   arrives `latency` later; the receiving action cannot start before it arrives. Sends are
//!   asynchronous (the channel bound is the validator's business, not the clock's).
//!
//! ```text
//!  device 0  [F0]──┐                       ┌──▶[B0]
//!  link 0→1        └─[bytes/bw + lat]─┐    │
//!  device 1                           └▶[F0][B0]
//!  link 1→0                                 └─[bytes/bw + lat]
//! ```

use super::schedule::{Action, Kind, Msg, Schedule};
use super::validate::{key, validate};
use crate::error::{Error, Result};
use crate::link::Link;

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
    let t = engine(s, &|_, _| 1.0, |_, _, _, ready| ready)?;
    let start: Vec<Vec<usize>> = t
        .start
        .iter()
        .map(|r| r.iter().map(|&x| x as usize).collect())
        .collect();
    let makespan = t.makespan as usize;
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

/// One action on the device clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub device: usize,
    pub action: Action,
    pub start: f64,
    pub end: f64,
}

/// One message on a link: sent by `action` on device `from`, arriving at `end`.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    pub from: usize,
    pub to: usize,
    pub action: Action,
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
}

/// The device-clock timeline of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// Every action, device by device in list order.
    pub actions: Vec<Span>,
    /// Every transfer, in the order they were sent on each link.
    pub transfers: Vec<Transfer>,
    pub makespan: f64,
    /// Seconds of work per device.
    pub busy: Vec<f64>,
    /// Idle fraction `1 − Σbusy / (p·makespan)` (0 when the makespan is 0).
    pub bubble: f64,
}

/// Replay `s` on the device clock: `cost(device, action)` in seconds, `bytes(action)` sent to
/// the neighbour stage after `action` (0: nothing to send, no transfer), over `link`.
pub fn replay(
    s: &Schedule,
    cost: &dyn Fn(usize, &Action) -> f64,
    link: &Link,
    bytes: &dyn Fn(&Action) -> u64,
) -> Result<Replay> {
    let bandwidth_ok = link.bandwidth_bytes_per_s > 0.0; // false for NaN
    let latency_ok = link.latency_s >= 0.0 && link.latency_s.is_finite();
    if !bandwidth_ok || !latency_ok {
        return Err(Error::Config(format!(
            "link {:?} needs a positive bandwidth and a finite latency ≥ 0, got {} B/s and {} s",
            link.name, link.bandwidth_bytes_per_s, link.latency_s
        )));
    }
    let mut free = vec![0.0f64; s.p * s.p]; // per direction (from, to): when the link is free
    let mut transfers = Vec::new();
    let t = engine(s, cost, |from, action, msg, ready| {
        let n = bytes(action);
        if n == 0 {
            return ready;
        }
        let start = ready.max(free[from * s.p + msg.to]);
        free[from * s.p + msg.to] = start + link.occupancy(n);
        let end = start + link.transfer_time(n);
        transfers.push(Transfer {
            from,
            to: msg.to,
            action: *action,
            start,
            end,
            bytes: n,
        });
        end
    })?;
    let mut actions = Vec::new();
    let mut busy = vec![0.0; s.p];
    for (d, list) in s.actions.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            let (start, end) = (t.start[d][i], t.end[d][i]);
            busy[d] += end - start;
            actions.push(Span {
                device: d,
                action: *a,
                start,
                end,
            });
        }
    }
    let total = s.p as f64 * t.makespan;
    let bubble = if total > 0.0 {
        1.0 - busy.iter().sum::<f64>() / total
    } else {
        0.0
    };
    Ok(Replay {
        actions,
        transfers,
        makespan: t.makespan,
        busy,
        bubble,
    })
}

/// Start and end of every action (shaped like `Schedule::actions`) and the makespan.
struct Timed {
    start: Vec<Vec<f64>>,
    end: Vec<Vec<f64>>,
    makespan: f64,
}

/// The shared engine: each device starts its next action as soon as it is free and the
/// action's inputs are there; `send(device, action, msg, ready)` returns when a message to
/// another device, ready at `ready`, arrives. Local inputs are ready when their producer ends.
fn engine(
    s: &Schedule,
    cost: &dyn Fn(usize, &Action) -> f64,
    mut send: impl FnMut(usize, &Action, Msg, f64) -> f64,
) -> Result<Timed> {
    validate(s, usize::MAX)?;
    let n = 3 * s.stages() * s.m;
    let (mut ended, mut arrived) = (vec![f64::NAN; n], vec![f64::NAN; n]);
    let mut start: Vec<Vec<f64>> = s
        .actions
        .iter()
        .map(|l| Vec::with_capacity(l.len()))
        .collect();
    let mut end = start.clone();
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
                    t = t.max(ended[key(s, k, stage, a.micro)]); // earlier in the list (rule 3)
                }
                if let Some(msg) = s.input(d, a) {
                    let from = if msg.from == d { &ended } else { &arrived };
                    let k = key(
                        s,
                        if a.kind == Kind::F { Kind::F } else { Kind::B },
                        msg.stage,
                        a.micro,
                    );
                    if from[k].is_nan() {
                        break;
                    }
                    t = t.max(from[k]);
                }
                let c = cost(d, a);
                if !(c >= 0.0 && c.is_finite()) {
                    return Err(Error::Config(format!(
                        "cost of {} is {c}; expected finite seconds ≥ 0",
                        s.label(d, a)
                    )));
                }
                let k = key(s, a.kind, stage, a.micro);
                ended[k] = t + c;
                if let Some(msg) = s.output(d, a).filter(|m| m.to != d) {
                    arrived[k] = send(d, a, msg, t + c);
                }
                start[d].push(t);
                end[d].push(t + c);
                free[d] = t + c;
                makespan = makespan.max(t + c);
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
    Ok(Timed {
        start,
        end,
        makespan,
    })
}
