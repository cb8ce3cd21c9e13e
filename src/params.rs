//! Parameters, gradients and Adam moments as one flat buffer each per device, with named
//! `(offset, len)` views (llm.c's `malloc_and_point_parameters`). All-reduce, ZeRO shards, the
//! optimizer and checkpoints then become range arithmetic.
//!
//! Tensors lie in block order, and inside a block in the reverse of the order the backward pass
//! finishes their gradients: the gradients final at any point of backward are then one
//! contiguous range at the end of the buffer, which a data-parallel bucket can all-reduce while
//! backward goes on. AdamW runs over the contiguous runs of decayed / not decayed tensors.
//!
//! ```text
//! flat: | wte wpe | h0.ln1w h0.ln1b h0.qkvw h0.qkvb … h0.fcprojw h0.fcprojb | h1 … | lnfw lnfb headw |
//!                                                      backward finishes ◀──────────────────────────
//!       ^ every tensor starts on a 64-element (256-byte) boundary: any view can be bound
//! ```

use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::memory::Category;
use crate::precision::Precision;

pub use crate::precision::ALIGN;

impl Precision {
    /// The storage layout of `layout`'s tensors in this precision: the same under f32,
    /// [`Layout::packed`] (every tensor on 128 elements) under bf16.
    pub fn storage(self, layout: Layout) -> Layout {
        match self {
            Precision::F32 => layout,
            Precision::Bf16 => layout.packed(),
        }
    }
}

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
}

impl Layout {
    /// Places the tensors in spec order, each 64-aligned.
    pub fn new(specs: &[Spec]) -> Layout {
        let mut tensors = Vec::with_capacity(specs.len());
        let mut off = 0;
        for s in specs {
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
        Layout {
            tensors,
            total: off,
        }
    }

    /// The same tensors in the same order, each on a 128-element boundary: the storage layout of
    /// packed bf16 buffers, where a tensor at element offset `o` is words `o/2 ..` and a view
    /// must start on a 64-word (256-byte) boundary. Master weights and moments use it too, so
    /// one offset addresses a tensor in every buffer of a mixed-precision chunk.
    pub fn packed(&self) -> Layout {
        let mut tensors = Vec::with_capacity(self.tensors.len());
        let mut off = 0;
        for t in &self.tensors {
            tensors.push(Tensor {
                offset: off,
                ..t.clone()
            });
            off = (off + t.len).next_multiple_of(2 * ALIGN);
        }
        Layout {
            tensors,
            total: off,
        }
    }

    /// A host flat buffer of layout `self` moved into layout `to` (same tensors by name, any
    /// offsets; padding zero).
    pub fn relayout(&self, flat: &[f32], to: &Layout) -> Result<Vec<f32>> {
        let mut out = vec![0.0f32; to.total];
        for t in &to.tensors {
            let src = self.slice(flat, &t.name)?;
            if src.len() != t.len {
                return Err(Error::Config(format!(
                    "tensor {}: {} elements, the target layout holds {}",
                    t.name,
                    src.len(),
                    t.len
                )));
            }
            out[t.offset..t.offset + t.len].copy_from_slice(src);
        }
        Ok(out)
    }

    /// The name of the tensor holding flat element `at`, or "a padding element".
    pub fn tensor_at(&self, at: usize) -> String {
        self.tensors
            .iter()
            .find(|t| (t.offset..t.offset + t.len.max(1)).contains(&at))
            .map_or("a padding element".to_string(), |t| t.name.clone())
    }

    /// Maximal runs of tensors with one decay flag: `(flat range, decayed?)`, covering
    /// `[0, total)` (padding belongs to the run before it).
    pub fn decay_segments(&self) -> Vec<(std::ops::Range<usize>, bool)> {
        let mut out: Vec<(std::ops::Range<usize>, bool)> = Vec::new();
        for (i, t) in self.tensors.iter().enumerate() {
            let end = self.tensors.get(i + 1).map_or(self.total, |n| n.offset);
            match out.last_mut() {
                Some((r, d)) if *d == t.decay => r.end = end,
                _ => out.push((t.offset..end, t.decay)),
            }
        }
        out
    }

    /// The flat ranges that get weight decay (each tensor's padding goes with it).
    pub fn decay_ranges(&self) -> Vec<std::ops::Range<usize>> {
        self.decay_segments()
            .into_iter()
            .filter_map(|(r, decay)| decay.then_some(r))
            .collect()
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

/// The flat buffers of one device: parameters, gradients and the AdamW moments, and under
/// bf16 mixed precision the f32 master weights, with `params` and `grads` packed bf16 (two
/// elements per u32 word: a tensor at flat offset `o` of `len` elements is words
/// `o/2 .. o/2 + ⌈len/2⌉`; offsets are multiples of 64, so no word holds two tensors).
#[derive(Clone)]
pub struct Buffers {
    pub layout: Layout,
    pub params: View,
    pub grads: View,
    pub m: View,
    pub v: View,
    /// bf16: the f32 master weights (`params` holds them rounded); `None` under f32, and under
    /// bf16 when a data-parallel group shards them (ZeRO-1: the chunk holds its shard).
    pub master: Option<View>,
    /// `params` and `grads` are packed bf16.
    pub packed: bool,
    /// ZeRO-3: where the model binds its parameters instead of `params` (which then holds
    /// this rank's shard): block i's tensors in gather slot i % 2.
    pub slots: Option<Slots>,
}

/// Two gather slots and the flat storage range of every block they take turns holding: a
/// model binds block i's parameter views in `views[i % 2]` at their offset within the block, so
/// its bind groups are built once and each step's gathers only refill the slots.
#[derive(Clone)]
pub struct Slots {
    /// Per block, in order: its range of the storage layout (elements).
    pub spans: Vec<std::ops::Range<usize>>,
    /// Each at least as long as the longest block (u32 words: elements, or bf16 pairs).
    pub views: [View; 2],
}

impl Slots {
    /// The slot view of `len` storage elements at storage offset `offset` (bf16 when
    /// `packed`), or an error if no block holds the range.
    fn view(&self, offset: usize, len: usize, packed: bool) -> Result<View> {
        let (i, s) = self
            .spans
            .iter()
            .enumerate()
            .find(|(_, s)| s.contains(&offset))
            .ok_or_else(|| Error::Config(format!("no block holds flat offset {offset}")))?;
        if offset + len > s.end {
            return Err(Error::Config(format!(
                "tensor at {offset} of {len} elements crosses the end of its block ({s:?})"
            )));
        }
        let at = offset - s.start;
        Ok(match packed {
            true => self.views[i % 2].slice(at / 2, len.div_ceil(2)),
            false => self.views[i % 2].slice(at, len),
        })
    }
}

impl Buffers {
    /// Allocates zeroed f32 buffers for `layout` on `gpu`.
    pub fn new(gpu: &Gpu, layout: &Layout) -> Buffers {
        Buffers::alloc(gpu, layout, Precision::F32, true)
    }

    /// Allocates zeroed buffers for the tensors of `layout` in precision `p`: parameters and
    /// gradients (under bf16 packed, 2 bytes per element each, placed by [`Layout::packed`]),
    /// and with `state` the AdamW moments (and under bf16 the f32 master weights: 12 bytes per
    /// element, counted as optimizer state). Without `state` (ZeRO-1 shards it elsewhere) `m`
    /// and `v` are empty views that hold no memory of their own, so the memory ledger counts
    /// only the real shards.
    pub fn alloc(gpu: &Gpu, layout: &Layout, p: Precision, state: bool) -> Buffers {
        let packed = p == Precision::Bf16;
        let layout = if packed {
            layout.packed()
        } else {
            layout.clone()
        };
        let (n, words) = (layout.total, p.words(layout.total));
        let (pname, gname) = match packed {
            true => ("params.bf16", "grads.bf16"),
            false => ("params", "grads"),
        };
        let params = gpu.buffer_in(Category::Parameters, pname, words);
        let grads = gpu.buffer_in(Category::Gradients, gname, words);
        let (m, v, master) = match state {
            true => (
                gpu.buffer_in(Category::OptimizerState, "adam.m", n),
                gpu.buffer_in(Category::OptimizerState, "adam.v", n),
                packed.then(|| gpu.buffer_in(Category::OptimizerState, "master", n)),
            ),
            false => (grads.slice(0, 0), grads.slice(0, 0), None),
        };
        Buffers {
            layout,
            params,
            grads,
            m,
            v,
            master,
            packed,
            slots: None,
        }
    }

    /// Whether `params` and `grads` are packed bf16 (mixed precision).
    pub fn packed(&self) -> bool {
        self.packed
    }

    /// The view of tensor `name` in flat buffer `flat` (words under bf16).
    fn tensor(&self, flat: &View, name: &str) -> Result<View> {
        let t = self.layout.get(name)?;
        Ok(match self.packed() {
            true => flat.slice(t.offset / 2, t.len.div_ceil(2)),
            false => flat.slice(t.offset, t.len),
        })
    }

    /// The parameter view of `name` (packed bf16 words under mixed precision): in its block's
    /// gather slot when the parameters are gathered per block (ZeRO-3).
    pub fn p(&self, name: &str) -> Result<View> {
        match &self.slots {
            Some(s) => {
                let t = self.layout.get(name)?;
                s.view(t.offset, t.len, self.packed)
            }
            None => self.tensor(&self.params, name),
        }
    }

    /// The gradient view of `name` (packed bf16 words under mixed precision).
    pub fn g(&self, name: &str) -> Result<View> {
        self.tensor(&self.grads, name)
    }

    /// The f32 flat parameters: the master weights under mixed precision.
    pub fn params_f32(&self) -> &View {
        self.master.as_ref().unwrap_or(&self.params)
    }

    /// Uploads f32 flat parameters in this buffer's layout: under mixed precision into the
    /// master weights, and rounded to bf16 (to nearest even, as the kernels round) into
    /// `params`.
    pub fn upload_params(&self, gpu: &Gpu, flat: &[f32]) -> Result<()> {
        match &self.master {
            Some(master) => {
                gpu.upload(master, flat)?;
                gpu.upload(&self.params, &crate::cpu::pack_bf16(flat))
            }
            None if self.packed => gpu.upload(&self.params, &crate::cpu::pack_bf16(flat)),
            None => gpu.upload(&self.params, flat),
        }
    }

    /// Bytes held by params + grads + both moments (+ master weights).
    pub fn bytes(&self) -> u64 {
        let master = self.master.as_ref().map_or(0, |m| m.bytes());
        self.params.bytes() + self.grads.bytes() + self.m.bytes() + self.v.bytes() + master
    }
}
