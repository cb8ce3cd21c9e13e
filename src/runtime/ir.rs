//! The step IR: for every device of a layout, the ordered list of everything it does in one
//! training step — compute, pipeline messages, tensor- and data-parallel collectives, the
//! gradient norm and the optimizer. Built by [`super::lower()`], checked by [`super::check()`],
//! run by one worker per device, replayed on the device clock.
//!
//! A compute op is a part of a pass: a pass (F, B or W of a microbatch on a local chunk) is cut
//! at its *marks* — the tensor-parallel cut points of the pass (an all-reduce follows) and, in
//! the backward that finishes a chunk's gradients, the points where buckets become final (their
//! reduction follows) — into segments 0..=marks. `Compute { segs: a..b }` runs segments a..b.
//!
//! Printed (one line per device), e.g. dp 2 × pp 2, 1F1B, m = 2, ZeRO-1, two buckets:
//!
//! ```text
//! 0 (r0 s0 t0): F0 >1 F1 >1 <1 B0 <1 B1.0 rs0 B1.1 rs1 norm adam ag0 ag1
//! ```
//!
//! `F0` forward of microbatch 0 (`c1` appended for chunk 1 when v > 1; `.k` / `.j-k` for
//! segments of a cut pass), `>1` send the output to device 1, `<1` receive the input from
//! device 1, `tp` the tensor-parallel all-reduce at a cut, `ar3` / `rs3` all-reduce /
//! reduce-scatter of gradient bucket 3 over the data-parallel group, `norm` the gradient-norm
//! reduction over every device, `adam` the optimizer on this device's (shard of the)
//! parameters, `ag3` all-gather of bucket 3's updated parameters (ZeRO-1/2), `us2` gather block 2's
//! parameters from their shards (ZeRO-3).

use std::fmt;
use std::ops::Range;

use crate::mesh::Coords;
use crate::pipeline::schedule::{Action, Flow, Kind};

/// One thing a device does in a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Segments `segs` of the pass `action` (see the module doc).
    Compute { action: Action, segs: Range<usize> },
    /// The tensor-parallel all-reduce at cut `cut` of the pass `action`, over the device's
    /// tensor-parallel group (activations forward, input gradients backward).
    TpAllReduce { action: Action, cut: usize },
    /// The output of `action` (activation or input gradient) to global device `to`.
    Send {
        action: Action,
        to: usize,
        flow: Flow,
    },
    /// The input of `action` from global device `from`.
    Recv {
        action: Action,
        from: usize,
        flow: Flow,
    },
    /// Gradient bucket `bucket` of local chunk `chunk`, over the data-parallel group: summed on
    /// every rank (`scatter = false`), or reduce-scattered to each rank's chunk (ZeRO-1).
    ReduceGrad {
        chunk: usize,
        bucket: usize,
        scatter: bool,
    },
    /// Σg² of every tensor part from every device: the global gradient norm, and the check
    /// that loss and gradients are finite before anything is updated.
    GradNorm,
    /// AdamW on this device's parameters (the data-parallel rank's shard under ZeRO-1).
    Optimizer,
    /// ZeRO-1/2: all-gather bucket `bucket` of local chunk `chunk`'s updated parameters.
    GatherParams { chunk: usize, bucket: usize },
    /// ZeRO-3: all-gather block `block`'s parameters from the shards into its slot (block % 2;
    /// the next unshard of the same slot reshards it). Issued one block ahead of the compute
    /// that reads it: the prefetch.
    Unshard { chunk: usize, block: usize },
}

impl Op {
    /// The printed form (see the module doc); `v` chunks per device, `segments` of the pass.
    pub fn label(&self, v: usize, segments: impl Fn(&Action) -> usize) -> String {
        let chunk = |c: usize| {
            if v > 1 {
                format!("c{c}")
            } else {
                String::new()
            }
        };
        match self {
            Op::Compute { action, segs } => {
                let n = segments(action);
                let part = if segs.start == 0 && segs.end == n {
                    String::new()
                } else if segs.len() == 1 {
                    format!(".{}", segs.start)
                } else {
                    format!(".{}-{}", segs.start, segs.end - 1)
                };
                format!(
                    "{:?}{}{}{part}",
                    action.kind,
                    action.micro,
                    chunk(action.chunk)
                )
            }
            Op::TpAllReduce { .. } => "tp".into(),
            Op::Send { to, .. } => format!(">{to}"),
            Op::Recv { from, .. } => format!("<{from}"),
            Op::ReduceGrad {
                chunk: c,
                bucket,
                scatter,
            } => format!(
                "{}{}{bucket}",
                if *scatter { "rs" } else { "ar" },
                chunk(*c)
            ),
            Op::GradNorm => "norm".into(),
            Op::Optimizer => "adam".into(),
            Op::GatherParams { chunk: c, bucket } => format!("ag{}{bucket}", chunk(*c)),
            Op::Unshard { chunk: c, block } => format!("us{}{block}", chunk(*c)),
        }
    }
}

/// A point inside a pass where something else must happen before the pass goes on.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mark {
    /// A tensor-parallel cut: the all-reduce of the pass's current output.
    Cut,
    /// Gradient buckets (indices into the chunk's buckets) are final here, inside the pass; a
    /// bucket no mark names is final at the end of the pass.
    Ready(Vec<usize>),
    /// A block boundary of a chunk gathered block by block (ZeRO-3): the next block's
    /// parameters must be in place.
    Block,
}

/// What the lowering needs to know about one model chunk (stage) of a device: the marks of
/// its passes, in op order, and how many gradient buckets it has.
#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ChunkShape {
    pub forward: Vec<Mark>,
    /// The backward pass (input gradients only when `split`).
    pub backward: Vec<Mark>,
    /// The weight-gradient pass W of a split backward (zero-bubble schedules); marks unused.
    pub weight: Vec<Mark>,
    pub buckets: usize,
    /// Backward split into B (input gradients) and W (weight gradients): buckets are final
    /// after the chunk's last W, not at marks of a pass.
    pub split: bool,
    /// ZeRO-3: the chunk gathers each block's parameters before it runs; every mark that is no
    /// tensor-parallel cut is a block boundary (the forward runs blocks 0 .. n, the backward
    /// n − 1 down to 0), and a bucket is ready only at a block boundary.
    pub gather: bool,
}

impl ChunkShape {
    /// The block segment `seg` of pass `kind` computes (chunks gathered block by block: every
    /// mark but a tensor-parallel cut is a block boundary).
    pub fn block_of(&self, kind: Kind, seg: usize) -> usize {
        let marks = self.marks(kind);
        let boundary = |m: &&Mark| !matches!(m, Mark::Cut);
        let before = marks[..seg.min(marks.len())]
            .iter()
            .filter(boundary)
            .count();
        match kind {
            Kind::F => before,
            _ => marks.iter().filter(boundary).count() - before,
        }
    }

    /// The marks of the pass `kind`.
    pub fn marks(&self, kind: Kind) -> &[Mark] {
        match kind {
            Kind::F => &self.forward,
            Kind::B => &self.backward,
            Kind::W => &self.weight,
        }
    }
}

/// One device's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub device: usize,
    pub place: Coords,
    pub ops: Vec<Op>,
}

/// Every device's list, and what printing and checking them needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub programs: Vec<Program>,
    /// Chunks per pipeline device (v).
    pub v: usize,
    /// `shapes[c]` of local chunk c, per pipeline device: `shapes[stage][c]`.
    pub shapes: Vec<Vec<ChunkShape>>,
}

impl Plan {
    /// Segments of the pass `a` on a device at pipeline position `stage`.
    pub fn segments(&self, stage: usize, a: &Action) -> usize {
        self.shapes[stage][a.chunk].marks(a.kind).len() + 1
    }
}

impl fmt::Display for Plan {
    /// `device (replica r, stage s, tp rank k): ops…`, one line per device.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.programs {
            let labels: Vec<String> = p
                .ops
                .iter()
                .map(|o| o.label(self.v, |a| self.segments(p.place.stage, a)))
                .collect();
            writeln!(
                f,
                "{} (r{} s{} t{}): {}",
                p.device,
                p.place.replica,
                p.place.stage,
                p.place.tp_rank,
                labels.join(" ")
            )?;
        }
        Ok(())
    }
}

/// The flow of the message an action's output carries.
pub fn flow_of(kind: Kind) -> Flow {
    match kind {
        Kind::F => Flow::Activation,
        _ => Flow::Gradient,
    }
}
