//! The model on one device: parameters for a contiguous range of blocks, activation buffers for
//! one microbatch shape, and the forward and backward passes pre-built as `Vec<Op>` (built once,
//! replayed every microbatch).
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

use std::ops::Range;

use super::{fit, Block, GptConfig, Micro, TpRank};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{
    attention as ka, elementwise as ke, encoder as kenc, loss as kl, matmul as km, norm as kn, Op,
};
use crate::params::Buffers;

/// Activations a transformer layer saves for its backward pass. Shapes for n = B·T rows.
struct LayerActs {
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
    saved: Option<Saved>,
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
/// one set serves every layer in turn).
struct Scratch {
    dln: View,       // [n, C]
    dqkv: View,      // [n, 3C]
    datty: View,     // [n, C]
    datt: View,      // [B, NH, T, T]
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
    head: Option<HeadActs>,
    scratch: Scratch,
    pub forward: Vec<Op>,
    pub backward: Vec<Op>,
    /// Which ops of `forward` / `backward` belong to which block (for per-block timing).
    pub forward_blocks: BlockRanges,
    pub backward_blocks: BlockRanges,
    /// Zero-bubble split: `backward` computes input gradients only and `weight` (W) the
    /// parameter gradients of the linear layers. Empty when not split.
    pub weight: Vec<Op>,
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

/// What `build_backward` makes.
struct Backward {
    ops: Vec<Op>,
    cuts: Cuts,
    ranges: BlockRanges,
    weight: Vec<Op>,
    ready: Vec<(usize, Vec<String>)>,
}

/// Which ops of a pass belong to which block.
pub type BlockRanges = Vec<(Block, Range<usize>)>;

/// Tensor-parallel cut points of a pass: (op index, view all-reduced there).
pub type Cuts = Vec<(usize, View)>;

/// One linear layer's backward: views and dims (`c` in, `oc` out); `keep` is where a split
/// backward saves `dout` for W when `dout` is about to be overwritten.
struct Linear<'a> {
    dinp: &'a View,
    dw: View,
    db: Option<View>,
    dout: &'a View,
    keep: Option<&'a View>,
    inp: &'a View,
    w: View,
    c: usize,
    oc: usize,
}

/// Output gradients a split backward keeps per layer for W: [n,C], [n,4C], [n,C], [n,3C].
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
        GpuModel::with_buffers(gpu, cfg, blocks, micro, dloss, buffers, false)
    }

    /// Like [`GpuModel::new`] but on existing parameter buffers: several activation slots of
    /// one pipeline stage share one set of parameters and gradients this way.
    pub fn with_buffers(
        gpu: &Gpu,
        cfg: GptConfig,
        blocks: &[Block],
        micro: Micro,
        dloss: f32,
        buffers: Buffers,
        split: bool,
    ) -> Result<GpuModel> {
        GpuModel::with_buffers_tp(
            gpu,
            cfg,
            blocks,
            micro,
            dloss,
            buffers,
            split,
            TpRank::SINGLE,
        )
    }

    /// Like [`GpuModel::with_buffers`] for tensor-parallel rank `tp`: `buffers` must be laid
    /// out by `cfg.layout_tp(blocks, tp.t)`.
    #[allow(clippy::too_many_arguments)]
    pub fn with_buffers_tp(
        gpu: &Gpu,
        cfg: GptConfig,
        blocks: &[Block],
        micro: Micro,
        dloss: f32,
        buffers: Buffers,
        split: bool,
        tp: TpRank,
    ) -> Result<GpuModel> {
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
        if buffers.layout.tensors != cfg.layout_tp(blocks, tp.t).tensors {
            return Err(Error::Config(
                "parameter buffers do not match the block range".into(),
            ));
        }
        let (n, c, v) = (micro.tokens(), cfg.channels, cfg.vocab);
        // rank-local widths: attention channels, heads and MLP units
        let (ct, ft) = (c / tp.t, 4 * c / tp.t);
        let att_len = micro.b * (cfg.heads / tp.t) * micro.t * micro.t;
        let buf = |name: &str, len: usize| gpu.buffer(name, len);
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
            .map(|k| buf(&format!("resid{k}"), n * c))
            .collect();
        let layers = layer_ids
            .iter()
            .map(|&l| {
                (
                    l,
                    LayerActs {
                        ln1: buf("ln1", n * c),
                        ln1_mean: buf("ln1.mean", n),
                        ln1_rstd: buf("ln1.rstd", n),
                        qkv: buf("qkv", n * 3 * ct),
                        atty: buf("atty", n * ct),
                        att: buf("att", att_len),
                        attproj: buf("attproj", n * c),
                        x2: buf("x2", n * c),
                        ln2: buf("ln2", n * c),
                        ln2_mean: buf("ln2.mean", n),
                        ln2_rstd: buf("ln2.rstd", n),
                        fch: buf("fch", n * ft),
                        fch_gelu: buf("fch_gelu", n * ft),
                        fcproj: buf("fcproj", n * c),
                        saved: split.then(|| Saved {
                            fcproj: buf("keep.dfcproj", n * c),
                            fch: buf("keep.dfch", n * ft),
                            attproj: buf("keep.dattproj", n * c),
                            qkv: buf("keep.dqkv", n * 3 * ct),
                        }),
                    },
                )
            })
            .collect();
        let head = blocks.contains(&Block::Head).then(|| HeadActs {
            lnf: buf("lnf", n * c),
            lnf_mean: buf("lnf.mean", n),
            lnf_rstd: buf("lnf.rstd", n),
            logits: buf("logits", n * v),
            dlogits: buf("dlogits", n * v),
            losses: buf("losses", n),
        });
        let has_layers = !layer_ids.is_empty();
        let scratch = Scratch {
            dln: buf("dln", n * c),
            dqkv: buf("dqkv", if has_layers { n * 3 * ct } else { 1 }),
            datty: buf("datty", if has_layers { n * ct } else { 1 }),
            datt: buf("datt", if has_layers { att_len } else { 1 }),
            dfch: buf("dfch", if has_layers { n * ft } else { 1 }),
            dfch_gelu: buf("dfch_gelu", if has_layers { n * ft } else { 1 }),
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
            dresid: buf("dresid", n * c),
            layers,
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
        (m.forward, m.forward_blocks, m.forward_cuts) = m.build_forward(dloss)?;
        let bw = m.build_backward()?;
        (m.backward, m.backward_blocks, m.weight, m.grad_ready) =
            (bw.ops, bw.ranges, bw.weight, bw.ready);
        m.backward_cuts = bw.cuts;
        Ok(m)
    }

    /// Uploads a host copy of the flat parameters.
    pub fn set_params(&self, flat: &[f32]) -> Result<()> {
        self.gpu.upload(&self.buffers.params, flat)
    }

    /// Reads the flat parameters back.
    pub fn params(&self) -> Result<Vec<f32>> {
        self.gpu.download(&self.buffers.params)
    }

    /// Per-token losses of the last forward pass (head ranges only).
    pub fn losses(&self) -> Result<Vec<f32>> {
        let h = self
            .head
            .as_ref()
            .ok_or_else(|| Error::Config("this block range has no head".into()))?;
        self.gpu.download(&h.losses)
    }

    /// Logits [B·T, V] of the last forward pass (head ranges only).
    pub fn logits(&self) -> Result<Vec<f32>> {
        let h = self
            .head
            .as_ref()
            .ok_or_else(|| Error::Config("this block range has no head".into()))?;
        self.gpu.download(&h.logits)
    }

    /// The range's output activations (what a pipeline stage sends forward).
    pub fn output(&self) -> &View {
        self.resid.last().expect("resid is never empty")
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

    fn build_forward(&self, dloss: f32) -> Result<(Vec<Op>, BlockRanges, Cuts)> {
        let g = &self.gpu;
        let (b, t) = (self.micro.b, self.micro.t);
        let (n, c, v) = (b * t, self.cfg.channels, self.cfg.vocab);
        let (ct, ht, ft) = self.local_dims();
        let tp = self.tp.t > 1;
        let p = |name: &str| self.buffers.p(name);
        let mut ops = Vec::new();
        let mut ranges = Vec::new();
        let mut cuts = Vec::new();
        if self.blocks[0] == Block::Embedding {
            ops.extend(kenc::encoder_forward(
                g,
                &self.resid[0],
                &self.tokens,
                &p("wte")?,
                &p("wpe")?,
                b,
                t,
                c,
            )?);
            ranges.push((Block::Embedding, 0..ops.len()));
        }
        for (k, (l, a)) in self.layers.iter().enumerate() {
            let start = ops.len();
            let w = |x: &str| p(&format!("h{l}.{x}"));
            let (x, out) = (&self.resid[k], &self.resid[k + 1]);
            ops.extend(kn::layernorm_forward(
                g,
                &a.ln1,
                &a.ln1_mean,
                &a.ln1_rstd,
                x,
                &w("ln1w")?,
                &w("ln1b")?,
                n,
                c,
            )?);
            ops.extend(km::matmul_forward(
                g,
                &a.qkv,
                &a.ln1,
                &w("qkvw")?,
                Some(&w("qkvb")?),
                n,
                c,
                3 * ct,
            )?);
            ops.extend(ka::attention_forward(
                g, &a.atty, &a.att, &a.qkv, b, t, ct, ht,
            )?);
            ops.extend(km::matmul_forward(
                g,
                &a.attproj,
                &a.atty,
                &w("attprojw")?,
                self.row_bias(&format!("h{l}.attprojb"))?.as_ref(),
                n,
                ct,
                c,
            )?);
            if tp {
                cuts.push((ops.len(), a.attproj.clone()));
            }
            ops.push(ke::residual_forward(g, &a.x2, x, &a.attproj, n * c)?);
            ops.extend(kn::layernorm_forward(
                g,
                &a.ln2,
                &a.ln2_mean,
                &a.ln2_rstd,
                &a.x2,
                &w("ln2w")?,
                &w("ln2b")?,
                n,
                c,
            )?);
            ops.extend(km::matmul_forward(
                g,
                &a.fch,
                &a.ln2,
                &w("fcw")?,
                Some(&w("fcb")?),
                n,
                c,
                ft,
            )?);
            ops.push(ke::gelu_forward(g, &a.fch_gelu, &a.fch, n * ft)?);
            ops.extend(km::matmul_forward(
                g,
                &a.fcproj,
                &a.fch_gelu,
                &w("fcprojw")?,
                self.row_bias(&format!("h{l}.fcprojb"))?.as_ref(),
                n,
                ft,
                c,
            )?);
            if tp {
                cuts.push((ops.len(), a.fcproj.clone()));
            }
            ops.push(ke::residual_forward(g, out, &a.x2, &a.fcproj, n * c)?);
            ranges.push((Block::Layer(*l), start..ops.len()));
        }
        if let Some(h) = &self.head {
            let start = ops.len();
            let x = self.output();
            ops.extend(kn::layernorm_forward(
                g,
                &h.lnf,
                &h.lnf_mean,
                &h.lnf_rstd,
                x,
                &p("lnfw")?,
                &p("lnfb")?,
                n,
                c,
            )?);
            ops.extend(km::matmul_forward(
                g,
                &h.logits,
                &h.lnf,
                &p("headw")?,
                None,
                n,
                c,
                v,
            )?);
            ops.extend(kl::crossentropy_forward_backward(
                g,
                &h.losses,
                &h.dlogits,
                &h.logits,
                &self.targets,
                n,
                v,
                dloss,
            )?);
            ranges.push((Block::Head, start..ops.len()));
        }
        Ok((ops, ranges, cuts))
    }

    /// The backward pass, and (when `split`) the deferred weight-gradient ops W.
    /// Unsplit, each linear's `matmul_backward` computes dinp and dweight together. Split
    /// (zero-bubble), B computes only input gradients and keeps each linear's output gradient
    /// in the slot (`Saved`) so W can form dweight/dbias later from the same bits.
    fn build_backward(&self) -> Result<Backward> {
        let g = &self.gpu;
        let (b, t) = (self.micro.b, self.micro.t);
        let (n, c, v) = (b * t, self.cfg.channels, self.cfg.vocab);
        let (ct, ht, ft) = self.local_dims();
        let tp = self.tp.t > 1;
        let (p, d) = (|x: &str| self.buffers.p(x), |x: &str| self.buffers.g(x));
        let s = &self.scratch;
        let dx = &self.dresid;
        let (mut ops, mut wops, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
        let mut ready = Vec::new();
        let mut cuts = Vec::new();
        // one linear layer's backward: dinp = dout·W now; dW, db now or in W (from `keep`)
        let mut linear = |ops: &mut Vec<Op>, lin: Linear| -> Result<()> {
            match (self.split, lin.keep) {
                (false, _) => ops.extend(km::matmul_backward(
                    g,
                    lin.dinp,
                    &lin.dw,
                    lin.db.as_ref(),
                    lin.dout,
                    lin.inp,
                    &lin.w,
                    n,
                    lin.c,
                    lin.oc,
                )?),
                (true, keep) => {
                    let dout_w = match keep {
                        Some(k) => {
                            ops.push(ke::copy(g, k, lin.dout)?);
                            k
                        }
                        None => lin.dout,
                    };
                    ops.extend(km::matmul_backward_input(
                        g, lin.dinp, lin.dout, &lin.w, n, lin.c, lin.oc,
                    )?);
                    wops.extend(km::matmul_backward_weight(
                        g,
                        &lin.dw,
                        lin.db.as_ref(),
                        dout_w,
                        lin.inp,
                        n,
                        lin.c,
                        lin.oc,
                    )?);
                }
            }
            Ok(())
        };
        if let Some(h) = &self.head {
            ops.push(ke::fill(g, dx, 0.0)?);
            let (dw, w) = (d("headw")?, p("headw")?);
            linear(
                &mut ops,
                Linear {
                    dinp: &s.dln,
                    dw,
                    db: None,
                    dout: &h.dlogits,
                    keep: None,
                    inp: &h.lnf,
                    w,
                    c,
                    oc: v,
                },
            )?;
            ready.push((ops.len(), vec!["headw".to_string()]));
            let (lw, lb, lwp) = (d("lnfw")?, d("lnfb")?, p("lnfw")?);
            let x = self.output();
            ops.extend(kn::layernorm_backward(
                g,
                dx,
                &lw,
                &lb,
                &s.dln,
                x,
                &lwp,
                &h.lnf_mean,
                &h.lnf_rstd,
                n,
                c,
            )?);
            ready.push((ops.len(), vec!["lnfw".to_string(), "lnfb".to_string()]));
            ranges.push((Block::Head, 0..ops.len()));
        }
        for (k, (l, a)) in self.layers.iter().enumerate().rev() {
            let start = ops.len();
            let w = |x: &str| p(&format!("h{l}.{x}"));
            let dw = |x: &str| d(&format!("h{l}.{x}"));
            let names = |xs: &[&str]| xs.iter().map(|x| format!("h{l}.{x}")).collect::<Vec<_>>();
            let x = &self.resid[k];
            let sv = a.saved.as_ref();
            // split: activation gradients W needs later live in the slot, not in shared scratch
            let dfch = sv.map_or(&s.dfch, |k| &k.fch);
            let dqkv = sv.map_or(&s.dqkv, |k| &k.qkv);
            // dx holds ∂L/∂out = ∂L/∂fcproj = ∂L/∂x2 (through the residual)
            linear(
                &mut ops,
                Linear {
                    dinp: &s.dfch_gelu,
                    dw: dw("fcprojw")?,
                    db: Some(dw("fcprojb")?),
                    dout: dx,
                    keep: sv.map(|k| &k.fcproj),
                    inp: &a.fch_gelu,
                    w: w("fcprojw")?,
                    c: ft,
                    oc: c,
                },
            )?;
            ready.push((ops.len(), names(&["fcprojw", "fcprojb"])));
            ops.push(ke::gelu_backward(g, dfch, &a.fch, &s.dfch_gelu, n * ft)?);
            linear(
                &mut ops,
                Linear {
                    dinp: &s.dln,
                    dw: dw("fcw")?,
                    db: Some(dw("fcb")?),
                    dout: dfch,
                    keep: None,
                    inp: &a.ln2,
                    w: w("fcw")?,
                    c,
                    oc: ft,
                },
            )?;
            ready.push((ops.len(), names(&["fcw", "fcb"])));
            if tp {
                cuts.push((ops.len(), s.dln.clone()));
            }
            let (l2w, l2b, l2p) = (dw("ln2w")?, dw("ln2b")?, w("ln2w")?);
            ops.extend(kn::layernorm_backward(
                g,
                dx,
                &l2w,
                &l2b,
                &s.dln,
                &a.x2,
                &l2p,
                &a.ln2_mean,
                &a.ln2_rstd,
                n,
                c,
            )?);
            ready.push((ops.len(), names(&["ln2w", "ln2b"])));
            // dx now holds ∂L/∂x2 = ∂L/∂attproj
            linear(
                &mut ops,
                Linear {
                    dinp: &s.datty,
                    dw: dw("attprojw")?,
                    db: Some(dw("attprojb")?),
                    dout: dx,
                    keep: sv.map(|k| &k.attproj),
                    inp: &a.atty,
                    w: w("attprojw")?,
                    c: ct,
                    oc: c,
                },
            )?;
            ready.push((ops.len(), names(&["attprojw", "attprojb"])));
            ops.extend(ka::attention_backward(
                g, dqkv, &s.datt, &s.datty, &a.qkv, &a.att, b, t, ct, ht,
            )?);
            linear(
                &mut ops,
                Linear {
                    dinp: &s.dln,
                    dw: dw("qkvw")?,
                    db: Some(dw("qkvb")?),
                    dout: dqkv,
                    keep: None,
                    inp: &a.ln1,
                    w: w("qkvw")?,
                    c,
                    oc: 3 * ct,
                },
            )?;
            ready.push((ops.len(), names(&["qkvw", "qkvb"])));
            if tp {
                cuts.push((ops.len(), s.dln.clone()));
            }
            let (l1w, l1b, l1p) = (dw("ln1w")?, dw("ln1b")?, w("ln1w")?);
            ops.extend(kn::layernorm_backward(
                g,
                dx,
                &l1w,
                &l1b,
                &s.dln,
                x,
                &l1p,
                &a.ln1_mean,
                &a.ln1_rstd,
                n,
                c,
            )?);
            ready.push((ops.len(), names(&["ln1w", "ln1b"])));
            ranges.push((Block::Layer(*l), start..ops.len()));
        }
        if self.blocks[0] == Block::Embedding {
            let start = ops.len();
            ops.extend(kenc::encoder_backward(
                g,
                &d("wte")?,
                &d("wpe")?,
                dx,
                &self.tokens,
                b,
                t,
                c,
                v,
            )?);
            ready.push((ops.len(), vec!["wte".to_string(), "wpe".to_string()]));
            ranges.push((Block::Embedding, start..ops.len()));
        }
        Ok(Backward {
            ops,
            cuts,
            ranges,
            weight: wops,
            ready,
        })
    }
}

/// Blocks must be a non-empty contiguous run of `cfg.blocks()`.
pub fn check_contiguous(cfg: &GptConfig, blocks: &[Block]) -> Result<()> {
    let all = cfg.blocks();
    let start = blocks.first().and_then(|b| all.iter().position(|x| x == b));
    match start {
        Some(s) if all.get(s..s + blocks.len()) == Some(blocks) => Ok(()),
        _ => Err(Error::Config(format!(
            "blocks {blocks:?} are not a contiguous range of the model"
        ))),
    }
}
