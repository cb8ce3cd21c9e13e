//! The forward pass as ops: embedding (if the range starts with it), each layer, the head and
//! its loss (if the range ends with it), with the tensor-parallel cuts after each row-parallel
//! matmul.

use super::{BlockRanges, Cuts, GpuModel, LayerOps};
use crate::error::Result;
use crate::gpu::View;
use crate::kernels::{
    attention as ka, elementwise as ke, encoder as kenc, loss as kl, matmul as km, norm as kn,
    Dispatch,
};
use crate::model::Block;

/// What `build_forward` makes.
pub(super) struct Forward {
    pub(super) ops: Vec<Dispatch>,
    pub(super) ranges: BlockRanges,
    pub(super) cuts: Cuts,
    /// Per layer: the op ranges a recomputing backward replays.
    pub(super) layers: Vec<LayerOps>,
    /// The linear layers' packed inputs, for their weight gradients.
    pub(super) packs: km::Packs,
}

impl GpuModel {
    /// The forward pass, its ops per block, its tensor-parallel cuts, and what of each layer
    /// a recomputing backward replays.
    pub(super) fn build_forward(&self, dloss: f32) -> Result<Forward> {
        let (g, prec) = (&self.gpu, self.precision);
        let (b, t) = (self.micro.b, self.micro.t);
        let (n, c, v) = (b * t, self.cfg.channels, self.cfg.vocab);
        let (ct, ht, ft) = self.local_dims();
        let tp = self.tp.t > 1;
        let p = |name: &str| self.buffers.p(name);
        // layernorm `x` (weight `{x}w`, bias `{x}b`) over rows of c
        let ln = |out: &View, mean: &View, rstd: &View, inp: &View, x: &str| {
            let (w, b) = (p(&format!("{x}w"))?, p(&format!("{x}b"))?);
            kn::layernorm_forward(g, prec, out, mean, rstd, inp, &w, &b, n, c)
        };
        // the linear layers' packed inputs: their weight gradients bind them again
        let mut packs = km::Packs::default();
        // a linear layer of the model's precision: out [n, oc] = inp [n, k] · wᵀ + bias
        let mut mm =
            |out: &View, inp: &View, w: &View, bias: Option<&View>, k: usize, oc: usize| {
                let l = self.linear(false);
                km::matmul_forward_keeping(g, l, out, inp, w, bias, (n, k, oc), &mut packs)
            };
        let mut ops = Vec::new();
        let mut ranges = Vec::new();
        let mut cuts = Vec::new();
        let mut layers = Vec::new();
        if self.blocks[0] == Block::Embedding {
            ops.extend(kenc::encoder_forward(
                g,
                prec,
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
            let name = |x: &str| format!("h{l}.{x}");
            let w = |x: &str| p(&name(x));
            let (x, out) = (&self.resid[k], &self.resid[k + 1]);
            ops.extend(ln(&a.ln1, &a.ln1_mean, &a.ln1_rstd, x, &name("ln1"))?);
            let qkvb = w("qkvb")?;
            ops.extend(mm(&a.qkv, &a.ln1, &w("qkvw")?, Some(&qkvb), c, 3 * ct)?);
            let att_start = ops.len();
            ops.extend(ka::attention_forward(
                g,
                prec,
                &a.atty,
                &a.att,
                &self.scratch.att_rows,
                &a.qkv,
                b,
                t,
                ct,
                ht,
            )?);
            let attention = att_start..ops.len();
            let mut cut = None;
            let bias = self.row_bias(&name("attprojb"))?;
            ops.extend(mm(
                &a.attproj,
                &a.atty,
                &w("attprojw")?,
                bias.as_ref(),
                ct,
                c,
            )?);
            if tp {
                cut = Some(ops.len());
                cuts.push((ops.len(), a.attproj.clone()));
            }
            // x2 = x + attproj, then ln2 of it: one dispatch
            let (w2, b2) = (w("ln2w")?, w("ln2b")?);
            ops.extend(kn::residual_layernorm_forward(
                g,
                prec,
                &a.x2,
                &a.ln2,
                &a.ln2_mean,
                &a.ln2_rstd,
                (x, &a.attproj),
                &w2,
                &b2,
                n,
                c,
            )?);
            let fcb = w("fcb")?;
            ops.extend(mm(&a.fch, &a.ln2, &w("fcw")?, Some(&fcb), c, ft)?);
            ops.extend(ke::gelu_forward(g, prec, &a.fch_gelu, &a.fch, n * ft)?);
            layers.push(LayerOps {
                attention,
                upto_gelu: start..ops.len(),
                cut,
            });
            let bias = self.row_bias(&name("fcprojb"))?;
            ops.extend(mm(
                &a.fcproj,
                &a.fch_gelu,
                &w("fcprojw")?,
                bias.as_ref(),
                ft,
                c,
            )?);
            if tp {
                cuts.push((ops.len(), a.fcproj.clone()));
            }
            ops.extend(ke::residual_forward(g, prec, out, &a.x2, &a.fcproj, n * c)?);
            ranges.push((Block::Layer(*l), start..ops.len()));
        }
        if let Some(h) = &self.head {
            let start = ops.len();
            let x = self.output();
            ops.extend(ln(&h.lnf, &h.lnf_mean, &h.lnf_rstd, x, "lnf")?);
            ops.extend(km::matmul_forward(
                g,
                self.linear(true), // the logits stay f32 for the loss
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
        Ok(Forward {
            ops,
            ranges,
            cuts,
            layers,
            packs,
        })
    }
}
