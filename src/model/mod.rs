//! The GPT model (llm.c / nanoGPT architecture) as a sequence of blocks, each with explicit
//! inputs, outputs and a forward/backward pair:
//!
//! ```text
//! tokens ─▶ [Embedding] ─x0─▶ [Layer 0] ─x1─▶ … ─▶ [Layer L−1] ─xL─▶ [Head: lnf, matmul, CE] ─▶ loss
//!                 ◀──────── dx (one residual-gradient buffer, updated in place) ◀───────── dlogits
//! Layer: x ─▶ ln1 ─▶ qkv ─▶ attention ─▶ attproj ─(+x)─▶ x2 ─▶ ln2 ─▶ fc ─▶ gelu ─▶ fcproj ─(+x2)─▶ x'
//! ```
//!
//! A pipeline stage owns any contiguous range of blocks (checked by [`gpu_model::check_contiguous`]); its parameters are
//! only those blocks' tensors. The head is **not** tied to the token embedding: tying would make
//! the first and last pipeline stages share a tensor and need an extra gradient all-reduce
//! between them every step; untied, every stage owns its parameters outright (cost: V·C more
//! parameters).
//!
//! Initialisation is per tensor, seeded by (seed, tensor name), so any partition of the blocks
//! into stages starts from exactly the same weights as one device.

pub mod fit;
pub mod gpu_model;
pub use crate::precision;
pub mod recompute;

pub use crate::precision::Precision;
pub use recompute::Recompute;

use crate::error::{Error, Result};
use crate::params::{Layout, Spec};
use crate::rng::Rng;

/// GPT dimensions. `ctx` is the maximum sequence length (rows of the position embedding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GptConfig {
    pub vocab: usize,
    pub ctx: usize,
    pub channels: usize,
    pub heads: usize,
    pub layers: usize,
}

impl Default for GptConfig {
    fn default() -> Self {
        GptConfig {
            vocab: 256,
            ctx: 64,
            channels: 128,
            heads: 4,
            layers: 4,
        }
    }
}

impl GptConfig {
    /// Checks the dimensions; the error names the violated constraint.
    pub fn validate(&self) -> Result<()> {
        let c = self;
        if c.vocab == 0 || c.ctx == 0 || c.channels == 0 || c.heads == 0 || c.layers == 0 {
            return Err(Error::Config(format!(
                "every GPT dimension must be positive: {c:?}"
            )));
        }
        if !c.channels.is_multiple_of(c.heads) {
            return Err(Error::Config(format!(
                "heads ({}) must divide channels ({}): each head takes channels/heads dimensions",
                c.heads, c.channels
            )));
        }
        Ok(())
    }

    /// Checks that `t` tensor-parallel ranks can split the heads and the MLP width evenly.
    pub fn check_tp(&self, t: usize) -> Result<()> {
        self.validate()?;
        if t == 0 {
            return Err(Error::Config(
                "tensor parallelism needs at least one rank (tp = 0)".into(),
            ));
        }
        if !self.heads.is_multiple_of(t) {
            return Err(Error::Config(format!(
                "tensor-parallel degree {t} must divide the heads ({}): each rank takes whole heads",
                self.heads
            )));
        }
        if !(4 * self.channels).is_multiple_of(t) {
            return Err(Error::Config(format!(
                "tensor-parallel degree {t} must divide the MLP width 4C ({})",
                4 * self.channels
            )));
        }
        Ok(())
    }

    /// All blocks in order: embedding, layers, head.
    pub fn blocks(&self) -> Vec<Block> {
        let mut v = vec![Block::Embedding];
        v.extend((0..self.layers).map(Block::Layer));
        v.push(Block::Head);
        v
    }

    /// Parameter specs of `blocks`, in block order.
    pub fn specs(&self, blocks: &[Block]) -> Vec<Spec> {
        self.specs_tp(blocks, 1)
    }

    /// Parameter specs of `blocks` as one of `t` tensor-parallel ranks holds them: the same
    /// names, with the split matrices' local shapes (see [`crate::parallel::tensor`]).
    pub fn specs_tp(&self, blocks: &[Block], t: usize) -> Vec<Spec> {
        blocks.iter().flat_map(|b| b.specs(self, t)).collect()
    }

    /// The flat layout holding `blocks`' parameters.
    pub fn layout(&self, blocks: &[Block]) -> Layout {
        Layout::new(&self.specs(blocks))
    }

    /// Each of `blocks`' range of `stored` (the flat storage layout of `blocks` on one of `t`
    /// tensor-parallel ranks): from its first tensor to the next block's first (the last to
    /// the end), so the ranges tile the buffer. A ZeRO-3 gather slot holds one such range.
    pub fn block_spans(
        &self,
        blocks: &[Block],
        t: usize,
        stored: &Layout,
    ) -> Result<Vec<std::ops::Range<usize>>> {
        let mut starts = Vec::with_capacity(blocks.len());
        for b in blocks {
            let own = self.specs_tp(&[*b], t);
            let first = own
                .first()
                .ok_or_else(|| Error::Config(format!("block {b:?} has no parameters")))?;
            starts.push(stored.get(&first.name)?.offset);
        }
        if starts.first() != Some(&0) || starts.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::Config(
                "blocks do not tile the flat buffer in order".into(),
            ));
        }
        let ends = starts.iter().skip(1).copied().chain([stored.total]);
        Ok(starts.iter().zip(ends).map(|(&a, e)| a..e).collect())
    }

    /// The flat layout of one of `t` tensor-parallel ranks holding `blocks`.
    pub fn layout_tp(&self, blocks: &[Block], t: usize) -> Layout {
        Layout::new(&self.specs_tp(blocks, t))
    }

    /// Every tensor name of the whole model in block order: the canonical order in which
    /// per-tensor reductions are combined, whatever the layout.
    pub fn canonical_names(&self) -> Vec<String> {
        self.specs(&self.blocks())
            .into_iter()
            .map(|s| s.name)
            .collect()
    }

    /// Parameter count of the whole model.
    pub fn param_count(&self) -> usize {
        self.specs(&self.blocks())
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum()
    }

    /// GPT-2 initialisation of `layout`'s tensors into a host flat vector: matrices N(0, 0.02),
    /// residual projections N(0, 0.02/√(2L)), layernorm gains 1, biases 0.
    pub fn init(&self, layout: &Layout, seed: u64) -> Vec<f32> {
        let mut flat = vec![0.0f32; layout.total];
        for t in &layout.tensors {
            let dst = &mut flat[t.offset..t.offset + t.len];
            let short = t.name.rsplit('.').next().unwrap_or(&t.name);
            if short.ends_with('b') && !t.decay {
                continue; // biases: zero
            }
            if short.starts_with("ln") && short.ends_with('w') {
                dst.fill(1.0);
                continue;
            }
            let std = if short == "attprojw" || short == "fcprojw" {
                0.02 / ((2 * self.layers) as f32).sqrt()
            } else {
                0.02
            };
            let mut rng = Rng::new(seed ^ name_hash(&t.name));
            dst.iter_mut().for_each(|x| *x = rng.normal() * std);
        }
        flat
    }
}

/// FNV-1a of a tensor name: the per-tensor seed offset.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// One unit of the model a stage can own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Block {
    Embedding,
    Layer(usize),
    Head,
}

impl Block {
    /// The block as placements and reports print it: "emb", "h3", "head".
    pub fn short_name(&self) -> String {
        match self {
            Block::Embedding => "emb".to_string(),
            Block::Layer(l) => format!("h{l}"),
            Block::Head => "head".to_string(),
        }
    }

    /// Specs of this block on one of `t` tensor-parallel ranks (t = 1: the whole block).
    /// Column-parallel qkv and fc keep 1/t of their output rows, row-parallel attproj and
    /// fcproj 1/t of their input columns; everything else is replicated.
    fn specs(&self, cfg: &GptConfig, t: usize) -> Vec<Spec> {
        let c = cfg.channels;
        let (ct, ft) = (c / t, 4 * c / t);
        let s = |name: String, shape: &[usize], decay: bool| Spec {
            name,
            shape: shape.to_vec(),
            decay,
        };
        match *self {
            Block::Embedding => vec![
                s("wte".into(), &[cfg.vocab, c], true),
                s("wpe".into(), &[cfg.ctx, c], true),
            ],
            Block::Layer(l) => {
                let n = |x: &str| format!("h{l}.{x}");
                // in the reverse of the order backward finishes their gradients, so the
                // gradients final so far are always one contiguous range (data-parallel buckets)
                vec![
                    s(n("ln1w"), &[c], false),
                    s(n("ln1b"), &[c], false),
                    s(n("qkvw"), &[3 * ct, c], true),
                    s(n("qkvb"), &[3 * ct], false),
                    s(n("attprojw"), &[c, ct], true),
                    s(n("attprojb"), &[c], false),
                    s(n("ln2w"), &[c], false),
                    s(n("ln2b"), &[c], false),
                    s(n("fcw"), &[ft, c], true),
                    s(n("fcb"), &[ft], false),
                    s(n("fcprojw"), &[c, ft], true),
                    s(n("fcprojb"), &[c], false),
                ]
            }
            Block::Head => vec![
                s("lnfw".into(), &[c], false),
                s("lnfb".into(), &[c], false),
                s("headw".into(), &[cfg.vocab, c], true),
            ],
        }
    }
}

/// Which of `t` tensor-parallel ranks a model replica is (t = 1: no tensor parallelism).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TpRank {
    pub t: usize,
    pub r: usize,
}

impl TpRank {
    /// The whole model on one device.
    pub const SINGLE: TpRank = TpRank { t: 1, r: 0 };
}

/// Shape of one microbatch: `b` sequences of `t` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Micro {
    pub b: usize,
    pub t: usize,
}

impl Micro {
    /// A global batch of `global_batch` sequences of `t` tokens split into `m` microbatches.
    pub fn of(global_batch: usize, m: usize, t: usize) -> Result<Micro> {
        if m == 0 || !global_batch.is_multiple_of(m) {
            return Err(Error::Config(format!(
                "{m} microbatches do not divide the global batch of {global_batch} sequences"
            )));
        }
        Ok(Micro {
            b: global_batch / m,
            t,
        })
    }

    pub fn tokens(&self) -> usize {
        self.b * self.t
    }
    pub fn validate(&self, cfg: &GptConfig) -> Result<()> {
        if self.b == 0 || self.t == 0 {
            return Err(Error::Config(
                "microbatch size and sequence length must be positive".into(),
            ));
        }
        if self.t > cfg.ctx {
            return Err(Error::Config(format!(
                "sequence length {} exceeds the model context {}",
                self.t, cfg.ctx
            )));
        }
        Ok(())
    }
}
