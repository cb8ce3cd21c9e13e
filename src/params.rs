//! Parameters, gradients and Adam moments as one flat buffer each per device, with named
//! `(offset, len)` views (llm.c's `malloc_and_point_parameters`). All-reduce, ZeRO shards, the
//! optimizer and checkpoints then become range arithmetic.
//!
//! ```text
//! flat: | wte ........ | wpe .. | h0.qkvw ..... | ... | head ..... || h0.ln1w | h0.qkvb | ... |
//!       '------------- weight-decayed (matrices) ------------------''-- no decay (gains, biases) --'
//!       ^ every tensor starts on a 64-element (256-byte) boundary: any view can be bound
//! ```

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};

/// Alignment of every tensor's offset, in elements (256 bytes: WebGPU's largest storage
/// buffer offset alignment).
pub const ALIGN: usize = 64;

/// One named tensor inside the flat buffer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub len: usize,
    /// AdamW weight decay applies (matrices and embeddings, not gains or biases).
    pub decay: bool,
}

/// A tensor before placement: name, shape, decayed?
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub shape: Vec<usize>,
    pub decay: bool,
}

/// The placement of a list of tensors in one flat buffer.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Layout {
    pub tensors: Vec<Tensor>,
    /// Flat length including alignment padding (padding stays zero).
    pub total: usize,
    /// Elements `[0, decay_end)` get weight decay; `[decay_end, total)` do not.
    pub decay_end: usize,
}

impl Layout {
    /// Places decayed tensors first, then the rest, each in spec order, 64-aligned.
    pub fn new(specs: &[Spec]) -> Layout {
        let mut tensors = Vec::with_capacity(specs.len());
        let mut off = 0;
        let mut decay_end = 0;
        for pass in [true, false] {
            for s in specs.iter().filter(|s| s.decay == pass) {
                let len = s.shape.iter().product();
                tensors.push(Tensor {
                    name: s.name.clone(),
                    shape: s.shape.clone(),
                    offset: off,
                    len,
                    decay: s.decay,
                });
                off = (off + len).next_multiple_of(ALIGN);
            }
            if pass {
                decay_end = off;
            }
        }
        Layout {
            tensors,
            total: off,
            decay_end,
        }
    }

    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::Config(format!("no parameter tensor named {name}")))
    }

    /// Number of real parameters (without padding).
    pub fn count(&self) -> usize {
        self.tensors.iter().map(|t| t.len).sum()
    }

    /// The slice of a host copy of the flat buffer that holds `name`.
    pub fn slice<'a>(&self, flat: &'a [f32], name: &str) -> Result<&'a [f32]> {
        let t = self.get(name)?;
        Ok(&flat[t.offset..t.offset + t.len])
    }

    pub fn slice_mut<'a>(&self, flat: &'a mut [f32], name: &str) -> Result<&'a mut [f32]> {
        let t = self.get(name)?;
        Ok(&mut flat[t.offset..t.offset + t.len])
    }
}

/// The four flat buffers of one device.
#[derive(Clone)]
pub struct Buffers {
    pub layout: Layout,
    pub params: View,
    pub grads: View,
    pub m: View,
    pub v: View,
}

impl Buffers {
    /// Allocates zeroed buffers for `layout` on `gpu`.
    pub fn new(gpu: &Gpu, layout: &Layout) -> Buffers {
        Buffers {
            layout: layout.clone(),
            params: gpu.buffer("params", layout.total),
            grads: gpu.buffer("grads", layout.total),
            m: gpu.buffer("adam.m", layout.total),
            v: gpu.buffer("adam.v", layout.total),
        }
    }

    /// The parameter view of `name`.
    pub fn p(&self, name: &str) -> Result<View> {
        let t = self.layout.get(name)?;
        Ok(self.params.slice(t.offset, t.len))
    }

    /// The gradient view of `name`.
    pub fn g(&self, name: &str) -> Result<View> {
        let t = self.layout.get(name)?;
        Ok(self.grads.slice(t.offset, t.len))
    }

    /// Bytes held by params + grads + both moments.
    pub fn bytes(&self) -> u64 {
        4 * self.params.bytes()
    }
}
