//! Collectives on one precision's words, the payload the worker moves: a device buffer
//! downloaded as u32 words holds f32 elements (run on the communicator's own collectives) or
//! packed bf16 pairs (run on the bf16 ring or pairwise tree of `bf16.rs`, 2 bytes per element
//! on the wire). A caller makes one call per collective whatever the precision. Bounds are in
//! words: under bf16 each is a flat bound halved, so every chunk holds whole pairs.

use super::{all_gather_bf16, all_reduce_bf16, reduce_scatter_bf16, tree_all_reduce_bf16};
use super::{Communicator, Result};
use crate::collective::Algo;
use crate::error::Error;
use crate::precision::Precision;

/// Runs `f` on `words` seen as f32 elements (no copy: the same allocation).
fn as_f32(words: &mut Vec<u32>, f: impl FnOnce(&mut Vec<f32>) -> Result<()>) -> Result<()> {
    let mut host: Vec<f32> = bytemuck::cast_vec(std::mem::take(words));
    let r = f(&mut host);
    *words = bytemuck::cast_vec(host);
    r
}

/// Every rank's `words` end holding the sum over the group: f32 by `algo`, bf16 on the ring
/// (chunks at `bounds`) or the pairwise tree. `round` tells the bf16 messages of this call from
/// the next one's.
pub fn all_reduce_words(
    c: &mut dyn Communicator,
    p: Precision,
    words: &mut Vec<u32>,
    algo: Algo,
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    match (p, algo) {
        (Precision::F32, _) => as_f32(words, |h| c.all_reduce(h, algo, Some(bounds), false)),
        (Precision::Bf16, Algo::Ring) => all_reduce_bf16(c, words, bounds, round),
        (Precision::Bf16, Algo::Tree) => tree_all_reduce_bf16(c, words, round),
        (Precision::Bf16, Algo::Naive) => Err(Error::Config(
            "the naive all-reduce is not built for bf16: use the ring or the tree".into(),
        )),
    }
}

/// Ring reduce-scatter: afterwards `words[bounds[r]..bounds[r+1]]` on rank r holds the sum of
/// chunk r over the group.
pub fn reduce_scatter_words(
    c: &mut dyn Communicator,
    p: Precision,
    words: &mut Vec<u32>,
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    match p {
        Precision::F32 => as_f32(words, |h| c.reduce_scatter(h, bounds, false)),
        Precision::Bf16 => reduce_scatter_bf16(c, words, bounds, round),
    }
}

/// Ring all-gather: chunk r of `words` on rank r is its input; afterwards every rank holds
/// every chunk.
pub fn all_gather_words(
    c: &mut dyn Communicator,
    p: Precision,
    words: &mut Vec<u32>,
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    match p {
        Precision::F32 => as_f32(words, |h| c.all_gather(h, bounds)),
        Precision::Bf16 => all_gather_bf16(c, words, bounds, round),
    }
}

/// The first of the `len` elements in `words` that is an infinity or a NaN.
pub fn first_non_finite(p: Precision, words: &[u32], len: usize) -> Option<usize> {
    match p {
        Precision::F32 => words
            .iter()
            .take(len)
            .position(|&w| !f32::from_bits(w).is_finite()),
        // the exponent all ones; element 2i is the low half of word i
        Precision::Bf16 => words
            .iter()
            .flat_map(|&w| [w & 0xffff, w >> 16])
            .take(len)
            .position(|h| h & 0x7f80 == 0x7f80),
    }
}
