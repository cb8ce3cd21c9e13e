//! A chunk's two layouts: the canonical one, in which model state is exchanged, and the
//! storage one of its buffers (the same under f32; every tensor on 128 elements under bf16).

use super::*;

impl Chunk {
    /// A host copy of one of the chunk's flat f32 buffers (storage layout) in the canonical
    /// layout.
    pub fn canonical(&self, flat: Vec<f32>) -> Result<Vec<f32>> {
        match self.buffers.packed() {
            true => self.buffers.layout.relayout(&flat, &self.local),
            false => Ok(flat),
        }
    }

    /// The runs of storage range `range` (a shard chunk) by tensor: (canonical offset, storage
    /// run). Under f32 the layouts agree: one run at the same offset.
    pub fn canonical_runs(&self, range: Range<usize>) -> Vec<(usize, Range<usize>)> {
        if !self.buffers.packed() {
            return vec![(range.start, range)];
        }
        let mut out = Vec::new();
        for (t, c) in self.buffers.layout.tensors.iter().zip(&self.local.tensors) {
            let (a, e) = (t.offset.max(range.start), (t.offset + t.len).min(range.end));
            if a < e {
                out.push((c.offset + (a - t.offset), a..e));
            }
        }
        out
    }

    /// The inverse of [`Chunk::canonical`].
    pub fn stored<'a>(&self, flat: &'a [f32]) -> Result<Cow<'a, [f32]>> {
        match self.buffers.packed() {
            true => Ok(Cow::Owned(self.local.relayout(flat, &self.buffers.layout)?)),
            false => Ok(Cow::Borrowed(flat)),
        }
    }
}

/// ZeRO-3 buffers before the shard grid exists: the full gradients the backward accumulates
/// into, and two gather slots (each as long as the chunk's longest block) in which the model
/// binds every block's parameters. `params` is an empty placeholder until the chunk allocates
/// this rank's shard; the moments (and bf16 master weights) are shards of the chunk's own.
pub(super) fn gathered(
    gpu: &Gpu,
    cfg: &TrainConfig,
    spec: &ChunkSpec,
    local: &crate::params::Layout,
) -> Result<Buffers> {
    let prec = spec.precision;
    let layout = prec.storage(local.clone());
    let spans = cfg.model.block_spans(spec.blocks, spec.tp.t, &layout)?;
    let longest = spans.iter().map(|s| s.len()).max().unwrap_or(1);
    let (grads_name, slot_name) = match prec {
        Precision::F32 => ("grads", "params.slot"),
        Precision::Bf16 => ("grads.bf16", "params.bf16.slot"),
    };
    let grads = gpu.buffer_in(Category::Gradients, grads_name, prec.words(layout.total));
    let slot = |i: usize| {
        gpu.buffer_in(
            Category::Parameters,
            &format!("{slot_name}{i}"),
            prec.words(longest),
        )
    };
    Ok(Buffers {
        layout,
        params: grads.slice(0, 0),
        m: grads.slice(0, 0),
        v: grads.slice(0, 0),
        grads,
        master: None,
        packed: prec == Precision::Bf16,
        slots: Some(crate::params::Slots {
            spans,
            views: [slot(0), slot(1)],
        }),
    })
}
