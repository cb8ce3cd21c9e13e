//! Megatron tensor parallelism: each transformer layer's matrices are split over t devices, so
//! each rank holds 1/t of the layer weights and does 1/t of its matmul and attention work, at
//! the price of 2 all-reduces of the [B·T, C] activations forward and 2 backward per layer.
//!
//! ```text
//! rank r of t (heads [r·nh/t, (r+1)·nh/t), MLP units [r·4C/t, (r+1)·4C/t)):
//!   x ─▶ ln1 ─f─▶ qkv_r (column) ─▶ attention (nh/t heads) ─▶ attproj_r (row) ─g─▶ +x ─▶ x2
//!   x2 ─▶ ln2 ─f─▶ fc_r (column) ─▶ gelu ─▶ fcproj_r (row) ─g─▶ +x2 ─▶ out
//! f = copy_to_tp:     identity forward, all-reduce (sum) of its input gradient backward
//! g = reduce_from_tp: all-reduce (sum) of the partial products forward, identity backward
//! ```
//!
//! The embedding, the layernorms, the row-parallel biases and the head are **replicated**:
//! every rank holds them and computes identical gradients for them, because their inputs are
//! identical after each all-reduce (a row-parallel bias is added once, by rank 0, before the
//! all-reduce). Replicating the embedding and head costs 2·V·C parameters per rank and the
//! head's V·C·B·T matmul on every rank; a vocabulary-parallel head would save both but adds an
//! all-reduce of the softmax statistics per microbatch. At this project's vocabularies (256
//! bytes) the head is a small share of the work, so replication is the simpler, cheaper choice.
//!
//! The layer ops come from [`GpuModel`] built for a [`crate::model::TpRank`]: its passes carry
//! the cut points where the all-reduces go, and [`run_pass`] runs a pass over the t ranks of
//! one group. The pipeline executor runs every stage as such a group, so tensor parallelism
//! composes with pipeline and data parallelism (dp × tp × pp).

pub mod shard;

use std::time::Instant;

use crate::collective::{self, Algo, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::link::Link;
use crate::model::gpu_model::GpuModel;
use crate::pipeline::executor::{Options, Pipeline};
use crate::pipeline::partition::Balance;
use crate::pipeline::{Schedule, ScheduleKind};
use crate::step::TrainConfig;

pub use shard::{combine_tensor_sq, gather, shard, split_of, Split};

/// Tensor parallelism alone: the whole model split over `gpus` (t = `gpus.len()` ranks), one
/// pipeline stage, `cfg.grad_accum` microbatches accumulated per step, tensor-parallel
/// all-reduces costed on `link`; ranks run concurrently unless `serial` (clean device times
/// on virtual devices). Train it with [`Pipeline::step`].
pub fn tensor_parallel(
    gpus: &[Gpu],
    cfg: TrainConfig,
    link: Link,
    serial: bool,
) -> Result<Pipeline> {
    let schedule = Schedule::new(ScheduleKind::GPipe, 1, cfg.grad_accum, 1)?;
    let opts = Options {
        tp: gpus.len(),
        tp_link: link,
        serial,
        ..Options::default()
    };
    Pipeline::new(gpus, cfg, schedule, &Balance::Params, opts)
}

/// `g` forward: sums the row-parallel partial products over the ranks (all-reduce). Its
/// backward is the identity (each rank keeps the replicated output gradient).
pub fn reduce_from_tp_forward(
    gpus: &[Gpu],
    views: &[View],
    algo: Algo,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    collective::all_reduce(gpus, views, algo, &Opts::default(), ledger, link)
}

/// `f` backward: sums the column-parallel layers' partial input gradients over the ranks
/// (all-reduce). Its forward is the identity (every rank reads the replicated input).
pub fn copy_to_tp_backward(
    gpus: &[Gpu],
    views: &[View],
    algo: Algo,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    collective::all_reduce(gpus, views, algo, &Opts::default(), ledger, link)
}

/// Which pre-built pass of the ranks' models to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Forward,
    /// The backward (input gradients only when the models are split for zero-bubble).
    Backward,
    /// Zero-bubble W: weight gradients; no communication.
    Weight,
}

/// What one pass over a tensor-parallel group cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PassCost {
    /// Device clock: per segment between all-reduces the slowest rank's kernel time, summed.
    pub compute: f64,
    /// Link-model device clock of the pass's all-reduces.
    pub comm: f64,
    /// Wall time of the all-reduces (host staging + ring).
    pub comm_wall: f64,
    /// All-reduces run.
    pub all_reduces: usize,
}

/// How a tensor-parallel group communicates: algorithm, link model and the ledger that
/// records every all-reduce.
#[derive(Clone, Debug)]
pub struct TpComm {
    pub algo: Algo,
    pub link: Link,
    pub ledger: Ledger,
}

impl TpComm {
    pub fn new(link: Link) -> Self {
        TpComm {
            algo: Algo::Ring,
            link,
            ledger: Ledger::new(),
        }
    }
}

/// Runs `pass` of `ranks` (rank r's model of one tensor-parallel group, all built for the same
/// blocks and microbatch shape): the ops up to each cut on every rank, then the cut's
/// all-reduce (`reduce_from_tp` forward, `copy_to_tp` backward), and so on to the end. With
/// one rank it is one timed run. `concurrent`: each segment runs on all ranks at once, one
/// thread per rank (what separate GPUs do); otherwise one rank after another, so on virtual
/// devices sharing one adapter each rank's device time is its own. Either way a segment
/// costs its slowest rank on the device clock.
pub fn run_pass(
    ranks: &[&GpuModel],
    pass: Pass,
    comm: &mut TpComm,
    concurrent: bool,
) -> Result<PassCost> {
    let Some(first) = ranks.first() else {
        return Err(Error::Config("a tensor-parallel pass needs a rank".into()));
    };
    if ranks
        .iter()
        .enumerate()
        .any(|(r, m)| m.tp.r != r || m.tp.t != ranks.len())
    {
        return Err(Error::Config(format!(
            "tensor-parallel group of {} models is not ranks 0..{} of one split",
            ranks.len(),
            ranks.len()
        )));
    }
    let cuts: Vec<usize> = cuts_of(first, pass).iter().map(|c| c.0).collect();
    let gpus: Vec<Gpu> = ranks.iter().map(|m| m.gpu.clone()).collect();
    let mut cost = PassCost::default();
    let mut lo = 0;
    for k in 0..=cuts.len() {
        let segment = |m: &GpuModel| -> Result<f64> {
            let ops = ops_of(m, pass);
            let hi = cuts.get(k).copied().unwrap_or(ops.len());
            Ok(m.gpu.run_timed(&ops[lo..hi])?.as_secs_f64())
        };
        let times: Vec<Result<f64>> = if concurrent && ranks.len() > 1 {
            std::thread::scope(|s| {
                let hs: Vec<_> = ranks.iter().map(|m| s.spawn(|| segment(m))).collect();
                hs.into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Device("tensor-parallel rank thread panicked".into()))
                        })
                    })
                    .collect()
            })
        } else {
            ranks.iter().map(|m| segment(m)).collect()
        };
        let mut slowest = 0.0f64;
        for t in times {
            slowest = slowest.max(t?);
        }
        cost.compute += slowest;
        let Some(&hi) = cuts.get(k) else { break };
        let views: Vec<View> = ranks
            .iter()
            .map(|m| cuts_of(m, pass)[k].1.clone())
            .collect();
        let before = comm.ledger.entries.len();
        let t0 = Instant::now();
        match pass {
            Pass::Forward => {
                reduce_from_tp_forward(&gpus, &views, comm.algo, &mut comm.ledger, &comm.link)?
            }
            _ => copy_to_tp_backward(&gpus, &views, comm.algo, &mut comm.ledger, &comm.link)?,
        }
        cost.comm_wall += t0.elapsed().as_secs_f64();
        cost.comm += Ledger {
            entries: comm.ledger.entries[before..].to_vec(),
            ..Ledger::default()
        }
        .link_clock();
        cost.all_reduces += 1;
        lo = hi;
    }
    Ok(cost)
}

fn ops_of(m: &GpuModel, pass: Pass) -> &[crate::kernels::Op] {
    match pass {
        Pass::Forward => &m.forward,
        Pass::Backward => &m.backward,
        Pass::Weight => &m.weight,
    }
}

fn cuts_of(m: &GpuModel, pass: Pass) -> &[(usize, View)] {
    match pass {
        Pass::Forward => &m.forward_cuts,
        Pass::Backward => &m.backward_cuts,
        Pass::Weight => &[],
    }
}
