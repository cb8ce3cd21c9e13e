//! Views: ranges of 4-byte elements in a buffer that the memory ledger counts.

use std::sync::Arc;

use crate::memory::{Allocation, Category};

/// A range of 4-byte elements inside a buffer: `(offset, len)` in elements.
/// Views bound to kernels start at multiples of 64 elements (256 bytes, the largest storage
/// offset alignment WebGPU allows), which [`crate::params`] guarantees for its layouts.
#[derive(Clone, Debug)]
pub struct View {
    pub buf: Buffer,
    pub offset: usize,
    pub len: usize,
}

/// A wgpu buffer with its memory-ledger record: derefs to `wgpu::Buffer`; when the last clone
/// drops, the ledger records the release.
#[derive(Clone, Debug)]
pub struct Buffer {
    pub(super) raw: wgpu::Buffer,
    pub(super) alloc: Option<Arc<Allocation>>,
}

impl Buffer {
    /// The ledger category this buffer is counted in, if any.
    pub fn category(&self) -> Option<Category> {
        self.alloc.as_ref().map(|a| a.category)
    }
}

impl std::ops::Deref for Buffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.raw
    }
}

impl View {
    pub fn byte_offset(&self) -> u64 {
        (self.offset * 4) as u64
    }
    pub fn bytes(&self) -> u64 {
        (self.len * 4) as u64
    }
    /// The sub-range `[start, start + len)` of this view.
    pub fn slice(&self, start: usize, len: usize) -> View {
        assert!(start + len <= self.len, "view slice out of range");
        View {
            buf: self.buf.clone(),
            offset: self.offset + start,
            len,
        }
    }
}
