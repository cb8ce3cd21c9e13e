//! The backward pass as ops, from the head (if the range holds it) back through the layers to
//! the embedding: unsplit, each linear layer's input and weight gradients together; split
//! (zero-bubble), input gradients only, with the weight-gradient ops W deferred to a list of
//! their own. Also where each parameter's gradient is final (for data-parallel buckets) and the
//! tensor-parallel cuts after each column-parallel matmul's input gradient.

use std::ops::Range;

use super::{BlockRanges, Cuts, GpuModel};
use crate::error::Error;
use crate::error::Result;
use crate::gpu::View;
use crate::kernels::{
    attention as ka, elementwise as ke, encoder as kenc, matmul as km, norm as kn, Dispatch,
};
use crate::model::{Block, Recompute};

/// What `build_backward` makes.
pub(super) struct Backward {
    pub(super) ops: Vec<Dispatch>,
    pub(super) cuts: Cuts,
    pub(super) ranges: BlockRanges,
    pub(super) weight: Vec<Dispatch>,
    pub(super) ready: Vec<(usize, Vec<String>)>,
}

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
    /// `dout` is f32 (the head's dlogits) whatever the precision.
    f32_dout: bool,
}

impl<'a> Linear<'a> {
    /// A layer's linear with a bias, `dout` in the model's precision; `(w, dw, db)` its weight
    /// and gradients.
    fn layer(
        dinp: &'a View,
        dout: &'a View,
        keep: Option<&'a View>,
        inp: &'a View,
        (w, dw, db): (View, View, View),
        (c, oc): (usize, usize),
    ) -> Linear<'a> {
        Linear {
            dinp,
            dw,
            db: Some(db),
            dout,
            keep,
            inp,
            w,
            c,
            oc,
            f32_dout: false,
        }
    }
}

impl GpuModel {
    /// The backward pass, and (when `split`) the deferred weight-gradient ops W.
    /// Unsplit, each linear's `matmul_backward` computes dinp and dweight together. Split
    /// (zero-bubble), B computes only input gradients and keeps each linear's output gradient
    /// in the slot (`Saved`) so W can form dweight/dbias later from the same bits.
    pub(super) fn build_backward(&self, packs: &km::Packs) -> Result<Backward> {
        let (g, prec) = (&self.gpu, self.precision);
        let (b, t) = (self.micro.b, self.micro.t);
        let (n, c, v) = (b * t, self.cfg.channels, self.cfg.vocab);
        let (ct, ht, ft) = self.local_dims();
        let tp = self.tp.t > 1;
        let (p, d) = (|x: &str| self.buffers.p(x), |x: &str| self.buffers.g(x));
        let s = &self.scratch;
        let dx = &self.dresid;
        // layernorm `x`'s backward (weight `{x}w`, bias `{x}b`): dx += dinp, dw and db +=
        let ln = |x: &str, inp: &View, mean: &View, rstd: &View| {
            let (xw, xb) = (format!("{x}w"), format!("{x}b"));
            let (dw, db, w) = (d(&xw)?, d(&xb)?, p(&xw)?);
            kn::layernorm_backward(g, prec, dx, &dw, &db, &s.dln, inp, &w, mean, rstd, n, c)
        };
        let (mut ops, mut wops, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
        let mut ready = Vec::new();
        let mut cuts = Vec::new();
        // one linear layer's backward: dinp = dout·W now; dW, db now or in W (from `keep`)
        let linear =
            |ops: &mut Vec<Dispatch>, wops: &mut Vec<Dispatch>, lin: Linear| -> Result<()> {
                let l = self.linear(lin.f32_dout);
                // dW, db from `dout` (the forward's packed input where it kept one)
                let weight = |dout: &View| {
                    let dims = (n, lin.c, lin.oc);
                    let (dw, db) = (&lin.dw, lin.db.as_ref());
                    km::matmul_backward_weight_packed(g, l, dw, db, dout, lin.inp, dims, packs)
                };
                match (self.split, lin.keep) {
                    (false, _) => {
                        ops.extend(km::matmul_backward_input(
                            g, l, lin.dinp, lin.dout, &lin.w, n, lin.c, lin.oc,
                        )?);
                        ops.extend(weight(lin.dout)?);
                    }
                    (true, keep) => {
                        let dout_w = match keep {
                            Some(keep) => {
                                ops.push(ke::copy(g, prec, keep, lin.dout)?);
                                keep
                            }
                            None => lin.dout,
                        };
                        ops.extend(km::matmul_backward_input(
                            g, l, lin.dinp, lin.dout, &lin.w, n, lin.c, lin.oc,
                        )?);
                        wops.extend(weight(dout_w)?);
                    }
                }
                Ok(())
            };
        if let Some(h) = &self.head {
            ops.push(ke::fill(g, prec, dx, 0.0)?);
            let (dw, w) = (d("headw")?, p("headw")?);
            linear(
                &mut ops,
                &mut wops,
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
                    f32_dout: true,
                },
            )?;
            ready.push((ops.len(), vec!["headw".to_string()]));
            ops.extend(ln("lnf", self.output(), &h.lnf_mean, &h.lnf_rstd)?);
            ready.push((ops.len(), vec!["lnfw".to_string(), "lnfb".to_string()]));
            ranges.push((Block::Head, 0..ops.len()));
        }
        for (k, (l, la)) in self.layers.iter().enumerate().rev() {
            let a = &la.acts;
            let lo = &self.layer_ops[k];
            let start = ops.len();
            if self.recompute == Recompute::Full {
                // the layer's forward again, up to gelu, into the shared workspace
                let cut = lo.cut.map(|i| (i, a.attproj.clone()));
                self.recompute(&mut ops, Some(&mut cuts), &lo.upto_gelu, cut.clone())?;
                if self.split {
                    // W runs later, after other passes reused the workspace: again there
                    self.recompute(&mut wops, None, &lo.upto_gelu, cut)?;
                }
            }
            // layer linear `x`: (weight, its gradient, the bias gradient)
            let wdb = |x: &str| -> Result<(View, View, View)> {
                let (xw, xb) = (format!("h{l}.{x}w"), format!("h{l}.{x}b"));
                Ok((p(&xw)?, d(&xw)?, d(&xb)?))
            };
            let names = |xs: &[&str]| xs.iter().map(|x| format!("h{l}.{x}")).collect::<Vec<_>>();
            let x = &self.resid[k];
            let sv = la.saved.as_ref();
            // split: activation gradients W needs later live in the slot, not in shared scratch
            let dfch = sv.map_or(&s.dfch, |k| &k.fch);
            let dqkv = sv.map_or(&s.dqkv, |k| &k.qkv);
            // dx holds ∂L/∂out = ∂L/∂fcproj = ∂L/∂x2 (through the residual)
            let keep = sv.map(|k| &k.fcproj);
            let fcproj =
                Linear::layer(&s.dfch_gelu, dx, keep, &a.fch_gelu, wdb("fcproj")?, (ft, c));
            linear(&mut ops, &mut wops, fcproj)?;
            ready.push((ops.len(), names(&["fcprojw", "fcprojb"])));
            ops.extend(ke::gelu_backward(
                g,
                prec,
                dfch,
                &a.fch,
                &s.dfch_gelu,
                n * ft,
            )?);
            let fc = Linear::layer(&s.dln, dfch, None, &a.ln2, wdb("fc")?, (c, ft));
            linear(&mut ops, &mut wops, fc)?;
            ready.push((ops.len(), names(&["fcw", "fcb"])));
            if tp {
                cuts.push((ops.len(), s.dln.clone()));
            }
            ops.extend(ln(&format!("h{l}.ln2"), &a.x2, &a.ln2_mean, &a.ln2_rstd)?);
            ready.push((ops.len(), names(&["ln2w", "ln2b"])));
            // dx now holds ∂L/∂x2 = ∂L/∂attproj
            let keep = sv.map(|k| &k.attproj);
            let attproj = Linear::layer(&s.datty, dx, keep, &a.atty, wdb("attproj")?, (ct, c));
            linear(&mut ops, &mut wops, attproj)?;
            ready.push((ops.len(), names(&["attprojw", "attprojb"])));
            if self.recompute == Recompute::Selective {
                // attention's probabilities again, from the kept qkv
                self.recompute(&mut ops, None, &lo.attention, None)?;
            }
            ops.extend(ka::attention_backward(
                g,
                prec,
                dqkv,
                &s.att_rows,
                &s.datty,
                &a.qkv,
                &a.att,
                b,
                t,
                ct,
                ht,
            )?);
            let qkv = Linear::layer(&s.dln, dqkv, None, &a.ln1, wdb("qkv")?, (c, 3 * ct));
            linear(&mut ops, &mut wops, qkv)?;
            ready.push((ops.len(), names(&["qkvw", "qkvb"])));
            if tp {
                cuts.push((ops.len(), s.dln.clone()));
            }
            ops.extend(ln(&format!("h{l}.ln1"), x, &a.ln1_mean, &a.ln1_rstd)?);
            ready.push((ops.len(), names(&["ln1w", "ln1b"])));
            ranges.push((Block::Layer(*l), start..ops.len()));
        }
        if self.blocks[0] == Block::Embedding {
            let start = ops.len();
            ops.extend(kenc::encoder_backward(
                g,
                prec,
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

    /// Appends the forward's ops `r` to `ops` (a recomputation); the forward's tensor-parallel
    /// cut `cut` = (op index, view), when inside `r`, becomes a cut of `ops`'s pass.
    fn recompute(
        &self,
        ops: &mut Vec<Dispatch>,
        mut cuts: Option<&mut Cuts>,
        r: &Range<usize>,
        cut: Option<(usize, View)>,
    ) -> Result<()> {
        for i in r.clone() {
            if let Some((at, view)) = &cut {
                if *at == i {
                    let Some(cuts) = cuts.as_deref_mut() else {
                        return Err(Error::Config(
                            "a recomputation with a tensor-parallel all-reduce in a pass \
                             without cuts"
                                .into(),
                        ));
                    };
                    cuts.push((ops.len(), view.clone()));
                }
            }
            ops.push(self.forward[i].clone());
        }
        Ok(())
    }
}
