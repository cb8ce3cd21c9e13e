//! The optimizer of one device: global-norm clipping and AdamW over its flat buffers, or over
//! the pieces of them it owns (ZeRO shards).
//!
//! The global gradient norm is made layout- and shard-invariant: the flat buffer is cut into
//! *norm parts* (each tensor, further cut at the shard boundaries when a data-parallel group
//! shards it); each device computes Σg² of every part it holds (a fixed-order f32 reduction
//! inside the part), the host adds the parts in the model's canonical tensor order, part by
//! part in flat order, in f64, and uploads the result. One device, p pipeline stages or d
//! replicas get the same clip factor bit for bit; ZeRO stages 0–3 of one group cut at the same
//! boundaries, so they agree bit for bit too, although each rank holds only its shard.
//!
//! ```text
//! tensor      |-------- h0.qkvw --------|-- h0.qkvb --|
//! shards      | rank 0          | rank 1                |     (boundaries on multiples of 64)
//! norm parts  |    part 0       | part 1 |   part 2    |     Σ (f64, this order) → ‖g‖²
//! ```

use std::ops::Range;

use crate::cpu::AdamW;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{elementwise as ke, optim as ko, Dispatch};
use crate::params::{Buffers, Layout};
use crate::precision::Precision;

/// A contiguous flat range an optimizer updates, and where it lives in each storage buffer:
/// flat element `flat.start + i` is `params[params + i]`, `grads[grads + i]`, `m/v[moments + i]`.
/// Every start must be a multiple of 64 (views bound to kernels are 256-byte aligned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub flat: Range<usize>,
    pub params: usize,
    pub grads: usize,
    pub moments: usize,
}

impl Piece {
    /// The piece stored at its flat offset in all three buffers (unsharded storage).
    pub fn identity(flat: Range<usize>) -> Piece {
        Piece {
            params: flat.start,
            grads: flat.start,
            moments: flat.start,
            flat,
        }
    }
}

/// Σg² of one norm part: tensor `tensor`'s elements from flat offset `start`.
#[derive(Clone, Debug, PartialEq)]
pub struct NormPart {
    pub tensor: String,
    pub start: usize,
    pub sq: f32,
}

/// Where an optimizer's buffers are: f32, or (with `master`) packed bf16 `params` and `grads`
/// with f32 master weights and moments.
struct Storage<'a> {
    params: &'a View,
    grads: &'a View,
    m: &'a View,
    v: &'a View,
    master: Option<&'a View>,
}

impl Storage<'_> {
    /// Precision of `params` and `grads`: bf16 when there are f32 master weights beside them.
    fn precision(&self) -> Precision {
        match self.master {
            Some(_) => Precision::Bf16,
            None => Precision::F32,
        }
    }

    /// Elements per u32 word of `params` and `grads`.
    fn div(&self) -> usize {
        self.precision().per_word()
    }

    /// Words (or elements) of `len` elements of `params` or `grads`.
    fn len(&self, len: usize) -> usize {
        self.precision().words(len)
    }

    /// The view of `len` elements of `params` or `grads` from flat element `at`.
    fn at(&self, x: &View, at: usize, len: usize) -> View {
        x.slice(at / self.div(), self.len(len))
    }
}

pub struct Optimizer {
    gpu: Gpu,
    /// (tensor name, flat start) of the norm part in each slot of `sq`.
    parts: Vec<(String, usize)>,
    /// Σg² of part i at element i.
    sq: View,
    norm_ops: Vec<Dispatch>,
    zero_grads: Dispatch,
    adam_ops: Vec<Dispatch>,
    hp: View,
    norm_sq: View,
}

impl Optimizer {
    /// Over a device's whole flat buffers (one norm part per tensor).
    pub fn new(gpu: &Gpu, b: &Buffers) -> Result<Optimizer> {
        Optimizer::with_cuts(gpu, b, &[])
    }

    /// Over whole flat buffers, with norm parts also cut at the flat offsets `cuts` (a
    /// data-parallel group's shard boundaries: an unsharded replica then computes exactly
    /// the parts its sharded twins compute).
    pub fn with_cuts(gpu: &Gpu, b: &Buffers, cuts: &[usize]) -> Result<Optimizer> {
        let mut edges: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < b.layout.total)
            .collect();
        edges.push(0);
        edges.push(b.layout.total);
        edges.sort_unstable();
        edges.dedup();
        let pieces: Vec<Piece> = edges
            .windows(2)
            .map(|w| Piece::identity(w[0]..w[1]))
            .collect();
        let st = Storage {
            params: &b.params,
            grads: &b.grads,
            m: &b.m,
            v: &b.v,
            master: b.master.as_ref(),
        };
        Optimizer::build(gpu, &b.layout, &st, &pieces)
    }

    /// Over `pieces` of the flat buffer described by `layout`, stored in `params`, `grads`, `m`,
    /// `v` at the offsets each piece names. Pieces must not overlap; their starts and storage
    /// offsets must be multiples of 64. `zero_grads` fills the whole `grads` view.
    ///
    /// With `master` (mixed precision): `params` and `grads` are packed bf16 words (flat
    /// element `flat.start + i` of a piece is element `params + i` / `grads + i` of them) and
    /// `master` holds the f32 master weights at `moments + i` beside `m` and `v`; packed
    /// gradients in, the master weights and moments updated, the rounded master weights written
    /// to the packed parameters ([`crate::kernels::optim`]). Every piece start and
    /// storage offset must then be a multiple of 128 (a view of words starts on 256 bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn sharded(
        gpu: &Gpu,
        layout: &Layout,
        params: &View,
        grads: &View,
        master: Option<&View>,
        m: &View,
        v: &View,
        pieces: &[Piece],
    ) -> Result<Optimizer> {
        let st = Storage {
            params,
            grads,
            m,
            v,
            master,
        };
        Optimizer::build(gpu, layout, &st, pieces)
    }

    /// [`Optimizer::with_cuts`] and [`Optimizer::sharded`]: the norm parts (every tensor's real
    /// elements, cut at piece boundaries) in two dispatches, and one AdamW dispatch per piece
    /// (two with an f32 tail), on f32 or packed storage.
    fn build(gpu: &Gpu, layout: &Layout, st: &Storage, pieces: &[Piece]) -> Result<Optimizer> {
        let prec = st.precision();
        for p in pieces {
            let n = p.flat.len();
            // params and grads in words (elements under f32), master, m and v in elements
            let words = |x: &View, at: usize| at / st.div() + st.len(n) <= x.len;
            let elems = |x: &View, at: usize| at + n <= x.len;
            if p.flat.end > layout.total
                || (st.master.is_some() && !p.flat.start.is_multiple_of(2))
                || !words(st.params, p.params)
                || !words(st.grads, p.grads)
                || !elems(st.m, p.moments)
                || !elems(st.v, p.moments)
                || st.master.is_some_and(|w| !elems(w, p.moments))
            {
                return Err(Error::Config(format!(
                    "optimizer piece {:?} lies outside the layout ({}) or its storage",
                    p, layout.total
                )));
            }
        }
        // the norm parts: every tensor's real elements, cut at piece boundaries, as ranges
        // of the grads storage
        let mut parts = Vec::new();
        let mut ranges = Vec::new();
        for p in pieces {
            for t in &layout.tensors {
                let (a, e) = (
                    t.offset.max(p.flat.start),
                    (t.offset + t.len).min(p.flat.end),
                );
                if a < e {
                    parts.push((t.name.clone(), a));
                    let at = p.grads + (a - p.flat.start);
                    ranges.push(at..at + (e - a));
                }
            }
        }
        let sq = gpu.scratch("grad.part_sq", parts.len().max(1));
        let scratch = gpu.scratch("grad.norm_scratch", ko::norm_scratch_len(prec, &ranges));
        let norm_ops = ko::grad_norm_squared(gpu, prec, &sq, &scratch, st.grads, &ranges)?;
        let hp = gpu.scratch("adam.hp", 8);
        let norm_sq = gpu.scratch("grad.norm_sq", 1);
        let mut adam_ops = Vec::new();
        let decay = layout.decay_ranges();
        for p in pieces {
            let len = p.flat.len();
            if len == 0 {
                continue;
            }
            // the piece's decay ranges, relative to its start
            let rel: Vec<Range<usize>> = decay
                .iter()
                .map(|r| r.start.max(p.flat.start)..r.end.min(p.flat.end))
                .filter(|r| r.start < r.end)
                .map(|r| r.start - p.flat.start..r.end - p.flat.start)
                .collect();
            let (m, v) = (st.m.slice(p.moments, len), st.v.slice(p.moments, len));
            let (params, grads) = (
                st.at(st.params, p.params, len),
                st.at(st.grads, p.grads, len),
            );
            adam_ops.extend(ko::adamw(
                gpu,
                prec,
                &params,
                st.master.map(|w| w.slice(p.moments, len)).as_ref(),
                &grads,
                &m,
                &v,
                &hp,
                &norm_sq,
                &rel,
            )?);
        }
        Ok(Optimizer {
            gpu: gpu.clone(),
            parts,
            sq,
            norm_ops,
            zero_grads: ke::fill(gpu, Precision::F32, st.grads, 0.0)?, // every word 0
            adam_ops,
            hp,
            norm_sq,
        })
    }

    /// Sets every gradient to zero (start of a step).
    pub fn zero_grads(&self) -> Result<()> {
        self.gpu.run(std::slice::from_ref(&self.zero_grads))
    }

    /// Σg² of every norm part this device holds.
    pub fn parts_sq(&self) -> Result<Vec<NormPart>> {
        if self.parts.is_empty() {
            return Ok(Vec::new());
        }
        let sq = self.norm_sq_parts()?;
        Ok(self.parts_from(&self.gpu.download(sq)?))
    }

    /// Submits the Σg² of every norm part (no wait) and returns the view they land in, for a
    /// caller that reads it back with others ([`Optimizer::parts_from`] reads it).
    pub fn norm_sq_parts(&self) -> Result<&View> {
        if !self.parts.is_empty() {
            self.gpu.run(&self.norm_ops)?;
        }
        Ok(&self.sq)
    }

    /// The norm parts from the view [`Optimizer::norm_sq_parts`] returned, read back.
    pub fn parts_from(&self, sq: &[f32]) -> Vec<NormPart> {
        self.parts
            .iter()
            .enumerate()
            .map(|(i, (n, start))| NormPart {
                tensor: n.clone(),
                start: *start,
                sq: sq[i],
            })
            .collect()
    }

    /// Σg² of every norm part, by tensor name, in flat order (one entry per tensor for an
    /// optimizer made by [`Optimizer::new`]).
    pub fn tensor_sq(&self) -> Result<Vec<(String, f32)>> {
        Ok(self
            .parts_sq()?
            .into_iter()
            .map(|p| (p.tensor, p.sq))
            .collect())
    }

    /// One AdamW step with hyper-parameters `h`, given the global Σg² (for clipping), as one
    /// pass; `stamped`: timed, and the index of its device time in the device's next
    /// [`Gpu::pass_times`](crate::gpu::Gpu::pass_times) returned ([`Gpu::run_pass`]).
    ///
    /// [`Gpu::run_pass`]: crate::gpu::Gpu::run_pass
    pub fn step(&self, h: &AdamW, norm_sq: f32, stamped: bool) -> Result<Option<usize>> {
        self.load(h, norm_sq)?;
        self.gpu.run_pass(&self.adam_ops, stamped)
    }

    fn load(&self, h: &AdamW, norm_sq: f32) -> Result<()> {
        self.gpu.upload(&self.hp, &ko::hyper_words(h))?;
        self.gpu.upload(&self.norm_sq, &[norm_sq])
    }
}

/// Adds per-tensor Σg² in `canonical` name order (f64), whatever device each came from.
pub fn global_norm_sq(parts: &[(String, f32)], canonical: &[String]) -> f32 {
    let mut total = 0.0f64;
    for name in canonical {
        for (n, v) in parts {
            if n == name {
                total += *v as f64;
            }
        }
    }
    total as f32
}

/// Adds norm parts from any devices in canonical tensor order, then flat order inside a
/// tensor (f64): the same bits whichever rank held which part.
pub fn global_norm_sq_parts(parts: &[NormPart], canonical: &[String]) -> f32 {
    let rank = |n: &str| canonical.iter().position(|c| c == n).unwrap_or(usize::MAX);
    let mut sorted: Vec<&NormPart> = parts.iter().collect();
    sorted.sort_by_key(|p| (rank(&p.tensor), p.start));
    sorted.iter().map(|p| p.sq as f64).sum::<f64>() as f32
}

/// Σg² of each tensor from norm parts of any devices, in `canonical` order (parts of a tensor
/// added in flat order, f64): what tests compare across layouts, where a constant error in one
/// tensor's gradient (a lost 1/d, a copy counted t times) hides in the global norm.
pub fn tensor_norms_sq(parts: &[NormPart], canonical: &[String]) -> Vec<(String, f32)> {
    let rank = |n: &str| canonical.iter().position(|c| c == n).unwrap_or(usize::MAX);
    let mut sorted: Vec<&NormPart> = parts.iter().collect();
    sorted.sort_by(|a, b| {
        (rank(&a.tensor), &a.tensor, a.start).cmp(&(rank(&b.tensor), &b.tensor, b.start))
    });
    let mut out: Vec<(String, f64)> = Vec::new();
    for p in sorted {
        match out.last_mut() {
            Some((name, sq)) if *name == p.tensor => *sq += p.sq as f64,
            _ => out.push((p.tensor.clone(), p.sq as f64)),
        }
    }
    out.into_iter().map(|(n, sq)| (n, sq as f32)).collect()
}
