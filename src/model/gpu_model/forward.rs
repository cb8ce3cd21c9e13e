//! The forward pass as ops: embedding (if the range starts with it), each layer, the head and
//! its loss (if the range ends with it), with the tensor-parallel cuts after each row-parallel
//! matmul.

use super::{BlockRanges, Cuts, GpuModel, LayerOps};
use crate::error::Result;
use crate::kernels::{loss as kl, Op};
use crate::model::Block;

/// What `build_forward` makes.
pub(super) struct Forward {
    pub(super) ops: Vec<Op>,
    pub(super) ranges: BlockRanges,
    pub(super) cuts: Cuts,
    /// Per layer: the op ranges a recomputing backward replays.
    pub(super) layers: Vec<LayerOps>,
}

impl GpuModel {
    /// The forward pass, its ops per block, its tensor-parallel cuts, and what of each layer
    /// a recomputing backward replays.
    pub(super) fn build_forward(&self, dloss: f32) -> Result<Forward> {
        let g = &self.gpu;
        let kern = self.k();
        let (b, t) = (self.micro.b, self.micro.t);
        let (n, c, v) = (b * t, self.cfg.channels, self.cfg.vocab);
        let (ct, ht, ft) = self.local_dims();
        let tp = self.tp.t > 1;
        let p = |name: &str| self.buffers.p(name);
        let mut ops = Vec::new();
        let mut ranges = Vec::new();
        let mut cuts = Vec::new();
        let mut layers = Vec::new();
        if self.blocks[0] == Block::Embedding {
            ops.extend(kern.encoder_forward(
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
        for (k, (l, la)) in self.layers.iter().enumerate() {
            let a = &la.acts;
            let start = ops.len();
            let w = |x: &str| p(&format!("h{l}.{x}"));
            let (x, out) = (&self.resid[k], &self.resid[k + 1]);
            ops.extend(kern.layernorm_forward(
                &a.ln1,
                &a.ln1_mean,
                &a.ln1_rstd,
                x,
                &w("ln1w")?,
                &w("ln1b")?,
                n,
                c,
            )?);
            ops.extend(kern.matmul_forward(
                &a.qkv,
                &a.ln1,
                &w("qkvw")?,
                Some(&w("qkvb")?),
                n,
                c,
                3 * ct,
                false,
            )?);
            let att_start = ops.len();
            ops.extend(kern.attention_forward(&a.atty, &a.att, &a.qkv, b, t, ct, ht)?);
            let attention = att_start..ops.len();
            let mut cut = None;
            ops.extend(kern.matmul_forward(
                &a.attproj,
                &a.atty,
                &w("attprojw")?,
                self.row_bias(&format!("h{l}.attprojb"))?.as_ref(),
                n,
                ct,
                c,
                false,
            )?);
            if tp {
                cut = Some(ops.len());
                cuts.push((ops.len(), a.attproj.clone()));
            }
            ops.push(kern.residual_forward(&a.x2, x, &a.attproj, n * c)?);
            ops.extend(kern.layernorm_forward(
                &a.ln2,
                &a.ln2_mean,
                &a.ln2_rstd,
                &a.x2,
                &w("ln2w")?,
                &w("ln2b")?,
                n,
                c,
            )?);
            ops.extend(kern.matmul_forward(
                &a.fch,
                &a.ln2,
                &w("fcw")?,
                Some(&w("fcb")?),
                n,
                c,
                ft,
                false,
            )?);
            ops.push(kern.gelu_forward(&a.fch_gelu, &a.fch, n * ft)?);
            layers.push(LayerOps {
                attention,
                upto_gelu: start..ops.len(),
                cut,
            });
            ops.extend(kern.matmul_forward(
                &a.fcproj,
                &a.fch_gelu,
                &w("fcprojw")?,
                self.row_bias(&format!("h{l}.fcprojb"))?.as_ref(),
                n,
                ft,
                c,
                false,
            )?);
            if tp {
                cuts.push((ops.len(), a.fcproj.clone()));
            }
            ops.push(kern.residual_forward(out, &a.x2, &a.fcproj, n * c)?);
            ranges.push((Block::Layer(*l), start..ops.len()));
        }
        if let Some(h) = &self.head {
            let start = ops.len();
            let x = self.output();
            ops.extend(kern.layernorm_forward(
                &h.lnf,
                &h.lnf_mean,
                &h.lnf_rstd,
                x,
                &p("lnfw")?,
                &p("lnfb")?,
                n,
                c,
            )?);
            ops.extend(kern.matmul_forward(
                &h.logits,
                &h.lnf,
                &p("headw")?,
                None,
                n,
                c,
                v,
                true, // the logits stay f32 for the loss
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
        Ok(Forward {
            ops,
            ranges,
            cuts,
            layers,
        })
    }
}
