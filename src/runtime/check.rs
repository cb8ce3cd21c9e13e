//! The validator of lowered programs: every device runs its schedule's passes whole and in
//! order; every send has its receive (same action, same order per link); every gradient bucket
//! is reduced exactly once, after the last gradient written into it; the members of every group
//! call the same collectives in the same order; and the programs run to the end without a
//! deadlock when each link holds `bound` messages and every collective waits for its whole
//! group (a simulation of the executor's blocking rules).

use std::collections::{HashMap, VecDeque};

use super::ir::{Mark, Op, Plan};
use crate::error::{Error, Result};
use crate::mesh::{Coords, Mesh};
use crate::pipeline::schedule::{Flow, Kind, Schedule};

fn bad(msg: String) -> Error {
    Error::Config(format!("invalid device programs: {msg}"))
}

/// Checks `plan` for `mesh` and `schedule` (see the module doc).
pub fn check(plan: &Plan, mesh: &Mesh, schedule: &Schedule, bound: usize) -> Result<()> {
    if plan.programs.len() != mesh.devices() {
        return Err(bad(format!(
            "{} programs for {} devices",
            plan.programs.len(),
            mesh.devices()
        )));
    }
    for p in &plan.programs {
        passes_whole(plan, schedule, p.device, p.place)?;
        if mesh.dp > 1 {
            buckets_once(plan, schedule, p.device, p.place)?;
        }
    }
    messages_match(plan, schedule)?;
    groups_agree(plan, mesh)?;
    no_deadlock(plan, mesh, bound.max(1))
}

/// The compute ops of each device cover its schedule's actions in order, each pass's segments
/// once, in order.
fn passes_whole(plan: &Plan, sched: &Schedule, d: usize, at: Coords) -> Result<()> {
    let mut next = vec![];
    for op in &plan.programs[d].ops {
        if let Op::Compute { action, segs } = op {
            match next.last_mut() {
                Some((a, end)) if a == action && *end == segs.start => *end = segs.end,
                _ if segs.start == 0 => next.push((*action, segs.end)),
                _ => {
                    return Err(bad(format!(
                        "device {d}: {action:?} resumes at segment {} out of order",
                        segs.start
                    )))
                }
            }
        }
    }
    let want = &sched.actions[at.stage];
    if next.len() != want.len() {
        return Err(bad(format!(
            "device {d} runs {} passes, its schedule has {}",
            next.len(),
            want.len()
        )));
    }
    for ((a, end), w) in next.iter().zip(want) {
        let n = plan.segments(at.stage, w);
        if a != w || *end != n {
            return Err(bad(format!(
                "device {d}: expected {w:?} (segments 0..{n}), found {a:?} up to {end}"
            )));
        }
    }
    Ok(())
}

/// Each bucket of each chunk is reduced exactly once, after the segment of the chunk's last
/// gradient-writing pass that makes it final (zero-bubble: after the last W), with no gradient
/// written into the chunk afterwards.
fn buckets_once(plan: &Plan, sched: &Schedule, d: usize, at: Coords) -> Result<()> {
    let ops = &plan.programs[d].ops;
    for (c, shape) in plan.shapes[at.stage].iter().enumerate() {
        let writer = if shape.split { Kind::W } else { Kind::B };
        let list = &sched.actions[at.stage];
        let Some(last) = list.iter().rev().find(|a| a.chunk == c && a.kind == writer) else {
            continue;
        };
        for b in 0..shape.buckets {
            let at_ops: Vec<usize> = ops
                .iter()
                .enumerate()
                .filter(|(_, o)| matches!(o, Op::ReduceGrad { chunk, bucket, .. } if *chunk == c && *bucket == b))
                .map(|(i, _)| i)
                .collect();
            let [i] = at_ops[..] else {
                return Err(bad(format!(
                    "device {d}: bucket {b} of chunk {c} is reduced {} times",
                    at_ops.len()
                )));
            };
            // the segment after which bucket b is final (split: the whole last W)
            let ready_seg = if shape.split {
                shape.weight.len() + 1
            } else {
                let k = shape
                    .backward
                    .iter()
                    .position(|m| matches!(m, Mark::Ready(bs) if bs.contains(&b)));
                k.map_or(shape.backward.len() + 1, |k| k + 1)
            };
            let done_before = ops[..i].iter().any(|o| {
                matches!(o, Op::Compute { action, segs } if action == last && segs.end >= ready_seg)
            });
            let written_after = ops[i..].iter().any(|o| match o {
                Op::Compute { action, segs } if action.chunk == c && action.kind != Kind::F => {
                    action != last || segs.start < ready_seg
                }
                _ => false,
            });
            if !done_before || written_after {
                return Err(bad(format!(
                    "device {d}: bucket {b} of chunk {c} is reduced before its last gradient"
                )));
            }
        }
    }
    Ok(())
}

/// Per (from, to, flow): the sends and the receives name the same actions in the same order.
fn messages_match(plan: &Plan, sched: &Schedule) -> Result<()> {
    type Link = (usize, usize, Flow);
    let mut sent: HashMap<Link, Vec<(usize, usize)>> = HashMap::new();
    let mut got: HashMap<Link, Vec<(usize, usize)>> = HashMap::new();
    for p in &plan.programs {
        for op in &p.ops {
            match op {
                Op::Send { action, to, flow } => {
                    let stage = sched.stage(p.place.stage, action.chunk);
                    sent.entry((p.device, *to, *flow))
                        .or_default()
                        .push((action.micro, stage));
                }
                Op::Recv { action, from, flow } => {
                    let m = sched.input(p.place.stage, action).ok_or_else(|| {
                        bad(format!("device {}: {action:?} receives no input", p.device))
                    })?;
                    got.entry((*from, p.device, *flow))
                        .or_default()
                        .push((action.micro, m.stage));
                }
                _ => {}
            }
        }
    }
    for (link, s) in &sent {
        let r = got.get(link).map(Vec::as_slice).unwrap_or(&[]);
        if s.as_slice() != r {
            return Err(bad(format!(
                "link {} → {} ({:?}): sends {s:?} but receives {r:?}",
                link.0, link.1, link.2
            )));
        }
    }
    if let Some((link, r)) = got.iter().find(|(l, _)| !sent.contains_key(l)) {
        return Err(bad(format!(
            "device {} receives {r:?} from {} that nobody sends",
            link.1, link.0
        )));
    }
    Ok(())
}

/// The group a collective op runs over: its members, as global devices.
pub(super) fn group(mesh: &Mesh, at: Coords, op: &Op) -> Option<Vec<usize>> {
    let dev = |c: Coords| mesh.device(c);
    match op {
        Op::TpAllReduce { .. } => Some(
            (0..mesh.tp)
                .map(|k| dev(Coords { tp_rank: k, ..at }))
                .collect(),
        ),
        Op::ReduceGrad { .. } | Op::GatherParams { .. } | Op::Unshard { .. } => Some(
            (0..mesh.dp)
                .map(|r| dev(Coords { replica: r, ..at }))
                .collect(),
        ),
        Op::GradNorm => Some((0..mesh.devices()).collect()),
        _ => None,
    }
}

/// The members of every group make the same collective calls in the same order.
fn groups_agree(plan: &Plan, mesh: &Mesh) -> Result<()> {
    let mut calls: HashMap<(Vec<usize>, usize), Vec<String>> = HashMap::new();
    for p in &plan.programs {
        let mut mine: HashMap<Vec<usize>, Vec<String>> = HashMap::new();
        for op in &p.ops {
            if let Some(g) = group(mesh, p.place, op) {
                mine.entry(g).or_default().push(collective_key(op));
            }
        }
        for (g, seq) in mine {
            calls.insert((g, p.device), seq);
        }
    }
    for ((g, d), seq) in &calls {
        let first = calls.get(&(g.clone(), g[0]));
        if first != Some(seq) {
            return Err(bad(format!(
                "device {d} calls {seq:?} on group {g:?} but device {} calls {first:?}",
                g[0]
            )));
        }
    }
    Ok(())
}

/// What must agree across a group: the call and its subject.
fn collective_key(op: &Op) -> String {
    format!("{op:?}")
}

/// Runs every program under the executor's blocking rules; a state where nobody can move
/// before everyone is done is a deadlock.
fn no_deadlock(plan: &Plan, mesh: &Mesh, bound: usize) -> Result<()> {
    let n = plan.programs.len();
    let mut pc = vec![0usize; n];
    let mut queues: HashMap<(usize, usize, Flow), VecDeque<usize>> = HashMap::new();
    loop {
        let mut moved = false;
        for d in 0..n {
            let p = &plan.programs[d];
            while let Some(op) = p.ops.get(pc[d]) {
                let go = match op {
                    Op::Send { action, to, flow } => {
                        let q = queues.entry((d, *to, *flow)).or_default();
                        (q.len() < bound)
                            .then(|| q.push_back(action.micro))
                            .is_some()
                    }
                    Op::Recv { from, flow, .. } => queues
                        .get_mut(&(*from, d, *flow))
                        .and_then(VecDeque::pop_front)
                        .is_some(),
                    other => match group(mesh, p.place, other) {
                        // a collective: everyone in the group must stand at the same call
                        Some(g) => {
                            let key = collective_key(other);
                            let all = g.iter().all(|&q| {
                                plan.programs[q].ops.get(pc[q]).map(collective_key)
                                    == Some(key.clone())
                            });
                            if all {
                                for &q in g.iter().filter(|&&q| q != d) {
                                    pc[q] += 1;
                                }
                            }
                            all
                        }
                        None => true,
                    },
                };
                if !go {
                    break;
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
            return Ok(());
        }
        if !moved {
            let stuck: Vec<String> = plan
                .programs
                .iter()
                .zip(&pc)
                .filter_map(|(p, &i)| {
                    p.ops
                        .get(i)
                        .map(|o| format!("device {} at {o:?}", p.device))
                })
                .collect();
            return Err(bad(format!("deadlock: {}", stuck.join("; "))));
        }
    }
}
