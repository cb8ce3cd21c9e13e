//! The schedule validator: everything the executor assumes, checked before anything runs.
//!
//! Executor semantics (what "valid" means). Every device walks its list in order. An action that
//! needs another device's message (the activation for F, the gradient for B) takes the head of
//! the channel `(from, to, flow)`; channels are first in, first out and hold at most
//! `channel_bound` messages; an action that produces a message for another device sends it
//! after it ran, blocking while that channel is full (`channel_bound = 0` is a rendezvous: the
//! send completes only when the receiver takes it). Messages between chunks on the same device
//! are handed over locally.
//!
//! Rules, in the order they are checked; the error names the rule (in quotes) and shows the
//! list-order grid with the offending actions in brackets:
//! 1. "shape": one list per device, micro < m, chunk < v, W only in zero-bubble schedules;
//! 2. "exactly once": each (microbatch, stage) has one F, one B, and one W iff zero-bubble
//!    (missing actions are appended to their rows as `[1F1?]`);
//! 3. "F before B before W on a stage", and "chunk order on a device": an input produced by a
//!    chunk on the same device comes earlier in the list;
//! 4. "channel order": each channel is received in the order it is sent;
//! 5. "no deadlock": an event-by-event run of the semantics above finishes; a stall that also
//!    happens with unbounded channels is reported as "cross-stage dependencies" (a cycle).
//!
//! Every constructor passes with `channel_bound = 1`; with 0 (rendezvous) only GPipe does, since
//! 1F1B-style schedules send a gradient while the neighbour is sending an activation.

use super::grid::list_grid;
use super::schedule::{Action, Flow, Kind, Msg, Schedule};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// Check `s` against the rules above with channels of capacity `channel_bound`.
pub fn validate(s: &Schedule, channel_bound: usize) -> Result<()> {
    shape(s)?;
    let pos = exactly_once(s)?;
    local_order(s, &pos)?;
    channel_order(s)?;
    if let Err(stuck) = run(s, channel_bound) {
        let (rule, why) = match run(s, usize::MAX) {
            Err(_) => (
                "cross-stage dependencies",
                "the devices wait on each other in a cycle (deadlocks with any channel bound)"
                    .to_string(),
            ),
            Ok(()) => (
                "no deadlock",
                format!(
                    "deadlock with channel bound {channel_bound} (it runs with unbounded channels)"
                ),
            ),
        };
        let detail = stuck
            .iter()
            .map(|b| b.2.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let marks: Vec<_> = stuck.iter().map(|b| (b.0, b.1)).collect();
        return Err(fail(s, rule, &format!("{why}: {detail}"), &marks, &[]));
    }
    Ok(())
}

/// The error for `rule`, with the marked list-order grid.
fn fail(
    s: &Schedule,
    rule: &str,
    detail: &str,
    marks: &[(usize, usize)],
    ghosts: &[(usize, String)],
) -> Error {
    Error::Config(format!(
        "{} schedule (p={}, m={}, v={}) breaks rule \"{rule}\": {detail}\n\
         grid (rows = devices, columns = positions in each device's list, offending actions in [ ]):\n{}",
        s.kind,
        s.p,
        s.m,
        s.v,
        list_grid(s, marks, ghosts)
    ))
}

/// Dense index of (kind, stage, micro).
pub(crate) fn key(s: &Schedule, kind: Kind, stage: usize, micro: usize) -> usize {
    ((kind as usize) * s.stages() + stage) * s.m + micro
}

fn shape(s: &Schedule) -> Result<()> {
    if s.p == 0 || s.m == 0 || s.v == 0 {
        return Err(Error::Config(format!(
            "{} schedule needs p, m, v ≥ 1, got p = {}, m = {}, v = {}",
            s.kind, s.p, s.m, s.v
        )));
    }
    if s.actions.len() != s.p {
        let detail = format!("{} device lists for p = {} devices", s.actions.len(), s.p);
        return Err(fail(s, "shape", &detail, &[], &[]));
    }
    for (d, list) in s.actions.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            let why = if a.micro >= s.m {
                format!("microbatch {} out of range (m = {})", a.micro, s.m)
            } else if a.chunk >= s.v {
                format!("chunk {} out of range (v = {})", a.chunk, s.v)
            } else if a.kind == Kind::W && !s.kind.split_backward() {
                "W (weight-gradient) actions belong to zero-bubble schedules only".to_string()
            } else {
                continue;
            };
            let detail = format!("{} at device {d} position {i}: {why}", s.label(d, a));
            return Err(fail(s, "shape", &detail, &[(d, i)], &[]));
        }
    }
    Ok(())
}

/// Rule 2; returns each action's list position by `key`.
fn exactly_once(s: &Schedule) -> Result<Vec<usize>> {
    let kinds: &[Kind] = if s.kind.split_backward() {
        &[Kind::F, Kind::B, Kind::W]
    } else {
        &[Kind::F, Kind::B]
    };
    let mut pos = vec![usize::MAX; 3 * s.stages() * s.m];
    for (d, list) in s.actions.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            let k = key(s, a.kind, s.stage(d, a.chunk), a.micro);
            if pos[k] != usize::MAX {
                let detail = format!(
                    "{} appears twice on device {d} (positions {} and {i})",
                    s.label(d, a),
                    pos[k]
                );
                return Err(fail(
                    s,
                    "exactly once",
                    &detail,
                    &[(d, pos[k]), (d, i)],
                    &[],
                ));
            }
            pos[k] = i;
        }
    }
    let mut missing = Vec::new();
    for stage in 0..s.stages() {
        let (d, c) = s.place(stage);
        for &kind in kinds {
            for micro in 0..s.m {
                if pos[key(s, kind, stage, micro)] == usize::MAX {
                    missing.push((
                        d,
                        s.label(
                            d,
                            &Action {
                                kind,
                                micro,
                                chunk: c,
                            },
                        ),
                    ));
                }
            }
        }
    }
    if !missing.is_empty() {
        let n = missing.len();
        missing.truncate(8);
        let names: Vec<&str> = missing.iter().map(|g| g.1.as_str()).collect();
        let more = if n > 8 {
            format!(" and {} more", n - 8)
        } else {
            String::new()
        };
        let detail = format!(
            "missing {}{more} (appended to their rows as [..?])",
            names.join(", ")
        );
        return Err(fail(s, "exactly once", &detail, &[], &missing));
    }
    Ok(pos)
}

/// Rule 3: what an action needs from its own device must come earlier in the list.
fn local_order(s: &Schedule, pos: &[usize]) -> Result<()> {
    for (d, list) in s.actions.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            let st = s.stage(d, a.chunk);
            let mut needs = Vec::new();
            match a.kind {
                Kind::F => {}
                Kind::B => needs.push((Kind::F, st, "F before B before W on a stage")),
                Kind::W => needs.push((Kind::B, st, "F before B before W on a stage")),
            }
            if let Some(msg) = s.input(d, a).filter(|m| m.from == d) {
                needs.push((producer(msg), msg.stage, "chunk order on a device"));
            }
            for (kind, stage, rule) in needs {
                let j = pos[key(s, kind, stage, a.micro)];
                if j > i {
                    let need = Action {
                        kind,
                        micro: a.micro,
                        chunk: s.place(stage).1,
                    };
                    let detail = format!(
                        "on device {d}, {} (position {i}) comes before {} (position {j}) that it needs",
                        s.label(d, a),
                        s.label(d, &need)
                    );
                    return Err(fail(s, rule, &detail, &[(d, i)], &[]));
                }
            }
        }
    }
    Ok(())
}

/// The kind of action that produces `msg`.
fn producer(msg: Msg) -> Kind {
    match msg.flow {
        Flow::Activation => Kind::F,
        Flow::Gradient => Kind::B,
    }
}

/// Label of the action that produced `msg`, and the flow's name.
fn describe(s: &Schedule, msg: Msg) -> String {
    let a = Action {
        kind: producer(msg),
        micro: msg.micro,
        chunk: s.place(msg.stage).1,
    };
    let flow = if msg.flow == Flow::Activation {
        "activation"
    } else {
        "gradient"
    };
    format!("{}'s {flow}", s.label(msg.from, &a))
}

/// Rule 4: on every channel the receiver takes messages in the order the sender sends them.
fn channel_order(s: &Schedule) -> Result<()> {
    type Chan = (usize, usize, Flow);
    let mut sent: HashMap<Chan, Vec<Msg>> = HashMap::new();
    for (d, list) in s.actions.iter().enumerate() {
        for msg in list
            .iter()
            .filter_map(|a| s.output(d, a))
            .filter(|m| m.to != d)
        {
            sent.entry((msg.from, msg.to, msg.flow))
                .or_default()
                .push(msg);
        }
    }
    let mut taken: HashMap<Chan, usize> = HashMap::new();
    for (d, list) in s.actions.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            let Some(msg) = s.input(d, a).filter(|m| m.from != d) else {
                continue;
            };
            let chan = (msg.from, msg.to, msg.flow);
            let n = taken.entry(chan).or_default();
            let head = sent[&chan][*n];
            *n += 1;
            if head != msg {
                let detail = format!(
                    "{} (device {d}, position {i}) takes {} but device {} sends {} first on that \
                     channel (channels are first in, first out)",
                    s.label(d, a),
                    describe(s, msg),
                    msg.from,
                    describe(s, head)
                );
                return Err(fail(s, "channel order", &detail, &[(d, i)], &[]));
            }
        }
    }
    Ok(())
}

/// Rule 5: run the executor semantics event by event (rules 1–4 hold). On a stall, returns each
/// stuck device's (device, position of the blocking action, description).
fn run(s: &Schedule, bound: usize) -> std::result::Result<(), Vec<(usize, usize, String)>> {
    let mut pc = vec![0usize; s.p];
    let mut pending: Vec<Option<Msg>> = vec![None; s.p];
    let mut queued: HashMap<(usize, usize, Flow), usize> = HashMap::new();
    loop {
        let mut progress = false;
        for d in 0..s.p {
            loop {
                if let Some(msg) = pending[d] {
                    let q = queued.entry((msg.from, msg.to, msg.flow)).or_default();
                    if *q >= bound {
                        break;
                    }
                    *q += 1;
                    pending[d] = None;
                    progress = true;
                }
                let Some(a) = s.actions[d].get(pc[d]) else {
                    break;
                };
                if let Some(msg) = s.input(d, a).filter(|m| m.from != d) {
                    let q = queued.entry((msg.from, msg.to, msg.flow)).or_default();
                    if *q > 0 {
                        *q -= 1;
                    } else if pending[msg.from].is_some_and(|p| p.to == d && p.flow == msg.flow) {
                        pending[msg.from] = None; // rendezvous: taken straight from the sender
                    } else {
                        break;
                    }
                }
                pending[d] = s.output(d, a).filter(|m| m.to != d);
                pc[d] += 1;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    let mut stuck = Vec::new();
    for d in 0..s.p {
        if let Some(msg) = pending[d] {
            let why = format!(
                "device {d} is blocked sending {} to device {} (channel full)",
                describe(s, msg),
                msg.to
            );
            stuck.push((d, pc[d] - 1, why));
        } else if let Some(a) = s.actions[d].get(pc[d]) {
            let what = s
                .input(d, a)
                .map_or("its input".to_string(), |msg| describe(s, msg));
            let why = format!("{} on device {d} waits for {what}", s.label(d, a));
            stuck.push((d, pc[d], why));
        }
    }
    if stuck.is_empty() {
        Ok(())
    } else {
        Err(stuck)
    }
}
