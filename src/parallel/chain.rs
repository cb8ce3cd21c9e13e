//! The whole model on one device as a chain of single-block models, so each block's parameters
//! and gradients can live in any buffer (a gathered ZeRO-3 slot, a shard-free full buffer):
//!
//! ```text
//! tokens ─▶ [Embedding] ─copy─▶ [Layer 0] ─copy─▶ … ─copy─▶ [Head] ─▶ losses
//!   forward[i]  = block i's forward, then copy its output into block i+1's input (resid[0])
//!   backward[i] = block i's backward, then copy its dresid into block i−1's dresid
//! ```
//!
//! The blocks compute exactly the arithmetic of one whole-model `GpuModel` (pipeline stages
//! rely on the same property), so a chain gives the same bits.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{elementwise as ke, Op};
use crate::model::gpu_model::{BuildOptions, GpuModel, Workspace};
use crate::model::{Block, GptConfig, Micro, Precision, Recompute};
use crate::params::{Buffers, Layout};

/// One block and its flat range in the whole model's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub block: Block,
    pub range: Range<usize>,
}

/// The storage layout of `blocks` in `prec` ([`Precision::storage`]).
fn stored(cfg: &GptConfig, blocks: &[Block], prec: Precision) -> Layout {
    prec.storage(cfg.layout(blocks))
}

/// The blocks of `cfg` with their flat ranges in the storage layout of `prec`; checks that
/// each block's own layout is the slice of the whole layout (so a block-sized buffer can stand
/// in for the range).
pub fn spans(cfg: &GptConfig, prec: Precision) -> Result<Vec<Span>> {
    let full = stored(cfg, &cfg.blocks(), prec);
    let mut at = 0;
    let mut out = Vec::new();
    for b in cfg.blocks() {
        let local = stored(cfg, &[b], prec);
        for t in &local.tensors {
            let g = full.get(&t.name)?;
            if g.offset != at + t.offset {
                return Err(Error::Config(format!(
                    "tensor {} of block {b:?} is not at its block-relative offset",
                    t.name
                )));
            }
        }
        out.push(Span {
            block: b,
            range: at..at + local.total,
        });
        at += local.total;
    }
    if at != full.total {
        return Err(Error::Config("blocks do not tile the flat buffer".into()));
    }
    Ok(out)
}

/// Single-block models of one device, chained.
pub struct Chain {
    pub models: Vec<GpuModel>,
    pub forward: Vec<Vec<Op>>,
    pub backward: Vec<Vec<Op>>,
}

impl Chain {
    /// Block i reads its parameters from `params(i)` and accumulates gradients into `grads(i)`
    /// (views of the block's storage layout: elements, or packed bf16 words). Recomputing
    /// layers share one workspace.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: &Gpu,
        cfg: GptConfig,
        micro: Micro,
        dloss: f32,
        recompute: Recompute,
        prec: Precision,
        spans: &[Span],
        params: impl Fn(usize) -> View,
        grads: impl Fn(usize) -> View,
    ) -> Result<Chain> {
        let opts = BuildOptions {
            workspace: Workspace::new(gpu, &cfg, micro, 1, recompute, prec)?,
            precision: prec,
            ..BuildOptions::default()
        };
        let packed = prec == Precision::Bf16;
        let models = spans
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let layout = stored(&cfg, &[s.block], prec);
                let (p, g) = (params(i), grads(i));
                let len = prec.words(layout.total);
                if p.len != len || g.len != len {
                    return Err(Error::Config(format!(
                        "block {:?}: parameter/gradient views of {}/{} words, storage {len}",
                        s.block, p.len, g.len
                    )));
                }
                let b = Buffers {
                    layout,
                    m: g.slice(0, 0),
                    v: g.slice(0, 0),
                    params: p,
                    grads: g,
                    master: None,
                    packed,
                };
                GpuModel::build(gpu, cfg, &[s.block], micro, dloss, b, &opts)
            })
            .collect::<Result<Vec<_>>>()?;
        let n = models.len();
        let mut forward = Vec::with_capacity(n);
        let mut backward = Vec::with_capacity(n);
        for i in 0..n {
            let mut f = models[i].forward.clone();
            if i + 1 < n {
                f.push(ke::copy(gpu, &models[i + 1].resid[0], models[i].output())?);
            }
            forward.push(f);
            let mut b = models[i].backward.clone();
            if i > 0 {
                b.push(ke::copy(gpu, &models[i - 1].dresid, &models[i].dresid)?);
            }
            backward.push(b);
        }
        Ok(Chain {
            models,
            forward,
            backward,
        })
    }

    /// Token ids of the first block.
    pub fn tokens(&self) -> &View {
        &self.models[0].tokens
    }

    /// Targets of the head.
    pub fn targets(&self) -> &View {
        &self.models[self.models.len() - 1].targets
    }

    /// Per-token losses of the last forward pass.
    pub fn losses(&self) -> Result<Vec<f32>> {
        self.models[self.models.len() - 1].losses()
    }
}
