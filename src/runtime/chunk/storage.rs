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
