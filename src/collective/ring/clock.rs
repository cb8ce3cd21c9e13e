//! When each hop of the ring ran, gathered over the slices that carried it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// When each hop (chunk k, round t) ran, over all its slices: the first moment a slice's data
/// was ready at the sender and the last moment a slice was taken by the receiver, in ns since
/// `base`.
pub(super) struct Clock {
    base: Instant,
    rounds: usize,
    first: Vec<AtomicU64>,
    last: Vec<AtomicU64>,
}

impl Clock {
    pub(super) fn new(d: usize, rounds: usize) -> Self {
        Clock {
            base: Instant::now(),
            rounds,
            first: (0..d * rounds).map(|_| AtomicU64::new(u64::MAX)).collect(),
            last: (0..d * rounds).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    pub(super) fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
    pub(super) fn record(&self, k: usize, t: usize, ready: u64, taken: u64) {
        let i = k * self.rounds + t;
        self.first[i].fetch_min(ready, Ordering::Relaxed);
        self.last[i].fetch_max(taken, Ordering::Relaxed);
    }
    /// Seconds hop (k, t) took from first data ready to last slice taken; 0 for empty chunks.
    pub(super) fn wall(&self, k: usize, t: usize) -> f64 {
        let i = k * self.rounds + t;
        let (a, b) = (
            self.first[i].load(Ordering::Relaxed),
            self.last[i].load(Ordering::Relaxed),
        );
        if a == u64::MAX {
            0.0
        } else {
            b.saturating_sub(a) as f64 * 1e-9
        }
    }
}
