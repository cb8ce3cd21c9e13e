//! Lowering: a [`Mesh`] and its pipeline [`Schedule`] become one [`Program`] per device. A pure
//! function of the layout and the chunks' shapes (the marks of their passes, their buckets).
//!
//! ```text
//! device (r, s, k) = (replica, pipeline device, tensor rank), for each action of schedule[s]:
//!   <from           the input, when it comes from another pipeline device
//!   F0 / B0.0 tp …  the pass, cut at its marks: a tensor-parallel all-reduce after each cut;
//!                   in the chunk's last backward, each bucket's reduction right after the
//!                   segment that makes it final (zero-bubble: after the chunk's last W)
//!   >to             the output, when it goes to another pipeline device
//! then: norm, adam, and under ZeRO-1/2 the all-gather of every bucket's parameters
//! ZeRO-3 (block by block): us0 us1 F.0 us2 F.1 … before each block's compute the next block's
//!   gather (the prefetch); the backward likewise from the last block down
//! ```
//!
//! So a stage's gradients are reduced as soon as its own last backward has produced them,
//! while the rest of the pipeline (and the rest of that backward) still runs: the overlap
//! comes from the order of the list.

use super::ir::{flow_of, ChunkShape, Mark, Op, Plan, Program};
use crate::error::{Error, Result};
use crate::mesh::{Coords, Mesh};
use crate::pipeline::schedule::{Action, Kind, Schedule};

/// The programs of every device of `mesh` (index = global device), running `schedule` (p =
/// pp devices, m microbatches, v chunks); `shapes[s][c]` is local chunk c of pipeline device s.
pub fn lower(mesh: &Mesh, schedule: &Schedule, shapes: &[Vec<ChunkShape>]) -> Result<Plan> {
    lower_with(mesh, schedule, shapes, true)
}

/// [`lower`], with ZeRO-3's gathers issued one block ahead (`prefetch`) or each right before
/// the block that reads it (to measure what the prefetch hides).
pub fn lower_with(
    mesh: &Mesh,
    schedule: &Schedule,
    shapes: &[Vec<ChunkShape>],
    prefetch: bool,
) -> Result<Plan> {
    lower_replicas(mesh, schedule, shapes, prefetch, mesh.dp)
}

/// [`lower_with`] for the first `replicas` data-parallel replicas only (devices
/// `0 .. replicas·pp·tp`: replicas are the outermost axis). Replicas run identical lists, so a
/// simulator that costs each data-parallel collective for its whole group may replay replica 0
/// alone ([`super::replay::replay()`] keeps a group's members that the plan holds).
pub fn lower_replicas(
    mesh: &Mesh,
    schedule: &Schedule,
    shapes: &[Vec<ChunkShape>],
    prefetch: bool,
    replicas: usize,
) -> Result<Plan> {
    if schedule.p != mesh.pp || schedule.m != mesh.microbatches || schedule.v != mesh.chunks {
        return Err(Error::Config(format!(
            "the schedule (p = {}, m = {}, v = {}) does not fit the layout {}",
            schedule.p,
            schedule.m,
            schedule.v,
            mesh.describe()
        )));
    }
    if shapes.len() != mesh.pp || shapes.iter().any(|s| s.len() != mesh.chunks) {
        return Err(Error::Config(format!(
            "chunk shapes for {} pipeline devices × {} chunks expected",
            mesh.pp, mesh.chunks
        )));
    }
    let programs = (0..replicas.min(mesh.dp) * mesh.pp * mesh.tp)
        .map(|d| {
            let place = mesh.coords(d);
            Program {
                device: d,
                place,
                ops: device_ops(mesh, schedule, &shapes[place.stage], place, prefetch),
            }
        })
        .collect();
    Ok(Plan {
        programs,
        v: mesh.chunks,
        shapes: shapes.to_vec(),
    })
}

fn device_ops(
    mesh: &Mesh,
    sched: &Schedule,
    shapes: &[ChunkShape],
    at: Coords,
    prefetch: bool,
) -> Vec<Op> {
    let list = &sched.actions[at.stage];
    let global = |stage: usize| mesh.device(Coords { stage, ..at });
    let reduce = mesh.dp > 1;
    let scatter = mesh.zero >= 1;
    // the last action of each chunk that writes its parameter gradients
    let grads_done: Vec<Option<usize>> = (0..sched.v)
        .map(|c| {
            let writer = if shapes[c].split { Kind::W } else { Kind::B };
            list.iter().rposition(|a| a.chunk == c && a.kind == writer)
        })
        .collect();
    let mut ops = Vec::with_capacity(4 * list.len() + 8);
    for (i, a) in list.iter().enumerate() {
        if let Some(m) = sched.input(at.stage, a).filter(|m| m.from != at.stage) {
            ops.push(Op::Recv {
                action: *a,
                from: global(m.from),
                flow: m.flow,
            });
        }
        let finishing = reduce && grads_done[a.chunk] == Some(i);
        let shape = &shapes[a.chunk];
        // buckets final inside the pass are reduced between its segments, the rest after it
        let mut after = pass_ops(
            &mut ops,
            a,
            shape,
            finishing && !shape.split,
            scatter,
            prefetch,
        );
        if finishing && shape.split {
            after = (0..shape.buckets).collect();
        }
        if let Some(m) = sched.output(at.stage, a).filter(|m| m.to != at.stage) {
            // the pipeline's critical path first, then the reductions
            ops.push(Op::Send {
                action: *a,
                to: global(m.to),
                flow: flow_of(a.kind),
            });
        }
        ops.extend(after.into_iter().map(|bucket| Op::ReduceGrad {
            chunk: a.chunk,
            bucket,
            scatter,
        }));
    }
    ops.push(Op::GradNorm);
    ops.push(Op::Optimizer);
    // ZeRO-3 gathers no parameters after the update: the next use unshards them
    if reduce && (mesh.zero == 1 || mesh.zero == 2) {
        for (chunk, shape) in shapes.iter().enumerate() {
            ops.extend((0..shape.buckets).map(|bucket| Op::GatherParams { chunk, bucket }));
        }
    }
    ops
}

/// The reductions of `buckets`, final after the segment just pushed; they leave `pending`.
fn reduce_ready(
    ops: &mut Vec<Op>,
    a: &Action,
    buckets: &[usize],
    scatter: bool,
    pending: &mut Vec<usize>,
) {
    for &bucket in buckets {
        ops.push(Op::ReduceGrad {
            chunk: a.chunk,
            bucket,
            scatter,
        });
        pending.retain(|&b| b != bucket);
    }
}

/// A chunk with its blocks gathered (ZeRO-3): before the pass the first block's parameters,
/// and each block's gather one block ahead of its compute (the prefetch); a tensor-parallel
/// all-reduce at each cut inside a block; when `reduce_here`, each bucket's reduction after the
/// block that makes it final.
fn gathered_pass(
    ops: &mut Vec<Op>,
    a: &Action,
    shape: &ChunkShape,
    reduce_here: bool,
    scatter: bool,
    prefetch: bool,
) -> Vec<usize> {
    let marks = shape.marks(a.kind);
    let segs = marks.len() + 1;
    let unshard = |seg: usize| Op::Unshard {
        chunk: a.chunk,
        block: shape.block_of(a.kind, seg),
    };
    // the first segment of each block, and its next block's
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            (0..marks.len())
                .filter(|&i| !matches!(marks[i], Mark::Cut))
                .map(|i| i + 1),
        )
        .collect();
    let mut pending: Vec<usize> = if reduce_here {
        (0..shape.buckets).collect()
    } else {
        Vec::new()
    };
    if prefetch {
        ops.push(unshard(0));
    }
    let mut cut = 0;
    for seg in 0..segs {
        if let Some(k) = starts.iter().position(|&s| s == seg) {
            match (prefetch, starts.get(k + 1)) {
                (false, _) => ops.push(unshard(seg)),
                (true, Some(&next)) => ops.push(unshard(next)),
                (true, None) => {}
            }
        }
        ops.push(Op::Compute {
            action: *a,
            segs: seg..seg + 1,
        });
        match marks.get(seg) {
            Some(Mark::Cut) => {
                ops.push(Op::TpAllReduce { action: *a, cut });
                cut += 1;
            }
            Some(Mark::Ready(buckets)) if reduce_here => {
                reduce_ready(ops, a, buckets, scatter, &mut pending);
            }
            _ => {}
        }
    }
    pending
}

/// The pass of `a` cut at its marks: compute segments, a tensor-parallel all-reduce at each
/// cut and, when `reduce_here`, each bucket's reduction after the segment that makes it final.
/// Returns the buckets (when `reduce_here`) that no mark covers: final at the pass's end.
fn pass_ops(
    ops: &mut Vec<Op>,
    a: &Action,
    shape: &ChunkShape,
    reduce_here: bool,
    scatter: bool,
    prefetch: bool,
) -> Vec<usize> {
    if shape.gather {
        return gathered_pass(ops, a, shape, reduce_here, scatter, prefetch);
    }
    let marks = shape.marks(a.kind);
    let (mut from, mut cut) = (0, 0);
    let mut pending: Vec<usize> = if reduce_here {
        (0..shape.buckets).collect()
    } else {
        Vec::new()
    };
    for (i, mark) in marks.iter().enumerate() {
        match mark {
            Mark::Cut => {
                ops.push(Op::Compute {
                    action: *a,
                    segs: from..i + 1,
                });
                ops.push(Op::TpAllReduce { action: *a, cut });
                cut += 1;
                from = i + 1;
            }
            Mark::Ready(buckets) if reduce_here && !buckets.is_empty() => {
                ops.push(Op::Compute {
                    action: *a,
                    segs: from..i + 1,
                });
                reduce_ready(ops, a, buckets, scatter, &mut pending);
                from = i + 1;
            }
            Mark::Ready(_) | Mark::Block => {}
        }
    }
    ops.push(Op::Compute {
        action: *a,
        segs: from..marks.len() + 1,
    });
    pending
}
