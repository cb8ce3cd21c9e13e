//! Activation memory per device, predicted from the layout: what each microbatch's forward
//! keeps for its backward, times the microbatches the device's schedule holds at once, plus the
//! recompute workspace. The memory ledger's `activations` category measures the same thing
//! (compared in `plan --validate`, the `zero` example and `tests/activation_memory.rs`).
//!
//! Per layer per microbatch, n = b·s tokens, h = C, a heads, t-way tensor parallel, f32
//! elements (what this model's kernels keep; Korthikanti et al. 2022, Table 2, counts the same
//! tensors for Megatron with 16-bit elements and 1-byte dropout masks):
//!
//! ```text
//! kept tensor          elements        none  selective  full
//! input x              n·h             ✓     ✓          ✓
//! ln1, x2, ln2         3·n·h           ✓     ✓
//! qkv, atty            4·n·h/t         ✓     ✓
//! attproj, fcproj      2·n·h           ✓     ✓          (row-parallel outputs, summed over t)
//! fch, gelu(fch)       8·n·h/t         ✓     ✓
//! ln mean, rstd        4·n             ✓     ✓
//! att (probabilities)  b·(a/t)·s²      ✓
//!
//! none:       4·s·b·h·(6 + 12/t) + 16·s·b + 4·a·s²·b/t   bytes     (Korthikanti, 16-bit:
//! selective:  4·s·b·h·(6 + 12/t) + 16·s·b                          s·b·h·(10 + 24/t + 5·a·s/(h·t)))
//! full:       4·s·b·h
//! ```
//!
//! Under bf16 every tensor but the layernorm statistics takes ⌈len/2⌉ 4-byte words (two bf16
//! per word): half the bytes above, the statistics' 16·s·b kept; the head's logits, their
//! gradient and the losses stay f32.
//!
//! A zero-bubble split keeps four output gradients per layer for W (`n·h·(2 + 7/t)`). Each
//! microbatch slot also holds the token ids and targets (2n), the stage's output `x` (n·h), and,
//! on the last stage, the head's lnf (n·h + 2n), logits and their gradient (2·n·V) and losses (n).
//! Recomputation writes into one workspace per chunk: one layer's `none` tensors but its input
//! (full), or one `att` (selective).
//!
//! Microbatches held per chunk (the slots the runtime allocates): p = 1: 1; GPipe: m; 1F1B:
//! min(m, p − s) on stage s; ZB-H1: min(m, p) (a slot is freed by W, which the schedule defers);
//! interleaved: read off the schedule's action list (no closed form per chunk; the sum over a
//! device's chunks is at least Megatron's p + (p − 1)/v microbatches of L/p layers).

use crate::error::Result;
use crate::mesh::Mesh;
use crate::model::{Block, GptConfig, Micro, Precision, Recompute};
use crate::pipeline::partition::{stage_blocks, Balance};
use crate::pipeline::{Schedule, ScheduleKind};

/// Bytes of `len` f32 elements as the ledger counts them (a buffer has at least one element).
fn bytes(len: usize) -> u64 {
    4 * len.max(1) as u64
}

/// Bytes of a tensor of `len` elements of the model's precision (bf16: ⌈len/2⌉ words).
fn tensor_bytes(prec: Precision, len: usize) -> u64 {
    bytes(prec.words(len))
}

/// One layer's activations on a tensor-parallel rank, as separate buffers: (elements, whether
/// the buffer stays f32 whatever the precision: the layernorm statistics).
fn layer_buffers(cfg: &GptConfig, micro: Micro, t: usize, mode: Recompute) -> Vec<(usize, bool)> {
    let (n, c) = (micro.tokens(), cfg.channels);
    let (ct, ft) = (c / t, 4 * c / t);
    let att = micro.b * (cfg.heads / t) * micro.t * micro.t;
    match mode {
        Recompute::Full => Vec::new(),
        _ => {
            let mut v = vec![(n * c, false), (n, true), (n, true), (3 * n * ct, false)];
            v.extend([
                (n * ct, false),
                (n * c, false),
                (n * c, false),
                (n * c, false),
            ]);
            v.extend([
                (n, true),
                (n, true),
                (n * ft, false),
                (n * ft, false),
                (n * c, false),
            ]);
            if mode == Recompute::None {
                v.push((att, false));
            }
            v
        }
    }
}

/// Bytes of `buffers` in precision `prec`.
fn sum(prec: Precision, buffers: Vec<(usize, bool)>) -> u64 {
    buffers
        .into_iter()
        .map(|(len, f32)| {
            if f32 {
                bytes(len)
            } else {
                tensor_bytes(prec, len)
            }
        })
        .sum()
}

/// Bytes one microbatch slot of a chunk holding `blocks` keeps (see the module table).
pub fn slot_bytes(
    cfg: &GptConfig,
    blocks: &[Block],
    micro: Micro,
    t: usize,
    mode: Recompute,
    split: bool,
    prec: Precision,
) -> u64 {
    let (n, c, v) = (micro.tokens(), cfg.channels, cfg.vocab);
    let (ct, ft) = (c / t, 4 * c / t);
    let layers = blocks
        .iter()
        .filter(|b| matches!(b, Block::Layer(_)))
        .count();
    // token ids, targets, and the residual stream at every layer boundary
    let mut total = 2 * bytes(n) + (layers as u64 + 1) * tensor_bytes(prec, n * c);
    total += layers as u64 * sum(prec, layer_buffers(cfg, micro, t, mode));
    if split {
        let saved = [n * c, n * ft, n * c, n * 3 * ct];
        let each: u64 = saved.into_iter().map(|l| tensor_bytes(prec, l)).sum();
        total += layers as u64 * each;
    }
    if blocks.contains(&Block::Head) {
        // lnf (the precision's), its statistics, logits and dlogits and losses (f32)
        total += tensor_bytes(prec, n * c) + 3 * bytes(n) + 2 * bytes(n * v);
    }
    total
}

/// Bytes of a chunk's recompute workspace (0 without layers or recomputation).
pub fn workspace_bytes(
    cfg: &GptConfig,
    blocks: &[Block],
    micro: Micro,
    t: usize,
    mode: Recompute,
    prec: Precision,
) -> u64 {
    if !blocks.iter().any(|b| matches!(b, Block::Layer(_))) {
        return 0;
    }
    match mode {
        Recompute::None => 0,
        Recompute::Selective => tensor_bytes(prec, micro.b * (cfg.heads / t) * micro.t * micro.t),
        Recompute::Full => sum(prec, layer_buffers(cfg, micro, t, Recompute::None)),
    }
}

/// Microbatches chunk `chunk` of pipeline device `s` holds at once (the module's rules).
pub fn held(schedule: &Schedule, s: usize, chunk: usize) -> usize {
    let (p, m) = (schedule.p, schedule.m);
    match schedule.kind {
        _ if p == 1 && schedule.v == 1 => 1,
        ScheduleKind::GPipe => m,
        ScheduleKind::OneFOneB => m.min(p - s),
        ScheduleKind::ZeroBubbleH1 => m.min(p),
        ScheduleKind::Interleaved | ScheduleKind::ZeroBubbleV | ScheduleKind::DualPipeV => {
            schedule.slots_needed()[s][chunk]
        }
    }
}

/// One device's predicted activation bytes, with its parts.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceActivations {
    /// Per chunk of the device: (microbatches held, bytes per microbatch).
    pub chunks: Vec<(usize, u64)>,
    /// Recompute workspaces of the device's chunks.
    pub workspace: u64,
    /// Σ held · per microbatch + workspace.
    pub total: u64,
}

/// The predicted activation bytes of every device of `mesh` (global device order) for
/// microbatches `micro` of `cfg` under `mode` in precision `prec`, stages balanced by
/// `balance`.
pub fn predict(
    cfg: &GptConfig,
    micro: Micro,
    mesh: &Mesh,
    balance: &Balance,
    mode: Recompute,
    prec: Precision,
) -> Result<Vec<DeviceActivations>> {
    let schedule = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks)?;
    let stages = stage_blocks(cfg, schedule.stages(), balance)?;
    let split = schedule.kind.split_backward();
    let t = mesh.tp;
    (0..mesh.devices())
        .map(|d| {
            let s = mesh.coords(d).stage;
            let mut workspace = 0;
            let chunks: Vec<(usize, u64)> = (0..mesh.chunks)
                .map(|k| {
                    let blocks = &stages[schedule.stage(s, k)];
                    workspace += workspace_bytes(cfg, blocks, micro, t, mode, prec);
                    (
                        held(&schedule, s, k),
                        slot_bytes(cfg, blocks, micro, t, mode, split, prec),
                    )
                })
                .collect();
            let total = chunks.iter().map(|(h, b)| *h as u64 * b).sum::<u64>() + workspace;
            Ok(DeviceActivations {
                chunks,
                workspace,
                total,
            })
        })
        .collect()
}
