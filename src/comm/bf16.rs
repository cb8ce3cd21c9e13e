//! The ring all-reduce of packed bf16 gradients, on any communicator's point-to-point messages:
//! two bf16 per u32 word (element 2i in the low half of word i), 2 bytes per element on the
//! wire. Each hop adds the received chunk into the own one in f32 and rounds the sum to bf16
//! (to nearest even, as the kernels round), so a partial sum is bf16 between hops, as in
//! NCCL's bf16 ring.
//!
//! ```text
//! reduce-scatter  hop s = 0 … d−2: send chunk (r − s) mod d to r + 1, receive chunk
//!                 (r − s − 1) mod d from r − 1 and add it in   → rank r owns chunk (r + 1) mod d
//! all-gather      hop s = 0 … d−2: send chunk (r + 1 − s) mod d, receive chunk (r − s) mod d
//! ```
//!
//! Chunk c is summed in the fixed order x(c+1) + x(c+2) + … + x(c), so a layout gives the same
//! bits run after run, in one process or over MPI. The busiest rank sends 2(d−1)/d of the words:
//! 2(d−1)/d · 2N bytes for N elements.

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

/// Every rank's `words` (equal lengths) ends holding the bf16 sum over ranks; the ring's chunks
/// are `bounds` (d + 1 word offsets from 0 to the length). `round` tells this call's messages
/// from the next one's (e.g. the bucket index).
pub fn all_reduce_bf16(
    c: &mut dyn Communicator,
    words: &mut [u32],
    bounds: &[usize],
    round: usize,
) -> Result<()> {
    let (d, r) = (c.size(), c.rank());
    check_bounds("bf16 all-reduce", bounds, d, words.len())?;
    if d == 1 {
        return Ok(());
    }
    let (next, prev) = ((r + 1) % d, (r + d - 1) % d);
    let span = |k: usize| bounds[k % d]..bounds[k % d + 1];
    let tag = |hop: usize| Tag {
        flow: FLOW,
        micro: hop,
        stage: round,
    };
    let recv = |c: &mut dyn Communicator, hop: usize, want: usize| -> Result<Vec<u32>> {
        let got: Vec<u32> = bytemuck::cast_vec(c.recv(prev, tag(hop))?);
        if got.len() != want {
            return Err(Error::Config(format!(
                "bf16 all-reduce: rank {prev} sent {} words, chunk holds {want}",
                got.len()
            )));
        }
        Ok(got)
    };
    for s in 0..d - 1 {
        let out = span(r + d - s);
        c.send(next, tag(s), bytemuck::cast_vec(words[out].to_vec()))?;
        let into = span(r + 2 * d - s - 1);
        let got = recv(c, s, into.len())?;
        for (w, g) in words[into].iter_mut().zip(got) {
            *w = add_words(*w, g);
        }
    }
    for s in 0..d - 1 {
        let hop = d - 1 + s;
        let out = span(r + 1 + d - s);
        c.send(next, tag(hop), bytemuck::cast_vec(words[out].to_vec()))?;
        let into = span(r + d - s);
        let got = recv(c, hop, into.len())?;
        words[into].copy_from_slice(&got);
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
