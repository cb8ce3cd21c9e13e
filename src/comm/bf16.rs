//! The ring all-reduce of packed bf16 gradients, on any communicator's point-to-point messages:
//! two bf16 per u32 word (element 2i in the low half of word i), 2 bytes per element on the
//! wire. Each hop adds the received chunk into the own one in f32 and rounds the sum to bf16
//! (to nearest even, as the kernels round), so a partial sum is bf16 between hops, as in
//! NCCL's bf16 ring.
//!
//! ```text
//! reduce-scatter  hop s = 0 … d−2: send chunk (r − s − 1) mod d to r + 1, receive chunk
//!                 (r − s − 2) mod d from r − 1 and add it in   → rank r owns chunk r
//! all-gather      hop s = 0 … d−2: send chunk (r − s) mod d, receive chunk (r − s − 1) mod d
//! ```
//!
//! Chunk c is summed in the fixed order x(c+1) + x(c+2) + … + x(c), so a layout gives the same
//! bits run after run, in one process or over MPI. The busiest rank sends 2(d−1)/d of the words:
//! 2(d−1)/d · 2N bytes for N elements. [`tree_all_reduce_bf16`] sums in the pairwise tree of
//! layout-invariant accumulation instead.

use super::{check_bounds, Communicator, Tag};
use crate::error::{Error, Result};

/// The flow of the ring's messages (0 and 1 are the pipeline's activations and gradients).
const FLOW: u8 = 2;

fn widen(h: u32) -> f32 {
    half::bf16::from_bits(h as u16).to_f32()
}

fn narrow(x: f32) -> u32 {
    half::bf16::from_f32(x).to_bits() as u32
}

/// `a + b` of two packed words, half by half, in f32, rounded to bf16.
fn add_words(a: u32, b: u32) -> u32 {
    let lo = narrow(widen(a & 0xffff) + widen(b & 0xffff));
    let hi = narrow(widen(a >> 16) + widen(b >> 16));
    lo | (hi << 16)
}

/// The ring's neighbours and chunk ranges of one call.
struct Ring<'a> {
    d: usize,
    r: usize,
    bounds: &'a [usize],
    round: usize,
}

impl Ring<'_> {
    fn span(&self, k: usize) -> std::ops::Range<usize> {
        let k = k % self.d;
        self.bounds[k]..self.bounds[k + 1]
    }

    fn tag(&self, hop: usize) -> Tag {
        Tag {
            flow: FLOW,
            micro: hop,
            stage: self.round,
        }
    }

    /// Sends chunk `out` to the next rank, receives chunk `into` from the previous one.
    fn hop(
        &self,
        c: &mut dyn Communicator,
        words: &[u32],
        hop: usize,
        out: usize,
        into: usize,
    ) -> Result<Vec<u32>> {
        let (next, prev) = ((self.r + 1) % self.d, (self.r + self.d - 1) % self.d);
        c.send(
            next,
            self.tag(hop),
            bytemuck::cast_vec(words[self.span(out)].to_vec()),
        )?;
        let got: Vec<u32> = bytemuck::cast_vec(c.recv(prev, self.tag(hop))?);
        let want = self.span(into).len();
        if got.len() != want {
            return Err(Error::Config(format!(
                "bf16 ring: rank {prev} sent {} words, chunk holds {want}",
                got.len()
            )));
        }
        Ok(got)
    }
}

fn ring<'a>(
    c: &dyn Communicator,
    what: &str,
    words: &[u32],
    bounds: &'a [usize],
    round: usize,
) -> Result<Ring<'a>> {
    check_bounds(what, bounds, c.size(), words.len())?;
    Ok(Ring {
        d: c.size(),
        r: c.rank(),
        bounds,
        round,
    })
}

/// Ring reduce-scatter of packed bf16: afterwards `words[bounds[r]..bounds[r+1]]` on rank r
/// holds the bf16 sum of chunk r over the ranks (the rest: partial sums). `bounds` are d + 1
/// word offsets from 0 to the length; `round` tells this call's messages from the next one's.
pub fn reduce_scatter_bf16(
    c: &mut dyn Communicator,
    words: &mut [u32],
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    let g = ring(c, "bf16 reduce-scatter", words, bounds, round)?;
    let d = g.d;
    // hop s: send chunk r − s − 1, add chunk r − s − 2 in; the last hop completes chunk r
    for s in 0..d.saturating_sub(1) {
        let (out, into) = (g.r + 2 * d - s - 1, g.r + 2 * d - s - 2);
        let got = g.hop(c, words, s, out, into)?;
        for (w, x) in words[g.span(into)].iter_mut().zip(got) {
            *w = add_words(*w, x);
        }
    }
    Ok(())
}

/// Ring all-gather of packed bf16: chunk r of `words` on rank r is its input; afterwards every
/// rank holds every chunk.
pub fn all_gather_bf16(
    c: &mut dyn Communicator,
    words: &mut [u32],
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    let g = ring(c, "bf16 all-gather", words, bounds, round)?;
    let d = g.d;
    // hop s: send chunk r − s, receive chunk r − s − 1 (hops after a reduce-scatter's)
    for s in 0..d.saturating_sub(1) {
        let (out, into) = (g.r + d - s, g.r + 2 * d - s - 1);
        let got = g.hop(c, words, d - 1 + s, out, into)?;
        let span = g.span(into);
        words[span].copy_from_slice(&got);
    }
    Ok(())
}

/// Every rank's `words` (equal lengths) ends holding the bf16 sum over ranks: the
/// reduce-scatter, then the all-gather, over chunks `bounds`.
pub fn all_reduce_bf16(
    c: &mut dyn Communicator,
    words: &mut [u32],
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    reduce_scatter_bf16(c, words, bounds, round)?;
    all_gather_bf16(c, words, bounds, round)
}

/// The pairwise tree all-reduce of packed bf16 (the grouping of `collective::host`'s tree, so
/// the pairwise-tree accumulation of microbatches continues across ranks): level ℓ, rank
/// r + 2^ℓ sends its partial sum to rank r (r a multiple of 2^(ℓ+1)), which adds it in f32 and
/// rounds to bf16; then rank 0 sends the total to every other rank.
pub fn tree_all_reduce_bf16(
    c: &mut dyn Communicator,
    words: &mut [u32],
    round: usize,
) -> Result<()> {
    let (d, r) = (c.size(), c.rank());
    let tag = |hop: usize| Tag {
        flow: FLOW,
        micro: hop,
        stage: round,
    };
    let (mut stride, mut level) = (1, 0);
    while stride < d {
        if r % (2 * stride) == stride {
            c.send(r - stride, tag(level), bytemuck::cast_vec(words.to_vec()))?;
        } else if r % (2 * stride) == 0 && r + stride < d {
            let got: Vec<u32> = bytemuck::cast_vec(c.recv(r + stride, tag(level))?);
            if got.len() != words.len() {
                return Err(Error::Config(format!(
                    "bf16 tree: rank {} sent {} words, this rank holds {}",
                    r + stride,
                    got.len(),
                    words.len()
                )));
            }
            for (w, x) in words.iter_mut().zip(got) {
                *w = add_words(*w, x);
            }
        }
        stride *= 2;
        level += 1;
    }
    if r == 0 {
        for to in 1..d {
            c.send(to, tag(level), bytemuck::cast_vec(words.to_vec()))?;
        }
    } else if d > 1 {
        let got: Vec<u32> = bytemuck::cast_vec(c.recv(0, tag(level))?);
        if got.len() != words.len() {
            return Err(Error::Config(format!(
                "bf16 tree: rank 0 sent {} words, this rank holds {}",
                got.len(),
                words.len()
            )));
        }
        words.copy_from_slice(&got);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_add_in_f32_and_round_once() {
        let w = |lo: f32, hi: f32| narrow(lo) | (narrow(hi) << 16);
        assert_eq!(add_words(w(1.0, -2.0), w(0.5, 2.0)), w(1.5, 0.0));
        // 256 + 1 rounds to even in bf16 (8 significant bits): 256
        assert_eq!(add_words(w(256.0, 0.0), w(1.0, 0.0)), w(256.0, 0.0));
    }
}
