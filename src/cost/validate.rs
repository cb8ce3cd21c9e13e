//! The planner checked against the trainer: a planned layout (the engine's own [`Mesh`]) run on
//! the layout engine, the device's compute rate calibrated in the cost model's own FLOP count,
//! and the exact figures the engine's buffers and ledgers must show for that layout.
//!
//! ```text
//! calibrate   rate = 6·N·tokens / measured seconds of one device's step   (N: the cost model's
//!             count, so that C = 6·N·tokens/(devices·rate) reproduces the measured step)
//! runnable    a planned Mesh the engine offers (every one but ZeRO-3 with the zero-bubble split)
//! expect      the engine's stages (its own partition of embedding, L layers, head) ─▶ per device:
//!               state bytes   16 · padded local parameters        (params + grads + Adam m, v),
//!                             ZeRO: 4·(P or P shard) + 4·(G or G shard) + 8·K shard, the
//!                             shard being the rank's 64-aligned chunk of the bucket; bf16:
//!                             2 + 2 + 12 bytes (f32 master, m, v), 128-aligned ([`bytes`])
//!               dp bytes      Σ over its stages' gradient buffers of the ring all-reduce volume
//!                             (ZeRO-1/2: reduce-scatter + parameter all-gather, the same
//!                             bytes; ZeRO-3: reduce-scatter + a gather of every block before
//!                             each forward and each backward)
//!               tp bytes      4 · m · layers · 2(t−1)/t · b·T·C·e  (2 + 2 all-reduces per layer,
//!                             e = 4 bytes per element, bf16 2)
//! measure     the layout trained on the engine, one device at a time: device-clock medians
//!             (the `plan` example, outside the cost model:
//!             the cost model itself does no device work)
//! compare     prediction beside measurement (ratio measured / predicted); exact ledgers or not
//! ```
//!
//! Conventions that differ, quantified by [`Conventions`] rather than hidden: the cost model
//! counts `12·L·d² + (V + ctx)·d` parameters (no biases or layernorms, head tied to the token
//! embedding, everything outside the blocks on stage 0 and split over tp); the trainer's head is
//! untied (V·d more on the last stage), each layer has 13·d bias and layernorm parameters, the
//! embedding, head and layernorms are replicated on every tensor-parallel rank, every tensor is
//! padded to 64 elements, and the pipeline balances L + 2 blocks (embedding, layers, head) by
//! parameter count instead of giving each stage L/pp layers.

use super::cluster::Cluster;
use super::comm::{ring_allreduce_bytes, tp_block_traffic, Link};
use super::layout::MeshCost;
use super::model::{Footprint, ModelShape};
use super::plan::{Candidate, Ranking};
use super::positive;
use crate::collective::ring_all_reduce_bytes;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::model::{Block, GptConfig};
use crate::pipeline::partition::{stage_blocks, Balance};
use crate::pipeline::{Link as PipeLink, Schedule};

mod bytes;
mod compare;
pub use compare::{compare, Measured, Pair, Row};

/// The cost model's view of the trainer's GPT: `12·L·d² + V·d + ctx·d` parameters, the
/// sequence length being the context.
pub fn shape_of(model: &GptConfig) -> Result<ModelShape> {
    model.validate()?;
    ModelShape::gpt(
        model.layers,
        model.channels,
        model.heads,
        model.ctx,
        model.vocab,
    )
}

/// Training FLOPs of one step by the cost model's rule: `6·N·tokens`.
pub fn step_flops(shape: &ModelShape, tokens: usize) -> f64 {
    6.0 * shape.params * tokens as f64
}

/// The device's rate in FLOP/s from one device's measured step of `tokens` tokens:
/// `6·N·tokens / seconds`. Errors unless the result is positive and finite.
pub fn calibrate(shape: &ModelShape, tokens: usize, seconds: f64) -> Result<f64> {
    positive(
        "the measured calibration step (s)",
        seconds,
        "run at least one step",
    )?;
    let rate = step_flops(shape, tokens) / seconds;
    positive(
        "the calibrated rate (FLOP/s)",
        rate,
        "use a model and batch with tokens",
    )?;
    Ok(rate)
}

/// One node of `devices` devices of `mem_gb` GB joined by `link`, each computing at `flops`.
pub fn cluster(devices: usize, link: &PipeLink, mem_gb: f64, flops: f64) -> Result<Cluster> {
    let l = *link;
    let c = Cluster {
        nodes: 1,
        devices_per_node: devices,
        mem_per_device: mem_gb * super::GB,
        intra: l,
        inter: l,
        flops,
    };
    c.validate()?;
    Ok(c)
}

/// `Ok` when the layout engine runs the planned `mesh` for `--validate`: every layout the
/// engine offers (all but ZeRO-3 under a zero-bubble split).
pub fn runnable(mesh: &Mesh) -> Result<()> {
    mesh.zero_offered()
        .map_err(|e| Error::Config(format!("{}: {e}", mesh.label())))
}

/// Parameter counts under both conventions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conventions {
    /// The cost model's N: `12·L·d² + (V + ctx)·d`.
    pub cost_params: f64,
    /// The trainer's parameters (one device, unpadded).
    pub trainer_params: usize,
    /// Biases and layernorm gains of the layers and the final layernorm: `13·d·L + 2·d`.
    pub norms_biases: usize,
    /// The untied head: `V·d`.
    pub untied_head: usize,
}

impl Conventions {
    pub fn of(model: &GptConfig) -> Result<Self> {
        let shape = shape_of(model)?;
        let (c, v) = (model.channels, model.vocab);
        Ok(Conventions {
            cost_params: shape.params,
            trainer_params: model.param_count(),
            norms_biases: 13 * c * model.layers + 2 * c,
            untied_head: v * c,
        })
    }
}

/// One device of a replica as the engine places it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceShare {
    /// Model-state bytes of this device in each replica (ZeRO shards differ by replica).
    pub state: Vec<u64>,
    /// Pipeline device (schedule device) and tensor-parallel rank.
    pub stage: usize,
    pub tp_rank: usize,
    /// The blocks of each of its chunks (model stages), in chunk order.
    pub chunks: Vec<Vec<Block>>,
    /// Local parameters, without and with the 64-element padding of each tensor.
    pub params: usize,
    pub padded: usize,
    /// Transformer layers it holds.
    pub layers: usize,
}

impl DeviceShare {
    /// Bytes of its params + grads + m + v buffers in the busiest replica: 16 · padded
    /// parameters unsharded.
    pub fn state_bytes(&self) -> u64 {
        self.state.iter().copied().max().unwrap_or(0)
    }

    /// "emb h0 h1", its blocks as [`crate::engine::Placement::blocks`] names them.
    pub fn blocks(&self) -> String {
        let names: Vec<String> = self
            .chunks
            .iter()
            .flatten()
            .map(|b| b.short_name())
            .collect();
        names.join(" ")
    }
}

/// What the engine must show for a mesh, derived from its partition and the ring formula. The
/// state bytes are those of the buffers the executor allocates per chunk (params, grads, m, v of
/// `layout_tp(chunk blocks, tp)`); [`compare`] checks the engine placed the same blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// Replica 0's devices in mesh order (every replica is the same).
    pub devices: Vec<DeviceShare>,
    /// The largest per-device state bytes.
    pub state_bytes: u64,
    /// Ring all-reduce bytes the busiest device sends for the data-parallel gradient average.
    pub dp_bytes_device: u64,
    /// `StepCosts::dp_bytes`: the engine's ledger counts a rank per replica and sums it over the
    /// replica's pp·tp devices (one all-reduce per stage and tensor rank); max over replicas.
    pub dp_bytes_ledger: u64,
    /// `StepCosts::tp_bytes`: ring all-reduce bytes of the busiest tensor-parallel rank.
    pub tp_bytes: u64,
    /// Activation bytes of the busiest device ([`crate::cost::activation::predict`], nothing
    /// recomputed).
    pub activation_bytes: u64,
    /// Bytes per gradient element on the wire (4 in f32, 2 in bf16).
    pub element_bytes: u64,
}

/// The engine's placement of `model` under `mesh` (microbatches of `micro_b` sequences of
/// `seq` tokens) in precision `prec` and the bytes it must record. Uses the engine's own
/// partition (blocks balanced by parameter count) and schedule-stage map; under bf16 each
/// chunk's storage layout places every tensor on 128 elements ([`crate::params::Layout::packed`]).
pub fn expect(
    model: &GptConfig,
    mesh: &Mesh,
    micro_b: usize,
    seq: usize,
    prec: crate::model::Precision,
) -> Result<Expected> {
    let stored = |blocks: &[Block]| prec.storage(model.layout_tp(blocks, mesh.tp));
    mesh.validate(model, micro_b, seq, mesh.devices())?;
    let sched = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks)?;
    let stages = stage_blocks(model, sched.stages(), &Balance::Params)?;
    let (t, d) = (mesh.tp, mesh.dp);
    let mut devices = Vec::new();
    for stage in 0..mesh.pp {
        for tp_rank in 0..t {
            let chunks: Vec<Vec<Block>> = (0..mesh.chunks)
                .map(|k| stages[sched.stage(stage, k)].clone())
                .collect();
            let layouts: Vec<_> = chunks.iter().map(|c| stored(c)).collect();
            // ZeRO-3's two gather slots per chunk hold its largest block
            let slots = chunks
                .iter()
                .zip(&layouts)
                .map(|(c, l)| {
                    let spans = model.block_spans(c, t, l)?;
                    Ok(spans.iter().map(|s| s.len()).max().unwrap_or(0))
                })
                .collect::<Result<Vec<usize>>>()?;
            let state = (0..d)
                .map(|r| {
                    layouts
                        .iter()
                        .zip(&slots)
                        .map(|(l, &slot)| bytes::zero_state(l.total, d, r, mesh.zero, slot, prec))
                        .sum()
                })
                .collect();
            devices.push(DeviceShare {
                state,
                stage,
                tp_rank,
                params: layouts.iter().map(|l| l.count()).sum(),
                padded: layouts.iter().map(|l| l.total).sum(),
                layers: chunks
                    .iter()
                    .flatten()
                    .filter(|b| matches!(b, Block::Layer(_)))
                    .count(),
                chunks,
            });
        }
    }
    // one ring all-reduce per (model stage, tp rank) over the d replicas; replica r is rank r
    // (ZeRO-1/2: its reduce-scatter and all-gather send the same; ZeRO-3 gathers blocks)
    let zero3 = if mesh.zero >= 3 && d > 1 {
        let n = stored(&model.blocks()).total;
        (0..d)
            .map(|r| bytes::zero3_rank(model, n, d, r, mesh.microbatches, prec))
            .collect::<Result<Vec<u64>>>()?
    } else {
        Vec::new()
    };
    let sent = |dev: &DeviceShare, r: usize| -> u64 {
        if let Some(&b) = zero3.get(r) {
            return b;
        }
        dev.chunks
            .iter()
            .map(|c| bytes::aligned_ring_rank(stored(c).total, d, r, prec))
            .sum()
    };
    let dp_bytes_device = (0..d)
        .flat_map(|r| devices.iter().map(move |dev| (dev, r)))
        .map(|(dev, r)| sent(dev, r))
        .max()
        .unwrap_or(0);
    let dp_bytes_ledger = (0..d)
        .map(|r| devices.iter().map(|dev| sent(dev, r)).sum::<u64>())
        .max()
        .unwrap_or(0);
    // 2 forward + 2 backward all-reduces of the [b·T, C] activation per layer per microbatch
    // (bf16: the ring moves its words, two elements each)
    let message = prec.words(micro_b * seq * model.channels);
    let tp_bytes = devices
        .iter()
        .map(|dev| (4 * mesh.microbatches * dev.layers) as u64 * ring_all_reduce_bytes(message, t))
        .max()
        .unwrap_or(0);
    let micro = crate::model::Micro { b: micro_b, t: seq };
    let activation_bytes = crate::cost::activation::predict(
        model,
        micro,
        mesh,
        &Balance::Params,
        crate::model::Recompute::None,
        prec,
    )?
    .iter()
    .map(|a| a.total)
    .max()
    .unwrap_or(0);
    Ok(Expected {
        activation_bytes,
        state_bytes: devices
            .iter()
            .map(DeviceShare::state_bytes)
            .max()
            .unwrap_or(0),
        devices,
        dp_bytes_device,
        dp_bytes_ledger,
        tp_bytes,
        element_bytes: prec.element_bytes() as u64,
    })
}

/// The cost model's tensor-parallel bytes per device per step: `m · L/pp` blocks of
/// [`tp_block_traffic`] (ring volumes).
pub fn predicted_tp_bytes(shape: &ModelShape, prec: &Footprint, layout: &Mesh, b: usize) -> f64 {
    let per_block = tp_block_traffic(
        b,
        shape.seq_len,
        shape.hidden,
        prec.act,
        layout.tp,
        Link::gbps(1.0),
    );
    layout.microbatches as f64 * (shape.layers / layout.pp) as f64 * per_block.bytes
}

/// The ring formula `2(d−1)/d·S` on the engine's own gradient buffer of the busiest device
/// (S = 4 · padded parameters, summed over its model stages): the cost model's data-parallel
/// convention with the trainer's parameter count. Equals [`Expected::dp_bytes_device`] when d
/// divides every buffer (chunks of a ring differ by one element otherwise).
pub fn ring_formula_dp_bytes(exp: &Expected, dp: usize) -> f64 {
    exp.devices
        .iter()
        .map(|dev| ring_allreduce_bytes((exp.element_bytes * dev.padded as u64) as f64, dp))
        .fold(0.0, f64::max)
}

/// The layouts to run: the first `k` of the plan's ranking (recommended first) that the engine
/// can run, and the ZeRO layouts skipped on the way (ranked no lower than the last one run).
pub fn select(plan: &Ranking, k: usize) -> (Vec<Candidate>, Vec<Candidate>) {
    let (mut run, mut skipped) = (Vec::new(), Vec::new());
    for c in &plan.ranked {
        if run.len() == k {
            break;
        }
        if runnable(&c.layout).is_ok() {
            run.push(*c);
        } else {
            skipped.push(*c);
        }
    }
    (run, skipped)
}
