//! The model as the cost model sees it: a parameter count and a GPT shape, plus the bytes each
//! parameter and activation takes. Plain structs, independent of the trainer's own model code.
//!
//! Parameter count of a GPT (biases and layernorms ignored, token embedding tied to the head):
//!
//! ```text
//! N ≈ 12·L·d²  +  V·d  +  ctx·d
//!     blocks      tokens   positions        per block: 4d² attention (q, k, v, proj) + 8d² MLP (d→4d→d)
//! ```

use super::{at_least_one, positive};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// A GPT-style model: parameter count and the shape that sets activations and TP traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShape {
    /// Total parameters N (may be given explicitly, e.g. 7e9, or computed by [`ModelShape::gpt`]).
    pub params: f64,
    /// Transformer blocks L.
    pub layers: usize,
    /// Hidden size d (= h in Korthikanti et al.).
    pub hidden: usize,
    /// Attention heads a; `hidden % heads == 0`.
    pub heads: usize,
    /// Sequence length s (= context length ctx).
    pub seq_len: usize,
    /// Vocabulary size V.
    pub vocab: usize,
}

impl ModelShape {
    /// The GPT parameter count `12·L·d² + V·d + ctx·d` (see the module doc).
    pub fn gpt_params(layers: usize, hidden: usize, seq_len: usize, vocab: usize) -> f64 {
        let (l, d) = (layers as f64, hidden as f64);
        12.0 * l * d * d + (vocab as f64) * d + (seq_len as f64) * d
    }

    /// A GPT whose parameter count follows from its dims (`12·L·d² + V·d + ctx·d`).
    pub fn gpt(
        layers: usize,
        hidden: usize,
        heads: usize,
        seq_len: usize,
        vocab: usize,
    ) -> Result<Self> {
        let params = Self::gpt_params(layers, hidden, seq_len, vocab);
        Self::with_params(params, layers, hidden, heads, seq_len, vocab)
    }

    /// A model with an explicit parameter count (e.g. "7e9") and the GPT shape used for
    /// activation memory, tensor-parallel traffic and pipeline stages. The blocks own
    /// `N − (V + ctx)·d` parameters, split evenly over the L blocks.
    pub fn with_params(
        params: f64,
        layers: usize,
        hidden: usize,
        heads: usize,
        seq_len: usize,
        vocab: usize,
    ) -> Result<Self> {
        let m = ModelShape {
            params,
            layers,
            hidden,
            heads,
            seq_len,
            vocab,
        };
        m.validate()?;
        Ok(m)
    }

    /// A GPT shape inferred from a parameter count alone, with GPT-3's aspect ratio d ≈ 128·L
    /// (7B: 32 × 4096): `L = cbrt(N / (12·128²))` rounded to a multiple of 4 (when ≥ 4),
    /// `d = sqrt(N / (12·L))` rounded to 128-wide heads, heads rounded to a multiple of 8
    /// (when ≥ 8) so that tensor-parallel degrees 2, 4, 8 divide them. The count N is kept.
    pub fn from_params(params: f64, seq_len: usize, vocab: usize) -> Result<Self> {
        positive(
            "the parameter count",
            params,
            "pass --params, e.g. 7e9, or a GPT shape",
        )?;
        if params > 1e15 {
            return Err(Error::Config(format!(
                "{params:.3e} parameters is beyond what a shape can be inferred for; pass --layers and --hidden"
            )));
        }
        let l = (params / (12.0 * 128.0 * 128.0)).cbrt().round().max(1.0);
        let layers = if l >= 4.0 { (l / 4.0).round() * 4.0 } else { l } as usize;
        let mut heads = ((params / (12.0 * layers as f64)).sqrt() / 128.0)
            .round()
            .max(1.0) as usize;
        if heads >= 8 {
            heads = (heads as f64 / 8.0).round() as usize * 8;
        }
        Self::with_params(params, layers, heads * 128, heads, seq_len, vocab)
    }

    /// Parameters outside the blocks: token embedding (tied head) and positions, `(V + ctx)·d`.
    pub fn embedding_params(&self) -> f64 {
        (self.vocab as f64 + self.seq_len as f64) * self.hidden as f64
    }

    /// Parameters of one block: `(N − (V + ctx)·d) / L` (= 12·d² for a [`ModelShape::gpt`] model).
    pub fn block_params(&self) -> f64 {
        (self.params - self.embedding_params()) / self.layers as f64
    }

    /// Checks every field; the error names the flag to change.
    pub fn validate(&self) -> Result<()> {
        positive(
            "the parameter count",
            self.params,
            "pass --params, e.g. 7e9",
        )?;
        at_least_one("layers", self.layers, "pass --layers ≥ 1")?;
        at_least_one("hidden", self.hidden, "pass --hidden ≥ 1")?;
        at_least_one("heads", self.heads, "pass --heads ≥ 1")?;
        at_least_one("seq_len", self.seq_len, "pass --seq ≥ 1")?;
        at_least_one("vocab", self.vocab, "pass --vocab ≥ 1")?;
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(Error::Config(format!(
                "hidden = {} is not divisible by heads = {}; choose heads that divide the hidden size",
                self.hidden, self.heads
            )));
        }
        if self.block_params() <= 0.0 {
            return Err(Error::Config(format!(
                "{:.3e} parameters leave nothing for the blocks: the embeddings alone, (V + ctx)·d = \
                 ({} + {})·{}, hold {:.3e}; raise --params or lower --vocab / --hidden",
                self.params,
                self.vocab,
                self.seq_len,
                self.hidden,
                self.embedding_params()
            )));
        }
        Ok(())
    }
}

/// Bytes per parameter for parameters (P), gradients (G) and optimizer state (K), and bytes
/// per stored activation element: the planner's figures for a training precision
/// ([`Footprint::of`]), or any other a what-if asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Footprint {
    /// P: bytes of each working parameter.
    pub param: f64,
    /// G: bytes of each gradient (the all-reduced payload S = N·G).
    pub grad: f64,
    /// K: bytes of optimizer state per parameter (master copy, Adam m and v).
    pub optim: f64,
    /// Bytes of each stored activation element and of each TP / PP message element.
    pub act: f64,
    /// A short name for printing.
    pub name: &'static str,
}

impl Footprint {
    /// Adam in precision `p`: (P, G, K) from [`Precision::pgk`], activations of its element size.
    pub fn of(p: Precision) -> Self {
        let (param, grad, optim) = p.pgk();
        Footprint {
            param,
            grad,
            optim,
            act: p.element_bytes() as f64,
            name: match p {
                Precision::F32 => "f32 Adam",
                Precision::Bf16 => "bf16 mixed-precision Adam",
            },
        }
    }

    /// Mixed-precision Adam: bf16 params and grads, fp32 master + m + v: P=2, G=2, K=12; bf16
    /// activations. 16 bytes per parameter in all.
    pub fn mixed_adam() -> Self {
        Footprint::of(Precision::Bf16)
    }

    /// Plain f32 Adam: P=4, G=4, K=8 (m and v); f32 activations. 16 bytes per parameter.
    pub fn f32_adam() -> Self {
        Footprint::of(Precision::F32)
    }

    /// P + G + K: bytes per parameter without sharding.
    pub fn total(&self) -> f64 {
        self.param + self.grad + self.optim
    }

    /// Checks that P, G, act are positive and K is ≥ 0 (plain SGD has no state).
    pub fn validate(&self) -> Result<()> {
        positive(
            "bytes per parameter (P)",
            self.param,
            "use 2 (bf16) or 4 (f32)",
        )?;
        positive(
            "bytes per gradient (G)",
            self.grad,
            "use 2 (bf16) or 4 (f32)",
        )?;
        positive("bytes per activation", self.act, "use 2 (bf16) or 4 (f32)")?;
        if !(self.optim.is_finite() && self.optim >= 0.0) {
            return Err(Error::Config(format!(
                "optimizer bytes per parameter (K) must be ≥ 0, got {}; Adam uses 8 (f32 m, v) or 12 (with an f32 master copy)",
                self.optim
            )));
        }
        Ok(())
    }
}
