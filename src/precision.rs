//! Training precision: f32 everywhere, or bf16 mixed precision.
//!
//! ```text
//!              parameters  gradients  activations  master weights  Adam m, v   bytes / param
//! f32          f32         f32        f32          —               f32         4 + 4 + 8 = 16
//! bf16         bf16        bf16       bf16         f32             f32         2 + 2 + 12 = 16
//! ```
//!
//! bf16 tensors are packed two per u32 word ([`crate::cpu::pack_bf16`]); layernorm statistics,
//! per-token losses and the logits with their gradient stay f32, and every kernel computes in
//! f32 between a widening load and a rounding store (round to nearest even, as `half`).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Alignment of every tensor's offset in an f32 layout, in elements (256 bytes: WebGPU's
/// largest storage buffer offset alignment); a bf16 layout aligns to twice as many elements,
/// the same bytes ([`Precision::align`]).
pub const ALIGN: usize = 64;

/// The precision of the tensors on the device.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    /// bf16 parameters, gradients and activations; f32 master weights and moments.
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    /// Bytes of one element of a parameter, gradient or activation tensor.
    pub fn element_bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        }
    }

    /// Bytes per parameter of (P, G, K): parameters, gradients and optimizer state (K holds the
    /// Adam moments, and under bf16 the f32 master weights).
    pub fn pgk(self) -> (f64, f64, f64) {
        match self {
            Precision::F32 => (4.0, 4.0, 8.0),
            Precision::Bf16 => (2.0, 2.0, 12.0),
        }
    }

    /// Elements every tensor and shard chunk of the storage layout is aligned to: a view
    /// bound to a kernel starts on 256 bytes (64 f32s, 64 words of two bf16).
    pub fn align(self) -> usize {
        match self {
            Precision::F32 => ALIGN,
            Precision::Bf16 => 2 * ALIGN,
        }
    }

    /// What a tensor of this precision keeps of the f32 values `x`, in place: f32 all of them,
    /// bf16 each rounded to nearest even ([`crate::cpu::round_bf16`], as a packed kernel's
    /// store). The CPU twins' one rounding hook: the whole-model twin calls it at every store
    /// the device makes in this precision.
    pub fn round(self, x: &mut [f32]) {
        if self == Precision::Bf16 {
            crate::cpu::round_bf16(x);
        }
    }

    /// Elements one u32 word holds on the device: 1, or 2 packed bf16.
    pub fn per_word(self) -> usize {
        match self {
            Precision::F32 => 1,
            Precision::Bf16 => 2,
        }
    }

    /// u32 words a tensor of `len` elements takes on the device.
    pub fn words(self, len: usize) -> usize {
        match self {
            Precision::F32 => len,
            Precision::Bf16 => len.div_ceil(2),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = Error;

    fn from_str(s: &str) -> Result<Precision> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| Error::Config(format!("unknown precision {s:?}: use f32 or bf16")))
    }
}
