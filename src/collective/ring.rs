//! The ring itself, zero-copy: every hop of the ring schedule reads the chunk straight out of
//! the left neighbour's buffer and adds it into (reduce-scatter) or copies it over (all-gather)
//! the receiver's own copy. Nothing travels in a message, so no sent chunk is ever copied.
//!
//! Which chunk rank r receives in which round is a pure function of (rank, round) ([`rounds`]).
//! Chunk k is touched only by the hops that carry chunk k, one per round, so the ring is d
//! independent chains over disjoint elements; chunk k's chain, d = 4:
//!
//! ```text
//!   reduce-scatter                           all-gather
//!   round 0   x(k+2)[c_k] += x(k+1)[c_k]     round 3   x(k+1)[c_k] = x(k)[c_k]
//!   round 1   x(k+3)[c_k] += x(k+2)[c_k]     round 4   x(k+2)[c_k] = x(k+1)[c_k]
//!   round 2   x(k)[c_k]   += x(k+3)[c_k]     round 5   x(k+3)[c_k] = x(k+2)[c_k]
//! ```
//!
//! Running every chain in round order performs exactly the lock-step ring's additions, in its
//! order, whatever runs in between: the bits are fixed by the schedule, never by timing. Chains
//! need no order among themselves, nor do the elements of one chunk, so the ring runs pipelined,
//! like NCCL's slices: each chunk is cut into slices of ~[`SLICE_BYTES`] over all d ranks, and
//! one worker carries a slice through every round of its chain, [`BLOCK`] elements at a time
//! (the handshake between rounds is program order on that worker), so the d pieces of a block
//! stay in L1 from the first round to the last. Each rank's element is read from memory once
//! and written back once, where a lock-step ring streams every round through memory.
//!
//! ```text
//!   queue of (chunk, slice) items ──▶ worker 0 (calling thread) ─┐  each item: all rounds of
//!   (each owns &mut [f32], its     ──▶ worker 1 (scoped thread)  ─┤  its chain in order, one
//!    range of every rank's buffer) ──▶ … min(cores, d) workers    ─┘  L1-sized block at a time
//! ```
//!
//! Ownership does the synchronisation: an item holds the `&mut` pieces of its range of every
//! rank's buffer (cut once with `split_at_mut`) and moves whole through a mutex-guarded queue to
//! the one worker that runs it: safe Rust, no lock per round, no copy. Small rings run on the
//! calling thread alone; no thread outlives a call.
//!
//! Hooks: `Opts::jitter_us` sleeps before every hop of every item and forces at least two
//! workers and small items, shuffling which worker runs what and when; `Opts::fault` fails rank
//! `fault.rank` at the start of its round `fault.round` and stops every worker. No worker ever
//! waits on another (a slice's rounds run on one thread), so nothing can hang and there is
//! nothing for `Opts::recv_timeout` to time out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::ledger::{chunk, Entry, EntryKind, Stamp};
use super::Opts;
use crate::error::{Error, Result};
use crate::rng::Rng;

mod clock;
mod rounds;
use clock::Clock;
pub use rounds::{rounds, Phases, Round};

/// Target size of one slice (an item of the queue) over all ranks, d pieces of
/// `SLICE_BYTES / d`: long runs for the memory prefetchers, yet enough items to share out.
const SLICE_BYTES: usize = 2 << 20;
/// Elements per rank of the block a worker carries through all rounds at once: d · 512 B that
/// stay in L1 (measured best of 64…1024 on a 2-core host at 16 and 64 MiB).
const BLOCK: usize = 128;
/// Fewest elements per rank piece of a slice (no slicing into crumbs at large d).
const SLICE_MIN: usize = 2048;
/// Slice piece length under `Opts::jitter_us` (many items, so workers interleave).
const SLICE_JITTER: usize = 64;
/// Below this many elements over all ranks (n·d, 16 MiB) one thread runs the ring: the data
/// sits in the caches, and a thread spawn (tens of µs) costs more than a second core saves
/// (measured at 1 MiB, d = 2: 0.067 ms on two workers, 0.044 ms on one).
const PARALLEL_MIN: usize = 1 << 22;

/// One hop of a chunk's chain: in `round`, rank `to` adds (or copies) rank `from`'s piece.
#[derive(Clone, Copy, Debug)]
struct Hop {
    round: usize,
    from: usize,
    to: usize,
    add: bool,
}

/// A slice of chunk `chunk`: elements `start..start + len` of every rank, one piece per rank.
struct Item<'b> {
    chunk: usize,
    start: usize,
    pieces: Vec<&'b mut [f32]>,
}

/// A worker's failure; `primary = false` when it only saw another one fail.
pub(super) struct Failure {
    pub primary: bool,
    pub error: Error,
}

/// Everything the ring's workers share.
pub(super) struct Ring<'a> {
    pub phases: Phases,
    pub opts: &'a Opts,
    pub stamp: &'a Stamp<'a>,
    pub n: usize,
    pub d: usize,
    /// Chunk k is `bounds[k]..bounds[k + 1]` (d + 1 non-decreasing offsets from 0 to n):
    /// [`even_bounds`] for the usual floor split, or a caller's shard boundaries.
    pub bounds: Vec<usize>,
}

/// The d + 1 boundaries of [`chunk`]'s floor split of n elements.
pub fn even_bounds(n: usize, d: usize) -> Vec<usize> {
    (0..d).map(|k| chunk(n, d, k).start).chain([n]).collect()
}

/// Cores this process may use (asked once: the answer reads cgroup files).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Ring<'_> {
    fn chunk(&self, k: usize) -> std::ops::Range<usize> {
        self.bounds[k]..self.bounds[k + 1]
    }

    pub fn error(&self, rank: usize, what: &str, msg: String) -> Error {
        worker_error(self.stamp, rank, what, msg)
    }

    fn rounds_total(&self) -> usize {
        let steps = self.d - 1;
        if self.phases == Phases::Both {
            2 * steps
        } else {
            steps
        }
    }

    /// Chain of every chunk: its hops in round order (one per round).
    fn chains(&self) -> Vec<Vec<Hop>> {
        let d = self.d;
        let mut chains = vec![Vec::with_capacity(self.rounds_total()); d];
        for r in 0..d {
            for rd in rounds(r, d, self.phases) {
                chains[rd.recv].push(Hop {
                    round: rd.round,
                    from: (r + d - 1) % d,
                    to: r,
                    add: rd.add,
                });
            }
        }
        chains.iter_mut().for_each(|c| c.sort_by_key(|h| h.round));
        chains
    }

    /// Elements per rank piece of one slice.
    fn slice_len(&self) -> usize {
        if self.opts.jitter_us > 0 {
            SLICE_JITTER
        } else {
            (SLICE_BYTES / 4 / self.d).max(SLICE_MIN)
        }
    }

    /// Cuts every buffer into the ring's items: each non-empty chunk in slices of
    /// [`Self::slice_len`], each item holding its range of every rank.
    fn items<'b>(&self, bufs: &'b mut [Vec<f32>]) -> Vec<Item<'b>> {
        let step = self.slice_len();
        let mut items: Vec<Item<'b>> = Vec::new();
        let mut lens = Vec::new();
        for k in 0..self.d {
            let c = self.chunk(k);
            let mut start = c.start;
            while start < c.end {
                let len = step.min(c.end - start);
                items.push(Item {
                    chunk: k,
                    start,
                    pieces: Vec::with_capacity(self.d),
                });
                lens.push(len);
                start += len;
            }
        }
        // The items tile 0..n in order (chunks are contiguous, empty ones have no items).
        for buf in bufs.iter_mut() {
            let mut rest: &'b mut [f32] = buf.as_mut_slice();
            for (item, &len) in items.iter_mut().zip(&lens) {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
                item.pieces.push(piece);
                rest = tail;
            }
        }
        items
    }

    /// Runs the ring over host buffers (one per rank, `d ≥ 2`, each of n elements) and returns
    /// its hop entries, unsorted.
    pub fn run(&self, bufs: &mut [Vec<f32>]) -> Result<Vec<Entry>> {
        let (n, d) = (self.n, self.d);
        if let Some((r, b)) = bufs.iter().enumerate().find(|(_, b)| b.len() != n) {
            let msg = format!("buffer has {} elements, expected {n}", b.len());
            return Err(self.error(r, "stage in", msg));
        }
        let chains = self.chains();
        let clock = Clock::new(d, self.rounds_total());
        let items = self.items(bufs);
        let workers = if self.opts.jitter_us > 0 {
            cores().max(2).min(d).min(items.len()).max(1)
        } else if n * d < PARALLEL_MIN {
            1
        } else {
            cores().min(d).min(items.len()).max(1)
        };
        let queue = Mutex::new(items.into_iter());
        let abort = AtomicBool::new(false);
        let work = || self.worker(&queue, &chains, &clock, &abort);
        let results: Vec<std::result::Result<(), Failure>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
            let mut out = vec![work()];
            out.extend(handles.into_iter().enumerate().map(|(i, h)| {
                h.join().unwrap_or_else(|_| {
                    Err(Failure {
                        primary: true,
                        error: self.error(0, "thread", format!("ring worker {} panicked", i + 1)),
                    })
                })
            }));
            out
        });
        first_failure(results)?;
        // A fault in a round whose chunk is empty (n < d) meets no slice: it fails here.
        if let Some(f) = self.opts.fault {
            if f.rank < d && f.round < self.rounds_total() {
                return Err(self.fault_error(f.rank, f.round));
            }
        }
        let mut entries = Vec::with_capacity(d * self.rounds_total());
        for r in 0..d {
            let left = (r + d - 1) % d;
            for rd in rounds(r, d, self.phases) {
                let kind = EntryKind::Hop {
                    to: r,
                    round: rd.round,
                };
                let bytes = 4 * self.chunk(rd.recv).len() as u64;
                let wall = clock.wall(rd.recv, rd.round);
                entries.push(self.stamp.entry(left, kind, bytes, wall));
            }
        }
        Ok(entries)
    }

    fn fault_error(&self, rank: usize, round: usize) -> Error {
        self.error(rank, &format!("round {round}"), "injected fault".into())
    }

    /// A worker: takes items off the queue until it is empty or another worker failed.
    fn worker(
        &self,
        queue: &Mutex<std::vec::IntoIter<Item>>,
        chains: &[Vec<Hop>],
        clock: &Clock,
        abort: &AtomicBool,
    ) -> std::result::Result<(), Failure> {
        loop {
            if abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            // A worker that panicked while holding the queue leaves it consistent (one `next`).
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some(mut item) = next else {
                return Ok(());
            };
            let chain = &chains[item.chunk];
            if let Err(e) = self.carry(&mut item, chain, clock, abort) {
                abort.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
    }

    /// Runs one item's chain: every round of its chunk, in order, on this thread — block by
    /// block of [`BLOCK`] elements, so the d pieces of a block stay in L1 through all rounds
    /// while the item as a whole streams through memory in long runs.
    fn carry(
        &self,
        item: &mut Item,
        chain: &[Hop],
        clock: &Clock,
        abort: &AtomicBool,
    ) -> std::result::Result<(), Failure> {
        let d = self.d;
        // last reduce-scatter round: chunk k's full sum lands on rank k
        let rs_last = d.checked_sub(2);
        let ready = clock.now();
        let len = item.pieces.first().map_or(0, |p| p.len());
        for lo in (0..len).step_by(BLOCK) {
            let hi = (lo + BLOCK).min(len);
            for hop in chain {
                if lo == 0 {
                    self.before_hop(hop, item.start, abort)?;
                }
                let (own, left) = pair(&mut item.pieces, hop.to, hop.from);
                let (own, left) = (&mut own[lo..hi], &left[lo..hi]);
                if hop.add {
                    // The running sum comes from the left; this rank's value is added to it
                    // last (x + acc and acc + x are the same bits: addition commutes).
                    own.iter_mut().zip(left).for_each(|(x, acc)| *x += *acc);
                    if Some(hop.round) == rs_last && self.opts.average {
                        // The full sum of chunk `to` is here: divide once.
                        let dd = d as f32;
                        own.iter_mut().for_each(|x| *x /= dd);
                    }
                } else {
                    own.copy_from_slice(left);
                }
            }
        }
        let taken = clock.now();
        for hop in chain {
            clock.record(item.chunk, hop.round, ready, taken);
        }
        Ok(())
    }

    /// The hooks, before `hop` of the item at `start`: the injected fault, then the jitter.
    fn before_hop(
        &self,
        hop: &Hop,
        start: usize,
        abort: &AtomicBool,
    ) -> std::result::Result<(), Failure> {
        let opts = self.opts;
        if opts
            .fault
            .is_some_and(|f| f.rank == hop.to && f.round == hop.round)
        {
            return Err(Failure {
                primary: true,
                error: self.fault_error(hop.to, hop.round),
            });
        }
        if opts.jitter_us > 0 && !abort.load(Ordering::Relaxed) {
            let seed = (opts.seed ^ (hop.to as u64).wrapping_mul(0x0100_0000_01B3))
                .wrapping_add((hop.round as u64) << 32 ^ start as u64);
            let us = Rng::new(seed).below(opts.jitter_us + 1);
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
        Ok(())
    }
}

/// Mutable `pieces[a]` and shared `pieces[b]`, a ≠ b.
fn pair<'p>(pieces: &'p mut [&mut [f32]], a: usize, b: usize) -> (&'p mut [f32], &'p [f32]) {
    if a < b {
        let (lo, hi) = pieces.split_at_mut(b);
        (&mut *lo[a], &*hi[0])
    } else {
        let (lo, hi) = pieces.split_at_mut(a);
        (&mut *hi[0], &*lo[b])
    }
}

/// The error of rank `rank` of a collective: names the collective, what failed and the step.
pub(super) fn worker_error(stamp: &Stamp, rank: usize, what: &str, msg: String) -> Error {
    Error::Worker {
        device: rank,
        stage: 0,
        action: format!("{} {what}", stamp.collective),
        step: stamp.step,
        msg,
    }
}

/// All results, or the error of the first rank that failed on its own (else the first error).
pub(super) fn first_failure<T>(results: Vec<std::result::Result<T, Failure>>) -> Result<Vec<T>> {
    let mut secondary = None;
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(t) => out.push(t),
            Err(f) if f.primary => return Err(f.error),
            Err(f) => {
                secondary.get_or_insert(f.error);
            }
        }
    }
    match secondary {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
