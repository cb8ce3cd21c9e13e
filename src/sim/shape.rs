//! The chunks of a layout for a model that is never allocated: the blocks of each stage, the
//! marks of each pass (what the lowering reads), the FLOPs of each segment, the gradient
//! buckets and each block's parameters, from the GPT's shape alone.
//!
//! ```text
//! n tokens per microbatch, h channels, T sequence, V vocabulary, t tensor ranks
//! layer      F: attention 8nh²/t + 4nTh/t ─Cut─ MLP 16nh²/t ─Cut─          (Cut only when t > 1)
//!            B (split, input gradients): MLP 16nh²/t ─Cut─ attention 8nh²/t + 8nTh/t ─Cut─
//!            W (weight gradients): 24nh²/t;   unsplit backward = B + W, cut as B
//! embedding  F: nh;  W: nh                    head  F, B, W: 2nhV each (replicated over t)
//! recompute  full: each layer's backward runs its forward again; selective: the scores again
//! buckets    in backward order, ≤ `bucket_bytes` of gradients each, final after the last block
//!            they touch (a mark between blocks; none at the pass's end)
//! ZeRO-3     a mark at every block boundary of F and of the backward (blocks gathered one by one)
//! ```
//!
//! A layer's FLOPs under tensor parallelism (t > 1) are counted apart: its products are
//! narrower per rank and the calibration prices them at their own rate.
//!
//! Each piece also carries its fixed cost: half a layer (a layer's attention and its MLP), or
//! one end (the embedding, the head); every compute op (one timed submission) one more. The calibration fits seconds per
//! segment, layer and end beside seconds per FLOP.

use crate::error::Result;
use crate::mesh::Mesh;
use crate::model::{Block, GptConfig, Recompute};
use crate::pipeline::partition::{stage_blocks, Balance};
use crate::pipeline::schedule::{Kind, Schedule};
use crate::runtime::ir::{ChunkShape, Mark};
use crate::sim::calibration::Terms;

/// The work of one segment of a pass.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    pub flops: f64,
    /// FLOPs of a layer split over tensor ranks (in place of `flops` when t > 1).
    pub split: f64,
    /// Layers of fixed cost (a layer's attention or MLP half counts ½).
    pub blocks: f64,
    /// The embedding and the head, each a fixed cost of its own.
    pub ends: f64,
}

/// What the calibration scales for one compute op over segments `works` (one timed
/// submission, however many segments it runs).
pub fn op_terms(works: &[Work]) -> Terms {
    works.iter().fold([1.0, 0.0, 0.0, 0.0, 0.0], |t, w| {
        [
            t[0],
            t[1] + w.blocks,
            t[2] + w.ends,
            t[3] + w.flops,
            t[4] + w.split,
        ]
    })
}

impl std::ops::AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        self.flops += o.flops;
        self.split += o.split;
        self.blocks += o.blocks;
        self.ends += o.ends;
    }
}

/// One chunk (pipeline stage) of a device, as the simulator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct SimChunk {
    /// Model stage.
    pub stage: usize,
    pub blocks: Vec<Block>,
    /// What the lowering reads.
    pub shape: ChunkShape,
    /// The work of every segment of F, B (the whole backward when unsplit) and W.
    pub work: [Vec<Work>; 3],
    /// Tensor-rank-local parameters.
    pub params: usize,
    /// Parameters of each gradient bucket, in the order the backward finishes them.
    pub buckets: Vec<usize>,
    /// Parameters of each block (what a ZeRO-3 gather of it moves).
    pub block_params: Vec<usize>,
}

/// What the pieces of a pass are built from.
struct Dims {
    n: f64,
    h: f64,
    seq: f64,
    vocab: f64,
    t: f64,
    recompute: Recompute,
}

/// One piece of a pass: its work, then a tensor-parallel cut after it or not.
type Piece = (Work, bool);

fn end(flops: f64) -> Work {
    Work {
        flops,
        ends: 1.0,
        ..Work::default()
    }
}

impl Dims {
    /// A layer's piece of `flops` and `blocks` of fixed cost (its FLOPs split when t > 1).
    fn work(&self, flops: f64, blocks: f64) -> Work {
        let (flops, split) = if self.t > 1.0 {
            (0.0, flops)
        } else {
            (flops, 0.0)
        };
        Work {
            flops,
            split,
            blocks,
            ends: 0.0,
        }
    }

    /// The pieces of `block`'s pass `kind` (`split`: B is input gradients only), in pass order.
    fn pieces(&self, block: Block, kind: Kind, split: bool) -> Vec<Piece> {
        let (n, h, t) = (self.n, self.h, self.t);
        let cut = t > 1.0;
        match block {
            Block::Embedding => match kind {
                Kind::F => vec![(end(n * h), false)],
                Kind::B if split => vec![(self.work(0.0, 0.0), false)],
                _ => vec![(end(n * h), false)],
            },
            Block::Head => {
                let one = 2.0 * n * h * self.vocab;
                let f = match (kind, split) {
                    (Kind::B, false) => 2.0 * one,
                    _ => one,
                };
                vec![(end(f), false)]
            }
            Block::Layer(_) => {
                let attn_mm = 8.0 * n * h * h / t;
                let core = 4.0 * n * self.seq * h / t;
                let mlp_mm = 16.0 * n * h * h / t;
                // what the backward recomputes of the forward
                let (re_attn, re_mlp) = match self.recompute {
                    Recompute::None => (0.0, 0.0),
                    Recompute::Selective => (core, 0.0),
                    Recompute::Full => (attn_mm + core, mlp_mm),
                };
                match (kind, split) {
                    (Kind::F, _) => {
                        vec![
                            (self.work(attn_mm + core, 0.5), cut),
                            (self.work(mlp_mm, 0.5), cut),
                        ]
                    }
                    (Kind::B, true) => vec![
                        (self.work(mlp_mm + re_mlp, 0.5), cut),
                        (self.work(attn_mm + 2.0 * core + re_attn, 0.5), cut),
                    ],
                    (Kind::B, false) => vec![
                        (self.work(2.0 * mlp_mm + re_mlp, 0.5), cut),
                        (self.work(2.0 * attn_mm + 2.0 * core + re_attn, 0.5), cut),
                    ],
                    (Kind::W, _) => vec![(self.work(attn_mm + mlp_mm, 1.0), false)],
                }
            }
        }
    }
}

/// The chunks of every pipeline device of `mesh` (`[stage position][local chunk]`) running
/// `schedule`, for `cfg` in microbatches of `micro_b` sequences of `seq` tokens, gradient
/// buckets of at most `bucket_bytes` at `grad_bytes` per gradient; stages balanced by
/// parameters, as the runtime balances them.
#[allow(clippy::too_many_arguments)]
pub fn chunks(
    cfg: &GptConfig,
    mesh: &Mesh,
    schedule: &Schedule,
    micro_b: usize,
    seq: usize,
    recompute: Recompute,
    bucket_bytes: usize,
    grad_bytes: usize,
) -> Result<Vec<Vec<SimChunk>>> {
    let stages = stage_blocks(cfg, schedule.stages(), &Balance::Params)?;
    let dims = Dims {
        n: (micro_b * seq) as f64,
        h: cfg.channels as f64,
        seq: seq as f64,
        vocab: cfg.vocab as f64,
        t: mesh.tp as f64,
        recompute,
    };
    let split = schedule.kind.split_backward();
    let gather = mesh.zero == 3 && mesh.dp > 1;
    let per_bucket = (bucket_bytes / grad_bytes.max(1)).max(1);
    Ok((0..mesh.pp)
        .map(|s| {
            (0..mesh.chunks)
                .map(|c| {
                    let stage = schedule.stage(s, c);
                    let blocks = stages[stage].clone();
                    chunk(
                        cfg, &dims, stage, blocks, mesh.tp, split, gather, per_bucket,
                    )
                })
                .collect()
        })
        .collect())
}

#[allow(clippy::too_many_arguments)]
fn chunk(
    cfg: &GptConfig,
    dims: &Dims,
    stage: usize,
    blocks: Vec<Block>,
    tp: usize,
    split: bool,
    gather: bool,
    per_bucket: usize,
) -> SimChunk {
    let block_params: Vec<usize> = blocks
        .iter()
        .map(|b| cfg.layout_tp(&[*b], tp).count())
        .collect();
    // buckets in backward order (last block first), each final after the block that fills it
    let mut buckets = Vec::new();
    let mut ready_after: Vec<Vec<usize>> = vec![Vec::new(); blocks.len()];
    let mut open = 0usize;
    for i in (0..blocks.len()).rev() {
        let mut left = block_params[i];
        while left > 0 {
            let take = left.min(per_bucket - open);
            open += take;
            left -= take;
            if open == per_bucket {
                ready_after[i].push(buckets.len());
                buckets.push(open);
                open = 0;
            }
        }
    }
    if open > 0 {
        ready_after[0].push(buckets.len());
        buckets.push(open);
    }
    let mut marks: [Vec<Mark>; 3] = Default::default();
    let mut work: [Vec<Work>; 3] = Default::default();
    for (k, kind) in [Kind::F, Kind::B, Kind::W].into_iter().enumerate() {
        if kind == Kind::W && !split {
            work[k].push(Work::default());
            continue;
        }
        let order: Vec<usize> = match kind {
            Kind::F => (0..blocks.len()).collect(),
            _ => (0..blocks.len()).rev().collect(),
        };
        let mut seg = Work::default();
        for (j, &i) in order.iter().enumerate() {
            for (w, cut) in dims.pieces(blocks[i], kind, split) {
                seg += w;
                if cut && kind != Kind::W {
                    marks[k].push(Mark::Cut);
                    work[k].push(std::mem::take(&mut seg));
                }
            }
            let last = j + 1 == order.len();
            // a block boundary: ZeRO-3's gather point, or where buckets become final
            let ready = match kind {
                Kind::B if !split => ready_after[i].clone(),
                _ => Vec::new(),
            };
            let mark = match (last, gather && kind != Kind::W, ready.is_empty()) {
                (true, _, _) => None,
                (false, _, false) => Some(Mark::Ready(ready)),
                (false, true, true) => Some(Mark::Block),
                (false, false, true) => None,
            };
            if let Some(mark) = mark {
                marks[k].push(mark);
                work[k].push(std::mem::take(&mut seg));
            }
        }
        work[k].push(seg);
    }
    let [forward, backward, weight] = marks;
    SimChunk {
        stage,
        params: block_params.iter().sum(),
        blocks,
        shape: ChunkShape {
            forward,
            backward,
            weight,
            buckets: buckets.len(),
            split,
            gather,
        },
        work,
        buckets,
        block_params,
    }
}
