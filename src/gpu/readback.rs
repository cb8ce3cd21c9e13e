//! The read-back staging buffer a device keeps between downloads.
//!
//! A fresh mappable buffer for every download costs far more than the copy on a CPU adapter
//! (lavapipe, 16 MiB: 14.5–15.1 ms fresh against 1.7–1.9 ms reused), so each device keeps its
//! largest one and lends it to the next download that fits. It stays in the memory ledger as
//! communication staging for as long as it is kept.
//!
//! ```text
//! download(n bytes): take the kept buffer if it holds n (else a new one of n) ─▶ copy, map,
//!   read, unmap ─▶ keep whichever of the two is larger
//! ```

use std::sync::{Arc, Mutex};

use crate::memory::{Allocation, Category, MemoryLedger};

/// A mappable buffer with its ledger entry.
pub(super) struct Staging {
    pub buf: wgpu::Buffer,
    _counted: Allocation,
}

impl Staging {
    fn size(&self) -> u64 {
        self.buf.size()
    }
}

/// The kept buffer of one device (shared by every clone of its `Gpu`). A download on a second
/// thread while the first holds the buffer makes its own, so no download waits on another.
#[derive(Default)]
pub(super) struct Readback {
    kept: Mutex<Option<Staging>>,
}

impl Readback {
    /// A buffer of at least `bytes`: the kept one where it is that large, else a new one.
    pub fn lend(&self, device: &wgpu::Device, ledger: &Arc<MemoryLedger>, bytes: u64) -> Staging {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        match kept.take() {
            Some(s) if s.size() >= bytes => s,
            other => {
                // a smaller kept buffer goes before the larger one is made
                drop(other);
                drop(kept);
                Staging {
                    buf: device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("download"),
                        size: bytes,
                        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    }),
                    _counted: Allocation::new(ledger, Category::Staging, bytes),
                }
            }
        }
    }

    /// Takes `s` back (unmapped): it is kept unless a larger one already is.
    pub fn keep(&self, s: Staging) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.as_ref().is_none_or(|k| k.size() < s.size()) {
            *kept = Some(s);
        }
    }
}
