//! Recomputation's buffers: a layer's activations allocated for one slot, or shared by every
//! layer and slot of a chunk through a [`Workspace`] (see [`crate::model::recompute`]).

use super::Acts;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::model::{GptConfig, Micro, Precision, Recompute};

/// A layer's activation sizes (f32 elements) on one tensor-parallel rank: n = B·T rows, C
/// channels, `ct` = C/t attention channels, `ft` = 4C/t MLP units, `att_len` = B·(NH/t)·T².
pub(super) struct Dims {
    pub n: usize,
    pub c: usize,
    pub ct: usize,
    pub ft: usize,
    pub att_len: usize,
    pub prec: Precision,
}

impl Dims {
    fn of(cfg: &GptConfig, micro: Micro, t: usize, prec: Precision) -> Dims {
        let c = cfg.channels;
        Dims {
            n: micro.tokens(),
            c,
            ct: c / t,
            ft: 4 * c / t,
            att_len: micro.b * (cfg.heads / t) * micro.t * micro.t,
            prec,
        }
    }
}

impl Acts {
    /// One layer's activations as buffers of their own; `att` given: that view instead of a
    /// buffer of its own for the attention probabilities (selective recomputation).
    pub(super) fn alloc(gpu: &Gpu, d: &Dims, att: Option<View>) -> Acts {
        // bf16 tensors in words; the layernorm statistics stay f32
        let buf = |name: &str, len: usize| gpu.buffer(name, d.prec.words(len));
        let f32 = |name: &str, len: usize| gpu.buffer(name, len);
        let (n, c, ct, ft) = (d.n, d.c, d.ct, d.ft);
        Acts {
            ln1: buf("ln1", n * c),
            ln1_mean: f32("ln1.mean", n),
            ln1_rstd: f32("ln1.rstd", n),
            qkv: buf("qkv", n * 3 * ct),
            atty: buf("atty", n * ct),
            att: att.unwrap_or_else(|| buf("att", d.att_len)),
            attproj: buf("attproj", n * c),
            x2: buf("x2", n * c),
            ln2: buf("ln2", n * c),
            ln2_mean: f32("ln2.mean", n),
            ln2_rstd: f32("ln2.rstd", n),
            fch: buf("fch", n * ft),
            fch_gelu: buf("fch_gelu", n * ft),
            fcproj: buf("fcproj", n * c),
        }
    }
}

/// The buffers recomputation writes, shared by every layer and activation slot of one chunk
/// (one device runs one pass at a time, and a recomputed tensor is read only by the backward
/// that recomputed it): one layer's activations (`full`) or one attention-probability tensor
/// (`selective`), for one microbatch shape and tensor-parallel degree.
#[derive(Clone)]
pub struct Workspace {
    pub mode: Recompute,
    acts: Option<Acts>,
    pub(super) att: Option<View>,
    shape: (GptConfig, Micro, usize, Precision),
}

impl Workspace {
    /// The workspace of `mode` for microbatches `micro` of `cfg` at tensor-parallel degree
    /// `t` in precision `prec`; `None` for [`Recompute::None`].
    pub fn new(
        gpu: &Gpu,
        cfg: &GptConfig,
        micro: Micro,
        t: usize,
        mode: Recompute,
        prec: Precision,
    ) -> Result<Option<Workspace>> {
        cfg.check_tp(t)?;
        let d = Dims::of(cfg, micro, t, prec);
        let (acts, att) = match mode {
            Recompute::None => return Ok(None),
            Recompute::Selective => (
                None,
                Some(gpu.buffer("recompute.att", prec.words(d.att_len))),
            ),
            Recompute::Full => (Some(Acts::alloc(gpu, &d, None)), None),
        };
        Ok(Some(Workspace {
            mode,
            acts,
            att,
            shape: (*cfg, micro, t, prec),
        }))
    }

    /// The shared layer activations of a `full` workspace.
    pub(super) fn layer(&self) -> Result<Acts> {
        self.acts
            .clone()
            .ok_or_else(|| Error::Config("this recompute workspace holds no layer".into()))
    }

    /// The workspace was made for this config, shape, degree and precision.
    pub(super) fn check(
        &self,
        cfg: &GptConfig,
        micro: Micro,
        t: usize,
        p: Precision,
    ) -> Result<()> {
        if self.shape != (*cfg, micro, t, p) {
            return Err(Error::Config(format!(
                "recompute workspace made for {:?}, used for {:?}",
                self.shape,
                (cfg, micro, t, p)
            )));
        }
        Ok(())
    }
}
