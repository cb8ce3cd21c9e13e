//! One model chunk (pipeline stage) on one device's worker: its flat buffers, its activation
//! slots, its gradient buckets and their shard geometry over the data-parallel group, its
//! optimizer, and the segments its passes are cut into (the [`ChunkShape`] the lowering sees).
//!
//! ```text
//! backward ops  [0 ............ c0 ...... r(b0) ........ c1 .......... len)
//! marks                         Cut       Ready([0])     Cut                 (b1: final at len)
//! segments       0              1         2              3
//! ```

mod cut;
mod storage;

use cut::{cut, units_of};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use super::ir::{ChunkShape, Mark};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::Dispatch;
use crate::memory::Category;
use crate::model::gpu_model::{BuildOptions, GpuModel, Workspace};
use crate::model::{Block, Precision, Recompute, TpRank};
use crate::optim::Optimizer;
use crate::parallel::accumulate::TreeAccumulator;
use crate::parallel::bucket::{buckets, Bucket};
use crate::parallel::shard::Grid;
use crate::parallel::tensor as tp;
use crate::params::Buffers;
use crate::pipeline::schedule::Kind;
use crate::step::TrainConfig;

/// How a chunk is built: where it sits and what its data-parallel group shards.
pub(super) struct ChunkSpec<'a> {
    pub stage: usize,
    pub blocks: &'a [Block],
    pub slots: usize,
    pub tp: TpRank,
    /// Data-parallel rank and degree.
    pub dp: (usize, usize),
    /// ZeRO stage over the data-parallel group (shards only when dp > 1).
    pub zero: usize,
    pub split: bool,
    pub bucket_bytes: usize,
    /// Loss scale of every token: 1 / (tokens of the whole step, every replica).
    pub dloss: f32,
    /// Pairwise-tree accumulation over this many microbatches per step (None: `grads +=`).
    pub tree: Option<usize>,
    /// What each layer's backward recomputes.
    pub recompute: Recompute,
    pub precision: Precision,
}

/// What a test or a report may read of one chunk: where it sits, its flat size, its gradient
/// buckets and their shard grid over the data-parallel group, and how it is run.
#[derive(Clone, Debug)]
pub struct ChunkInfo {
    /// Model stage of the chunk.
    pub stage: usize,
    /// Flat f32 elements of the chunk's (tensor-rank-local) parameters.
    pub flat_len: usize,
    /// The gradient buckets' flat ranges, in the order backward finishes them.
    pub buckets: Vec<Range<usize>>,
    /// The shard geometry over the data-parallel group (one unit per bucket).
    pub grid: Grid,
    /// The storage range of each block of a chunk gathered block by block (ZeRO-3); empty
    /// otherwise.
    pub block_spans: Vec<Range<usize>>,
    /// Activation slots allocated (one per microbatch the schedule may hold at once).
    pub slots: usize,
    /// Most microbatches whose activations the chunk held at once so far.
    pub peak_held: usize,
}

pub(super) struct Chunk {
    /// Model stage of this chunk.
    pub stage: usize,
    /// Precision of the parameters and gradients in `buffers` (bf16: packed words).
    pub precision: Precision,
    pub buffers: Buffers,
    /// The chunk's canonical (tensor-rank-local, 64-aligned) layout, in which model state is
    /// exchanged; `buffers.layout` is the same, or its packed storage layout under bf16.
    pub local: crate::params::Layout,
    /// ZeRO-1–3: this rank's shard of the AdamW moments (the buffers hold placeholders).
    pub moments: Option<(View, View)>,
    /// ZeRO 1–3 in bf16: this rank's shard of the f32 master weights (the grid's storage).
    pub master_shard: Option<View>,
    /// ZeRO-3: `buffers.params` is this rank's shard (stored as the grid's storage says).
    pub params_sharded: bool,
    pub split: bool,
    /// Activation slots; all share `buffers`.
    pub slots: Vec<GpuModel>,
    /// Slot holding each microbatch's activations.
    pub held: HashMap<usize, usize>,
    pub peak: usize,
    /// The grid unit of each gradient bucket (buckets in backward order).
    pub unit_of: Vec<usize>,
    pub grid: Grid,
    pub optim: Optimizer,
    pub zero_grads: Dispatch,
    /// Pairwise-tree accumulation of the microbatch gradients (ZeRO 0 only).
    pub tree: Option<TreeAccumulator>,
    /// Dispatch ranges of the segments of F, B and W.
    pub segments: [Vec<Range<usize>>; 3],
    pub shape: ChunkShape,
}

impl Chunk {
    /// Builds the chunk on `gpu`, initialised exactly like one device with `cfg.seed`: its
    /// model slots, bind groups and op lists once for the run. How its parameters are bound is
    /// decided here: its own flat buffer, or (ZeRO-3) two gather slots the blocks take turns in.
    pub fn new(gpu: &Gpu, cfg: &TrainConfig, spec: &ChunkSpec) -> Result<Chunk> {
        let (t, r) = (spec.tp.t, spec.tp.r);
        let (rank, d) = spec.dp;
        let prec = spec.precision;
        let full = cfg.model.init(&cfg.model.layout(spec.blocks), cfg.seed);
        let shards = tp::shard(&cfg.model, spec.blocks, &full, t)?;
        let local = cfg.model.layout_tp(spec.blocks, t);
        let sharded = spec.zero >= 1 && d > 1;
        let gather = spec.zero >= 3 && d > 1;
        let mut buffers = match gather {
            true => storage::gathered(gpu, cfg, spec, &local)?,
            false => Buffers::alloc(gpu, &local, prec, !sharded),
        };
        let init = local.relayout(&shards[r], &buffers.layout)?;
        if !gather {
            buffers.upload_params(gpu, &init)?;
        }
        // one recompute workspace for every slot of the chunk (none without layers)
        let has_layers = spec.blocks.iter().any(|b| matches!(b, Block::Layer(_)));
        let opts = BuildOptions {
            split: spec.split,
            tp: spec.tp,
            precision: prec,
            workspace: match has_layers {
                true => Workspace::new(gpu, &cfg.model, cfg.micro, t, spec.recompute, prec)?,
                false => None,
            },
        };
        let slots = (0..spec.slots.max(1))
            .map(|_| {
                GpuModel::build(
                    gpu,
                    cfg.model,
                    spec.blocks,
                    cfg.micro,
                    spec.dloss,
                    buffers.clone(),
                    &opts,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let m0 = &slots[0];
        // buckets and shards are ranges of the storage layout (= `local` under f32)
        let stored = buffers.layout.clone();
        let buckets = buckets(&stored, &m0.grad_ready, spec.bucket_bytes);
        let units: Vec<Range<usize>> = buckets.iter().map(|b| b.range.clone()).collect();
        // packed: chunks of words on 256-byte boundaries
        let grid = Grid::aligned(&units, stored.total, d, prec.align())?;
        let unit_of = units_of(&grid, &buckets)?;
        if gather {
            // ZeRO-3: the parameters this rank keeps are its shard (the model binds the slots)
            let len = grid.shard_len(rank).max(1);
            let name = match prec {
                Precision::F32 => "params shard",
                Precision::Bf16 => "params.bf16 shard",
            };
            buffers.params = gpu.buffer_in(Category::Parameters, name, prec.words(len));
            buffers.upload_params(gpu, &grid.shard_of(rank, &init))?;
        }
        let (optim, moments, master_shard) = if sharded {
            let len = grid.shard_len(rank).max(1);
            let m = gpu.buffer_in(Category::OptimizerState, "adam.m shard", len);
            let v = gpu.buffer_in(Category::OptimizerState, "adam.v shard", len);
            // the reduced gradient chunk lands in its own range of the full gradients
            let pieces = grid.pieces(rank, gather, false);
            // bf16: this rank's shard of the f32 master weights
            let master = match buffers.packed() {
                false => None,
                true => {
                    let master = gpu.buffer_in(Category::OptimizerState, "master shard", len);
                    gpu.upload(&master, &grid.shard_of(rank, &init))?;
                    Some(master)
                }
            };
            let o = Optimizer::sharded(
                gpu,
                &stored,
                &buffers.params,
                &buffers.grads,
                master.as_ref(),
                &m,
                &v,
                &pieces,
            )?;
            (o, Some((m, v)), master)
        } else {
            (
                Optimizer::with_cuts(gpu, &buffers, &grid.cuts())?,
                None,
                None,
            )
        };
        let zero_grads = crate::kernels::elementwise::fill(gpu, prec, &buffers.grads, 0.0)?;
        let tree = match spec.tree {
            Some(count) if !sharded => {
                Some(TreeAccumulator::new(gpu, &buffers.grads, count, prec)?)
            }
            Some(_) => {
                return Err(Error::Config(
                    "pairwise-tree accumulation applies to unsharded gradients (--zero 0)".into(),
                ))
            }
            None => None,
        };
        let (segments, shape) = match &buffers.slots {
            // ZeRO-3: a segment per block, so each block's gather can run before it
            Some(s) => cut::by_block(m0, &s.spans, &buckets)?,
            // a tree's buckets are final only after its last microbatch: no mark inside a pass
            None => cut(m0, &buckets, spec.split, tree.is_none()),
        };
        Ok(Chunk {
            stage: spec.stage,
            precision: prec,
            buffers,
            local,
            moments,
            master_shard,
            params_sharded: gather,
            split: spec.split,
            slots,
            held: HashMap::new(),
            peak: 0,
            unit_of,
            grid,
            optim,
            zero_grads,
            tree,
            segments,
            shape,
        })
    }

    /// The chunk as [`ChunkInfo`].
    pub fn info(&self) -> ChunkInfo {
        ChunkInfo {
            stage: self.stage,
            flat_len: self.grid.total,
            buckets: self
                .unit_of
                .iter()
                .map(|&u| self.grid.units[u].range.clone())
                .collect(),
            grid: self.grid.clone(),
            block_spans: self
                .buffers
                .slots
                .as_ref()
                .map(|s| s.spans.clone())
                .unwrap_or_default(),
            slots: self.slot_count(),
            peak_held: self.peak,
        }
    }

    /// The kernels of segments `segs` of pass `kind` of slot `slot`.
    pub fn ops(&self, slot: usize, kind: Kind, segs: &Range<usize>) -> Result<Cow<'_, [Dispatch]>> {
        let m = &self.slots[slot];
        let all = match kind {
            Kind::F => &m.forward,
            Kind::B => &m.backward,
            Kind::W => &m.weight,
        };
        let seg = &self.segments[kind.index()];
        let (a, b) = (seg[segs.start].start, seg[segs.end - 1].end);
        Ok(Cow::Borrowed(&all[a..b]))
    }

    /// Activation slots.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Where this rank's reduced chunk of bucket `bucket` lands: its own range of the full
    /// gradients (ZeRO 1–3); packed words under bf16.
    pub fn own_grads(&self, bucket: usize, rank: usize) -> View {
        self.words(&self.buffers.grads, self.own_part(bucket, rank))
    }

    /// The words of flat range `r` of one of the chunk's flat buffers (`params` or `grads`:
    /// f32 elements, or bf16 pairs from an even start).
    pub fn words(&self, flat: &View, r: Range<usize>) -> View {
        let p = self.precision;
        flat.slice(r.start / p.per_word(), p.words(r.len()))
    }

    /// The view all-reduced at tensor-parallel cut `cut` of pass `kind` in slot `slot`.
    pub fn cut_view(&self, slot: usize, kind: Kind, cut: usize) -> Result<View> {
        let m = &self.slots[slot];
        let cuts = match kind {
            Kind::F => &m.forward_cuts,
            _ => &m.backward_cuts,
        };
        cuts.get(cut)
            .map(|c| c.1.clone())
            .ok_or_else(|| Error::Config(format!("pass {kind:?} has no cut {cut}")))
    }

    /// The bucket's flat range and its d + 1 chunk bounds relative to its start.
    pub fn bucket_geometry(&self, bucket: usize) -> (Range<usize>, Vec<usize>) {
        let unit = &self.grid.units[self.unit_of[bucket]];
        let a = unit.range.start;
        (
            unit.range.clone(),
            unit.bounds.iter().map(|b| b - a).collect(),
        )
    }

    /// This data-parallel rank's own chunk of bucket `bucket` (absolute flat range).
    pub fn own_part(&self, bucket: usize, rank: usize) -> Range<usize> {
        self.grid.chunk(self.unit_of[bucket], rank)
    }
}
