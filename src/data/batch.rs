//! Batches: seeded random windows of a token stream, and the fixed windows evaluation reads.

use crate::error::{Error, Result};
use crate::model::Micro;
use crate::rng::Rng;

/// Seeded random windows of a token stream: `(tokens, targets)`, each [B·T], targets shifted by one.
#[derive(Clone, Debug)]
pub struct Batcher {
    rng: Rng,
}

impl Batcher {
    pub fn new(seed: u64) -> Self {
        Batcher {
            rng: Rng::new(seed),
        }
    }

    /// The data cursor: the generator state after the batches drawn so far.
    pub fn state(&self) -> u64 {
        self.rng.state()
    }

    /// A batcher at a cursor from [`Batcher::state`]: it draws exactly the batches the saved
    /// one would have drawn next.
    pub fn from_state(state: u64) -> Self {
        Batcher {
            rng: Rng::from_state(state),
        }
    }

    /// Like [`Batcher::next`], but each window starts at one of `starts` (any offset if empty).
    pub fn next_from(
        &mut self,
        data: &[u32],
        micro: Micro,
        starts: &[usize],
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let t = micro.t;
        let usable = starts.partition_point(|&s| s + t < data.len());
        if starts.is_empty() || usable == 0 {
            return self.next(data, micro);
        }
        let (mut x, mut y) = (
            Vec::with_capacity(micro.tokens()),
            Vec::with_capacity(micro.tokens()),
        );
        for _ in 0..micro.b {
            let start = starts[self.rng.below(usable as u64) as usize];
            x.extend_from_slice(&data[start..start + t]);
            y.extend_from_slice(&data[start + 1..start + t + 1]);
        }
        Ok((x, y))
    }

    pub fn next(&mut self, data: &[u32], micro: Micro) -> Result<(Vec<u32>, Vec<u32>)> {
        let t = micro.t;
        if data.len() < t + 1 {
            return Err(Error::Data(format!(
                "{} tokens cannot fill a window of {}",
                data.len(),
                t + 1
            )));
        }
        let (mut x, mut y) = (
            Vec::with_capacity(micro.tokens()),
            Vec::with_capacity(micro.tokens()),
        );
        for _ in 0..micro.b {
            let start = self.rng.below((data.len() - t) as u64) as usize;
            x.extend_from_slice(&data[start..start + t]);
            y.extend_from_slice(&data[start + 1..start + t + 1]);
        }
        Ok((x, y))
    }
}

/// Offsets just after each newline (and 0): where problems start.
pub(super) fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(
            text.char_indices()
                .filter(|(_, c)| *c == '\n')
                .map(|(i, _)| i + 1),
        )
        .collect()
}

/// The `i`-th fixed (non-random) validation batch: consecutive windows of `t + 1` tokens, or
/// windows at consecutive entries of `starts` when given.
pub fn eval_batch(data: &[u32], micro: Micro, i: usize, starts: &[usize]) -> (Vec<u32>, Vec<u32>) {
    let t = micro.t;
    let usable = starts.partition_point(|&s| s + t < data.len());
    let windows = (data.len() - 1) / t;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for r in 0..micro.b {
        let k = i * micro.b + r;
        let start = if usable > 0 {
            starts[k % usable]
        } else {
            (k % windows.max(1)) * t
        };
        x.extend_from_slice(&data[start..start + t]);
        y.extend_from_slice(&data[start + 1..start + t + 1]);
    }
    (x, y)
}
