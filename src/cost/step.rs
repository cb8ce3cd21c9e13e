//! Step time of a layout on a cluster, term by term.
//!
//! ```text
//! compute   C  = 6·N·tokens / (devices · rate)           tokens = global batch · s; forward 2N,
//!                                                         backward 4N FLOPs per token; attention
//!                                                         scores and the optimizer are not counted
//! tp        T  = m · L/pp · 4 · (2(t−1)·α + 2(t−1)/t · b·s·h·act / β)     not overlapped
//! p2p       Q  = m · v · 2 · (b·s·h·act / β + α)          activations forward, gradients back,
//!                                                         at each of the device's v chunks
//! pipeline  W  = C + T + Q;   step_pp = W / (1 − bubble)  bubble = pipeline::bubble(kind, v, pp, m)
//! dp        D  = data-parallel traffic of the ZeRO stage over the dp group (n = device params):
//!              stage 0   all-reduce of n·G once                       2(d−1)/d·n·G
//!              stage 1   reduce-scatter n·G + all-gather n·P, once    (d−1)/d·n·(G + P)
//!              stage 2   reduce-scatter n·G per microbatch            (d−1)/d·n·(m·G + P)
//!                        (full gradients are not kept), all-gather once
//!              stage 3   per microbatch: all-gather n·P for forward and again for backward,
//!                        reduce-scatter n·G                           m·(d−1)/d·n·(2P + G)
//! exposed   E  = max(0, D − window)   window: Overlap::None 0; Backward 2/3·W for stages 0–2
//!              (gradient buckets behind the backward pass), W for stage 3 (gathers prefetched
//!              behind forward and backward); Full W
//! step      = W / (1 − bubble) + E
//! ```
//!
//! Each group runs on the link given by the placement (see [`super::cluster`]).

use super::cluster::Cluster;
use super::comm::{exposed, ring_allreduce_time, ring_collective_time, tp_block_traffic, Overlap};
use super::layout::MeshCost;
use super::memory::ZeroStage;
use super::model::{Footprint, ModelShape};
use super::pipeline;
use crate::error::Result;
use crate::mesh::Mesh;

/// The terms of one step's predicted time, in seconds (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepEstimate {
    /// Microbatch size b (sequences).
    pub micro_batch: usize,
    /// C: pure compute, `6·N·tokens / (devices · rate)`.
    pub compute: f64,
    /// T: tensor-parallel all-reduces (4 per block per microbatch).
    pub tp_comm: f64,
    /// Whether the TP group crosses nodes.
    pub tp_inter: bool,
    /// Q: pipeline point-to-point sends.
    pub pp_comm: f64,
    /// Whether a PP group crosses nodes.
    pub pp_inter: bool,
    /// Bubble fraction of the pipeline time.
    pub bubble: f64,
    /// Idle time: `W / (1 − bubble) − W`.
    pub bubble_time: f64,
    /// Bytes each device sends in data-parallel collectives per step (ring volumes).
    pub dp_bytes: f64,
    /// D: data-parallel collective time per step.
    pub dp_comm: f64,
    /// Whether the DP group crosses nodes.
    pub dp_inter: bool,
    /// E: the part of D not hidden by overlap.
    pub dp_exposed: f64,
    /// The predicted step time: `W / (1 − bubble) + E`.
    pub step: f64,
}

/// Predicts the step time of `layout` for `global_batch` sequences; validates every input.
pub fn estimate(
    model: &ModelShape,
    prec: &Footprint,
    cluster: &Cluster,
    layout: &Mesh,
    global_batch: usize,
    overlap: Overlap,
) -> Result<StepEstimate> {
    model.validate()?;
    prec.validate()?;
    cluster.validate()?;
    let b = layout.validate_on(model, cluster, global_batch)?;
    Ok(estimate_unchecked(
        model,
        prec,
        cluster,
        layout,
        b,
        global_batch,
        overlap,
    ))
}

/// [`estimate`] without validation, for the planner's enumeration (inputs already checked).
pub(crate) fn estimate_unchecked(
    model: &ModelShape,
    prec: &Footprint,
    cluster: &Cluster,
    layout: &Mesh,
    b: usize,
    global_batch: usize,
    overlap: Overlap,
) -> StepEstimate {
    let Mesh {
        dp,
        tp,
        pp,
        schedule,
        microbatches: m,
        chunks,
        ..
    } = *layout;
    let zero = layout.zero_stage();
    let mf = m as f64;
    let tokens = global_batch as f64 * model.seq_len as f64;
    let compute = 6.0 * model.params * tokens / (cluster.devices() as f64 * cluster.flops);

    let (tp_link, tp_inter) = cluster.group_link(1, tp);
    let block = tp_block_traffic(b, model.seq_len, model.hidden, prec.act, tp, tp_link);
    let tp_comm = mf * (model.layers / pp) as f64 * block.time;

    let (pp_link, pp_inter) = cluster.group_link(tp, pp);
    let pp_comm = if pp > 1 {
        let msg = b as f64 * model.seq_len as f64 * model.hidden as f64 * prec.act;
        mf * pipeline::chunks(schedule, chunks) as f64 * 2.0 * pp_link.message_time(msg)
    } else {
        0.0
    };

    let work = compute + tp_comm + pp_comm;
    let bubble = pipeline::bubble(schedule, chunks, pp, m);
    let pipeline = work / (1.0 - bubble);

    let (dp_link, dp_inter) = cluster.group_link(tp * pp, dp);
    let n = layout.device_params(model);
    let (pn, gn) = (n * prec.param, n * prec.grad);
    let coll = |s: f64| ring_collective_time(s, dp, dp_link);
    let (dp_comm, dp_bytes) = match zero {
        ZeroStage::Stage0 => (
            ring_allreduce_time(gn, dp, dp_link),
            super::comm::ring_allreduce_bytes(gn, dp),
        ),
        ZeroStage::Stage1 => (coll(gn) + coll(pn), frac(dp) * (gn + pn)),
        ZeroStage::Stage2 => (mf * coll(gn) + coll(pn), frac(dp) * (mf * gn + pn)),
        ZeroStage::Stage3 => (
            mf * (2.0 * coll(pn) + coll(gn)),
            frac(dp) * mf * (2.0 * pn + gn),
        ),
    };
    let window = match (overlap, zero) {
        (Overlap::None, _) => 0.0,
        (Overlap::Backward, ZeroStage::Stage3) | (Overlap::Full, _) => work,
        (Overlap::Backward, _) => overlap.window(work),
    };
    let dp_exposed = exposed(dp_comm, window);
    StepEstimate {
        micro_batch: b,
        compute,
        tp_comm,
        tp_inter,
        pp_comm,
        pp_inter,
        bubble,
        bubble_time: pipeline - work,
        dp_bytes,
        dp_comm,
        dp_inter,
        dp_exposed,
        step: pipeline + dp_exposed,
    }
}

/// `(d−1)/d`, the share of a payload one ring collective sends per device (0 for d ≤ 1).
fn frac(d: usize) -> f64 {
    super::comm::ring_collective_bytes(1.0, d)
}
