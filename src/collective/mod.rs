//! The collective algorithms, host-staged and spelled out: all-reduce (a naive
//! gather-sum-broadcast twin and a ring of reduce-scatter + all-gather), reduce-scatter,
//! all-gather, broadcast, on `&mut [Vec<f32>]` ([`host`]: one buffer per rank, no GPU needed);
//! every transfer goes into a [`Ledger`]. The runtime's workers stage their device buffers
//! themselves (download → [`crate::comm`] → upload), so this is the one collective stack.
//!
//! The ring: n elements split into d chunks `c_k = [k·n/d, (k+1)·n/d)` ([`chunk`]; floor
//! boundaries, so lengths differ by at most one and some are empty when n < d; ZeRO passes its
//! own 64-aligned bounds). Each round rank r's chunk travels to rank (r+1) % d, which adds it
//! (reduce-scatter) or copies it (all-gather) into its own copy. Which chunk moves when is fixed
//! by (rank, round), so every chunk is summed in the same order on every run: results are
//! bit-identical whatever the thread timing. The hops are zero-copy and pipelined per slice on
//! min(cores, d) workers (see `ring.rs`). Chunks sent, d = 4 (`cK` = chunk K):
//!
//! ```text
//!                    rank 0   rank 1   rank 2   rank 3
//! reduce-scatter     (round s: rank r sends c(r−s−1), receiver adds it to its own copy)
//!   round 0 sends      c3       c0       c1       c2
//!   round 1 sends      c2       c3       c0       c1
//!   round 2 sends      c1       c2       c3       c0
//!   owns, reduced      c0       c1       c2       c3     c0 = ((x1 + x2) + x3) + x0
//! all-gather         (round s: rank r sends c(r−s), receiver overwrites its copy)
//!   round 3 sends      c0       c1       c2       c3
//!   round 4 sends      c3       c0       c1       c2
//!   round 5 sends      c2       c3       c0       c1
//!   holds              c0..c3   c0..c3   c0..c3   c0..c3
//! ```
//!
//! Chunk c is summed around the ring starting after its owner: `x(c+1) + x(c+2) + … + x(c)`.
//! The naive twin sums `x0 + x1 + … + x(d−1)`; the two agree to rounding (bitwise for d ≤ 2).
//! With `average`, the sum is divided by d once, on the full sum (the ring divides each chunk
//! when its last addition is done, before the all-gather).
//!
//! Each rank sends `4·(2n − |c_r| − |c_(r+1)|)` bytes in a ring all-reduce: exactly
//! `2(d−1)/d·S` when d divides n ([`ring_all_reduce_bytes`]); the ledger records exactly that.

pub mod host;
mod ledger;
mod ring;

use std::time::Duration;

pub(crate) use ledger::Stamp;
pub use ledger::{
    chunk, ring_all_gather_rank_bytes, ring_all_reduce_bytes, ring_all_reduce_group_bytes,
    ring_all_reduce_rank_bytes, ring_reduce_scatter_rank_bytes, Entry, EntryKind, Ledger,
};
pub use ring::{even_bounds, rounds, Phases, Round};

use crate::error::{Error, Result};

/// Which all-reduce algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algo {
    /// Reduce-scatter + all-gather around a ring: 2(d−1)/d·S per rank.
    #[default]
    Ring,
    /// Gather to rank 0, sum in rank order, broadcast: the twin the ring is tested against.
    Naive,
    /// Gather, sum in a pairwise tree over ranks, broadcast: the layout-invariant reduction.
    Tree,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::Naive => "naive",
            Algo::Tree => "tree",
        }
    }
    /// "ring" or "naive".
    pub fn by_name(name: &str) -> Result<Algo> {
        match name.trim().to_ascii_lowercase().as_str() {
            "ring" => Ok(Algo::Ring),
            "naive" => Ok(Algo::Naive),
            "tree" => Ok(Algo::Tree),
            _ => Err(Error::Config(format!(
                "unknown all-reduce algorithm {name:?}: expected ring, naive or tree"
            ))),
        }
    }
}

/// Knobs of a collective call.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// Divide the sum by d (once, on the full sum): the mean instead of the sum.
    pub average: bool,
    /// Test hook: before every hop the ring's worker sleeps a random 0..=`jitter_us` µs
    /// (seeded by `seed`), with at least two workers and small slices, shuffling which worker
    /// runs what and when.
    pub jitter_us: u64,
    pub seed: u64,
    /// Test hook: `fault.rank` fails at the start of ring round `fault.round`.
    pub fault: Option<Fault>,
    /// Longest a rank may wait on a peer before failing. The zero-copy ring never waits on
    /// another worker (a slice's rounds run on one thread), so no collective waits today; the
    /// field stays for algorithms that exchange messages.
    pub recv_timeout: Duration,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            average: false,
            jitter_us: 0,
            seed: 0,
            fault: None,
            recv_timeout: Duration::from_secs(120),
        }
    }
}

impl Opts {
    /// Default options that average.
    pub fn mean() -> Self {
        Opts {
            average: true,
            ..Opts::default()
        }
    }
}

/// An injected ring failure (see [`Opts::fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub rank: usize,
    pub round: usize,
}

/// (d, n) of host buffers: at least one rank, all of one length.
fn check_bufs(name: &str, bufs: &[Vec<f32>]) -> Result<(usize, usize)> {
    let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
    check_lens(name, &lens)
}

fn check_lens(name: &str, lens: &[usize]) -> Result<(usize, usize)> {
    let Some(&n) = lens.first() else {
        return Err(Error::Config(format!(
            "{name}: empty group (a collective needs at least one rank)"
        )));
    };
    if let Some((r, &len)) = lens.iter().enumerate().find(|(_, &l)| l != n) {
        return Err(Error::Config(format!(
            "{name}: rank {r} has {len} elements but rank 0 has {n} (all ranks need equal lengths)"
        )));
    }
    Ok((lens.len(), n))
}

/// Checks `bounds` are d + 1 non-decreasing offsets from 0 to n.
pub(crate) fn check_bounds(what: &str, bounds: &[usize], d: usize, n: usize) -> Result<()> {
    let ok = bounds.len() == d + 1
        && bounds.first() == Some(&0)
        && bounds.last() == Some(&n)
        && bounds.windows(2).all(|w| w[0] <= w[1]);
    if ok {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{what}: chunk bounds {bounds:?} are not {} non-decreasing offsets from 0 to {n}",
        d + 1
    )))
}
