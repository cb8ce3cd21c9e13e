//! The model on one device: parameters for a contiguous range of blocks, activation buffers for
//! one microbatch shape, and the forward and backward passes pre-built as `Vec<Dispatch>`
//! (built once, replayed every microbatch).
//!
//! Boundaries, so a pipeline stage can run any range:
//! - input: `tokens` [B·T] if the range starts with the embedding, else `resid[0]` [B·T, C]
//!   (the activations received from the previous stage);
//! - output: `losses` [B·T] if the range ends with the head, else `resid[last]` [B·T, C];
//! - backward input: `dresid` [B·T, C] received from the next stage unless the range holds the
//!   head; backward output: `dresid` again (the gradient w.r.t. `resid[0]`).
//!
//! Tensor parallelism: as rank r of t ([`TpRank`]), each layer holds its 1/t slice of qkv, fc
//! (column-parallel: nh/t heads, 4C/t MLP units) and of attproj, fcproj (row-parallel); the
//! embedding, layernorms and head are replicated. The passes are then cut where Megatron's
//! conjugate pair all-reduces across the ranks: `forward_cuts` after each row-parallel
//! matmul (`reduce_from_tp`: the partial products are summed) and `backward_cuts` after each
//! column-parallel matmul's input gradient (`copy_to_tp`'s backward). The caller runs the ops
//! up to a cut on every rank, all-reduces the cut's view, and goes on
//! (the runtime all-reduces at each cut, [`crate::runtime`]). With t = 1 there are no cuts.
//!
//! Files: this one holds the model, its buffers and accessors; `forward` builds the forward
//! pass, `backward` the backward pass and (split) the deferred weight-gradient ops.

use std::ops::Range;

use super::{fit, Block, GptConfig, Micro, Precision, Recompute, TpRank};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{matmul::Linear, Dispatch};
use crate::params::Buffers;

mod backward;
mod checks;
mod forward;
mod options;
mod recompute;
mod state;

pub use checks::check_contiguous;
use checks::check_precision;
pub use options::BuildOptions;

use recompute::Dims;
pub use recompute::Workspace;

/// Activations a transformer layer saves for its backward pass. Shapes for n = B·T rows.
/// Under recomputation some (selective: `att`) or all (full) are views of the chunk's shared
/// [`Workspace`] instead of buffers of their own.
#[derive(Clone)]
struct Acts {
    ln1: View,      // [n, C]
    ln1_mean: View, // [n]
    ln1_rstd: View, // [n]
    qkv: View,      // [n, 3C]
    atty: View,     // [n, C]
    att: View,      // [B, NH, T, T]
    attproj: View,  // [n, C]
    x2: View,       // [n, C]  residual after attention
    ln2: View,      // [n, C]
    ln2_mean: View, // [n]
    ln2_rstd: View, // [n]
    fch: View,      // [n, 4C]
    fch_gelu: View, // [n, 4C]
    fcproj: View,   // [n, C]
}

/// One layer's activations and, for a split backward, the output gradients W reads.
struct LayerActs {
    acts: Acts,
    saved: Option<Saved>,
}

/// Dispatch ranges of one layer's forward that a recomputing backward replays.
#[derive(Clone, Debug)]
struct LayerOps {
    /// `attention_forward` (writes atty and att).
    attention: Range<usize>,
    /// From the layer's first op through gelu: everything the layer's backward reads
    /// (fcproj's product and the last residual add are not replayed).
    upto_gelu: Range<usize>,
    /// Tensor-parallel cut inside `upto_gelu` (the attention output's all-reduce), if any.
    cut: Option<usize>,
}

/// Head activations and the loss.
struct HeadActs {
    lnf: View,      // [n, C]
    lnf_mean: View, // [n]
    lnf_rstd: View, // [n]
    logits: View,   // [n, V]
    dlogits: View,  // [n, V]
    losses: View,   // [n]
}

/// Gradient scratch shared by all layers of the range (activation gradients are assigned, so
/// one set serves every layer in turn). `att_rows` is attention's f32 rows in both precisions: dpre
/// in the backward, and under bf16 the forward's probabilities before they are packed into att.
struct Scratch {
    dln: View,       // [n, C]
    dqkv: View,      // [n, 3C]
    datty: View,     // [n, C]
    att_rows: View,  // [B, NH, T, T] f32
    dfch: View,      // [n, 4C]
    dfch_gelu: View, // [n, 4C]
}

/// A contiguous range of blocks on one device, ready to run microbatches of one shape.
pub struct GpuModel {
    pub gpu: Gpu,
    pub cfg: GptConfig,
    pub blocks: Vec<Block>,
    pub micro: Micro,
    pub buffers: Buffers,
    /// Token ids [B·T] (used when the range starts with the embedding).
    pub tokens: View,
    /// Target ids [B·T] (used when the range ends with the head).
    pub targets: View,
    /// Residual stream: `resid[0]` is the range's input, `resid[k+1]` the output of its k-th layer.
    pub resid: Vec<View>,
    /// Gradient w.r.t. the residual stream, updated in place by the backward pass.
    pub dresid: View,
    layers: Vec<(usize, LayerActs)>,
    /// Per layer (in `layers` order): the forward op ranges a recomputing backward replays.
    layer_ops: Vec<LayerOps>,
    /// What the backward recomputes.
    pub recompute: Recompute,
    /// f32, or bf16 (packed activations, parameters and gradients).
    pub precision: Precision,
    head: Option<HeadActs>,
    scratch: Scratch,
    pub forward: Vec<Dispatch>,
    pub backward: Vec<Dispatch>,
    /// Which ops of `forward` / `backward` belong to which block (for per-block timing).
    pub forward_blocks: BlockRanges,
    pub backward_blocks: BlockRanges,
    /// Zero-bubble split: `backward` computes input gradients only and `weight` (W) the
    /// parameter gradients of the linear layers. Empty when not split.
    pub weight: Vec<Dispatch>,
    pub split: bool,
    /// Tensor-parallel rank of this replica.
    pub tp: TpRank,
    /// (op index, view): after `forward[..i]`, all-reduce `view` over the tensor-parallel
    /// ranks (`reduce_from_tp`). Empty when t = 1.
    pub forward_cuts: Cuts,
    /// Same for `backward` (`copy_to_tp`'s backward). `weight` needs no cuts.
    pub backward_cuts: Cuts,
    /// Unsplit backward: after op index i, these parameter tensors' gradients are final (in
    /// the order backward produces them), so a data-parallel bucket can start its all-reduce.
    pub grad_ready: Vec<(usize, Vec<String>)>,
}

/// Which ops of a pass belong to which block.
pub type BlockRanges = Vec<(Block, Range<usize>)>;

/// Tensor-parallel cut points of a pass: (op index, view all-reduced there).
pub type Cuts = Vec<(usize, View)>;

/// Output gradients a split backward keeps per layer for W: [n,C], [n,4C], [n,C], [n,3C].
#[derive(Clone)]
struct Saved {
    fcproj: View,
    fch: View,
    attproj: View,
    qkv: View,
}

impl GpuModel {
    /// Allocates `blocks` (contiguous, in order) on `gpu` for microbatches of shape `micro`.
    /// `dloss` is the weight of each token's loss in the objective (e.g. 1 / tokens per step).
    pub fn new(
        gpu: &Gpu,
        cfg: GptConfig,
        blocks: &[Block],
        micro: Micro,
        dloss: f32,
    ) -> Result<GpuModel> {
        // before the flat buffers: a size no device holds is refused, not allocated
        fit::check(&cfg, blocks, micro, 1, &gpu.limits)?;
        let buffers = Buffers::new(gpu, &cfg.layout(blocks));
        GpuModel::build(
            gpu,
            cfg,
            blocks,
            micro,
            dloss,
            buffers,
            &BuildOptions::default(),
        )
    }

    /// The general constructor, on existing parameter buffers (several activation slots of one
    /// pipeline stage share one set of parameters and gradients this way), laid out by
    /// `cfg.layout_tp(blocks, opts.tp.t)`: the zero-bubble split, the tensor-parallel rank,
    /// precision and recomputation (`opts.workspace` from [`Workspace::new`] for the same
    /// config, shape and tensor-parallel degree) as `opts` says.
    pub fn build(
        gpu: &Gpu,
        cfg: GptConfig,
        blocks: &[Block],
        micro: Micro,
        dloss: f32,
        buffers: Buffers,
        opts: &BuildOptions,
    ) -> Result<GpuModel> {
        let (split, tp) = (opts.split, opts.tp);
        cfg.check_tp(tp.t)?;
        if tp.r >= tp.t {
            return Err(Error::Config(format!(
                "tensor-parallel rank {} of {} does not exist",
                tp.r, tp.t
            )));
        }
        micro.validate(&cfg)?;
        check_contiguous(&cfg, blocks)?;
        // the one place every model passes before its activations are allocated
        fit::check(&cfg, blocks, micro, tp.t, &gpu.limits)?;
        let want = cfg.layout_tp(blocks, tp.t);
        let placed = match buffers.packed() {
            true => buffers.layout.tensors == want.packed().tensors,
            false => buffers.layout.tensors == want.tensors,
        };
        if !placed {
            return Err(Error::Config(
                "parameter buffers do not match the block range".into(),
            ));
        }
        check_precision(&cfg, tp.t, opts.precision, &buffers)?;
        let ws = opts.workspace.as_ref();
        if let Some(w) = ws {
            w.check(&cfg, micro, tp.t, opts.precision)?;
        }
        let recompute = ws.map_or(Recompute::None, |w| w.mode);
        if recompute == Recompute::Full && split && tp.t > 1 {
            return Err(Error::Config(
                "full recomputation with a zero-bubble split under tensor parallelism is not \
                 supported: W would repeat the attention all-reduce outside B; use \
                 --recompute selective, or a schedule without the split (1f1b)"
                    .into(),
            ));
        }
        let (n, c, v) = (micro.tokens(), cfg.channels, cfg.vocab);
        // rank-local widths: attention channels, heads and MLP units
        let (ct, ft) = (c / tp.t, 4 * c / tp.t);
        let att_len = micro.b * (cfg.heads / tp.t) * micro.t * micro.t;
        let buf = |name: &str, len: usize| gpu.buffer(name, len);
        // words of a bf16 tensor (f32: elements); statistics, logits and losses stay f32
        let prec = opts.precision;
        let w = |len: usize| prec.words(len);
        let layer_ids: Vec<usize> = blocks
            .iter()
            .filter_map(|b| {
                if let Block::Layer(l) = b {
                    Some(*l)
                } else {
                    None
                }
            })
            .collect();
        let resid = (0..=layer_ids.len())
            .map(|k| buf(&format!("resid{k}"), w(n * c)))
            .collect();
        let dims = Dims {
            n,
            c,
            ct,
            ft,
            att_len,
            prec,
        };
        let layers = layer_ids
            .iter()
            .map(|&l| -> Result<(usize, LayerActs)> {
                let acts = match ws {
                    Some(w) if w.mode == Recompute::Full => w.layer()?,
                    Some(w) => Acts::alloc(gpu, &dims, w.att.clone()),
                    None => Acts::alloc(gpu, &dims, None),
                };
                Ok((
                    l,
                    LayerActs {
                        acts,
                        saved: split.then(|| Saved {
                            fcproj: buf("keep.dfcproj", w(n * c)),
                            fch: buf("keep.dfch", w(n * ft)),
                            attproj: buf("keep.dattproj", w(n * c)),
                            qkv: buf("keep.dqkv", w(n * 3 * ct)),
                        }),
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let head = blocks.contains(&Block::Head).then(|| HeadActs {
            lnf: buf("lnf", w(n * c)),
            lnf_mean: buf("lnf.mean", n),
            lnf_rstd: buf("lnf.rstd", n),
            logits: buf("logits", n * v),
            dlogits: buf("dlogits", n * v),
            losses: buf("losses", n),
        });
        let has_layers = !layer_ids.is_empty();
        let scratch = Scratch {
            dln: gpu.scratch("dln", w(n * c)),
            dqkv: gpu.scratch("dqkv", if has_layers { w(n * 3 * ct) } else { 1 }),
            datty: gpu.scratch("datty", if has_layers { w(n * ct) } else { 1 }),
            att_rows: gpu.scratch("att_rows", if has_layers { att_len } else { 1 }),
            dfch: gpu.scratch("dfch", if has_layers { w(n * ft) } else { 1 }),
            dfch_gelu: gpu.scratch("dfch_gelu", if has_layers { w(n * ft) } else { 1 }),
        };
        let mut m = GpuModel {
            gpu: gpu.clone(),
            cfg,
            blocks: blocks.to_vec(),
            micro,
            buffers,
            tokens: buf("tokens", n),
            targets: buf("targets", n),
            resid,
            dresid: gpu.scratch("dresid", w(n * c)),
            layers,
            layer_ops: Vec::new(),
            recompute,
            precision: opts.precision,
            head,
            scratch,
            forward: Vec::new(),
            backward: Vec::new(),
            forward_blocks: Vec::new(),
            backward_blocks: Vec::new(),
            weight: Vec::new(),
            split,
            tp,
            forward_cuts: Vec::new(),
            backward_cuts: Vec::new(),
            grad_ready: Vec::new(),
        };
        let fw = m.build_forward(dloss)?;
        (m.forward, m.forward_blocks, m.forward_cuts, m.layer_ops) =
            (fw.ops, fw.ranges, fw.cuts, fw.layers);
        let bw = m.build_backward(&fw.packs)?;
        (m.backward, m.backward_blocks, m.weight, m.grad_ready) =
            (bw.ops, bw.ranges, bw.weight, bw.ready);
        m.backward_cuts = bw.cuts;
        Ok(m)
    }

    /// A linear layer in this model's precision; `f32_io`: the LM head, whose logits and
    /// dlogits stay f32.
    fn linear(&self, f32_io: bool) -> Linear {
        let l = Linear::new(self.precision);
        if f32_io {
            l.head()
        } else {
            l
        }
    }

    /// Rank-local (attention channels, heads, MLP units): (C, NH, 4C) / t.
    fn local_dims(&self) -> (usize, usize, usize) {
        let (c, t) = (self.cfg.channels, self.tp.t);
        (c / t, self.cfg.heads / t, 4 * c / t)
    }

    /// A row-parallel bias: added by rank 0 only, before the all-reduce sums the partials.
    fn row_bias(&self, name: &str) -> Result<Option<View>> {
        (self.tp.r == 0).then(|| self.buffers.p(name)).transpose()
    }
}
