//! The ring itself: one OS thread per rank, each passing one chunk per round to its right-hand
//! neighbour over a bounded channel and reducing the chunk it receives into its own buffer.
//!
//! ```text
//!   rank 0 ──▶ rank 1 ──▶ rank 2 ──▶ … ──▶ rank d−1
//!     ▲                                      │        channel k carries rank k → rank (k+1) % d
//!     └──────────────────────────────────────┘        (capacity 1, send then receive each round)
//! ```
//!
//! Which chunk travels in which round is a pure function of (rank, round) ([`rounds`]); a
//! received chunk is checked against it, so arrival time can never change what is added where.
//! A rank that fails drops its channels; its neighbours see the disconnect, stop, and drop
//! theirs, so every thread ends; the caller reports the first rank that failed on its own.

use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use super::ledger::{chunk, Entry, Kind, Stamp};
use super::Opts;
use crate::error::{Error, Result};
use crate::rng::Rng;

/// Which halves of the all-reduce a ring runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phases {
    ReduceScatter,
    AllGather,
    Both,
}

/// One round of one rank: send chunk `send` right, receive chunk `recv` from the left and add
/// it into the own copy (`add`, reduce-scatter) or copy it (all-gather).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Round {
    pub round: usize,
    pub send: usize,
    pub recv: usize,
    pub add: bool,
}

/// The rounds rank `r` of `d` runs. Reduce-scatter round s: send `(r−s−1) mod d`, receive and
/// add `(r−s−2) mod d`; all-gather round s: send `(r−s) mod d`, receive `(r−s−1) mod d`.
pub(super) fn rounds(r: usize, d: usize, phases: Phases) -> Vec<Round> {
    let m = |x: isize| x.rem_euclid(d as isize) as usize;
    let r = r as isize;
    let steps = d.saturating_sub(1);
    let mut out = Vec::with_capacity(2 * steps);
    if phases != Phases::AllGather {
        for s in 0..steps {
            let si = s as isize;
            out.push(Round {
                round: s,
                send: m(r - si - 1),
                recv: m(r - si - 2),
                add: true,
            });
        }
    }
    if phases != Phases::ReduceScatter {
        let base = if phases == Phases::Both { steps } else { 0 };
        for s in 0..steps {
            let si = s as isize;
            out.push(Round {
                round: base + s,
                send: m(r - si),
                recv: m(r - si - 1),
                add: false,
            });
        }
    }
    out
}

/// One chunk in flight.
/// One sender and one receiver per rank.
type Lanes<T> = (Vec<Sender<T>>, Vec<Receiver<T>>);

struct Msg {
    round: usize,
    chunk: usize,
    data: Vec<f32>,
    sent: Instant,
}

/// A worker's failure; `primary = false` when it only saw a peer disappear.
pub(super) struct Failure {
    pub primary: bool,
    pub error: Error,
}

/// Runs on a rank's own thread before the ring (fill the buffer; device: download) and after it
/// (device: upload); returns the ledger entries it made.
pub(super) type StageIn<'a> = dyn Fn(usize, &mut Vec<f32>) -> Result<Vec<Entry>> + Sync + 'a;
pub(super) type StageOut<'a> = dyn Fn(usize, &[f32]) -> Result<Vec<Entry>> + Sync + 'a;

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
pub(super) fn even_bounds(n: usize, d: usize) -> Vec<usize> {
    (0..d).map(|k| chunk(n, d, k).start).chain([n]).collect()
}

impl Ring<'_> {
    fn chunk(&self, k: usize) -> std::ops::Range<usize> {
        self.bounds[k]..self.bounds[k + 1]
    }

    pub fn error(&self, rank: usize, what: &str, msg: String) -> Error {
        worker_error(self.stamp, rank, what, msg)
    }

    /// Runs the ring over `bufs` (one per rank, `d ≥ 2`) and returns every entry, unsorted.
    pub fn run(
        &self,
        bufs: &mut [Vec<f32>],
        stage_in: &StageIn,
        stage_out: &StageOut,
    ) -> Result<Vec<Entry>> {
        let (txs, mut rxs): (Vec<Sender<Msg>>, Vec<Receiver<Msg>>) =
            (0..self.d).map(|_| bounded(1)).unzip();
        rxs.rotate_right(1); // rxs[r] now receives from rank r−1
                             // spent chunk buffers travel back (rank r+1 → r) to be refilled: no allocation per round
        let (mut back_txs, back_rxs): Lanes<Vec<f32>> = (0..self.d).map(|_| bounded(2)).unzip();
        back_txs.rotate_right(1); // back_txs[r] returns to rank r−1, whose chunks r receives
        let results: Vec<std::result::Result<Vec<Entry>, Failure>> = std::thread::scope(|scope| {
            let handles: Vec<_> = bufs
                .iter_mut()
                .zip(txs)
                .zip(rxs)
                .zip(back_txs.into_iter().zip(back_rxs))
                .enumerate()
                .map(|(r, (((buf, tx), rx), back))| {
                    scope.spawn(move || self.worker(r, buf, (tx, rx), back, stage_in, stage_out))
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| {
                    h.join().unwrap_or_else(|_| {
                        Err(Failure {
                            primary: true,
                            error: self.error(r, "thread", "worker thread panicked".into()),
                        })
                    })
                })
                .collect()
        });
        Ok(first_failure(results)?.into_iter().flatten().collect())
    }

    /// Rank `r`: `(tx, rx)` carry chunks to the right / from the left; `back` returns spent
    /// buffers to the left neighbour and receives this rank's own spent ones from the right.
    fn worker(
        &self,
        r: usize,
        buf: &mut Vec<f32>,
        (tx, rx): (Sender<Msg>, Receiver<Msg>),
        (back_tx, back_rx): (Sender<Vec<f32>>, Receiver<Vec<f32>>),
        stage_in: &StageIn,
        stage_out: &StageOut,
    ) -> std::result::Result<Vec<Entry>, Failure> {
        let fail = |primary: bool, what: &str, msg: String| Failure {
            primary,
            error: self.error(r, what, msg),
        };
        let (n, d) = (self.n, self.d);
        let mut entries = stage_in(r, buf).map_err(|e| fail(true, "stage in", e.to_string()))?;
        if buf.len() != n {
            let msg = format!("buffer has {} elements, expected {n}", buf.len());
            return Err(fail(true, "stage in", msg));
        }
        let mut rng = Rng::new(self.opts.seed ^ (r as u64).wrapping_mul(0x0100_0000_01B3));
        let mut jitter = || {
            if self.opts.jitter_us > 0 {
                let us = rng.below(self.opts.jitter_us + 1);
                std::thread::sleep(std::time::Duration::from_micros(us));
            }
        };
        let left = (r + d - 1) % d;
        let rs_last = d - 2; // last reduce-scatter round
        for rd in rounds(r, d, self.phases) {
            let what = format!("round {}", rd.round);
            if self
                .opts
                .fault
                .is_some_and(|f| f.rank == r && f.round == rd.round)
            {
                return Err(fail(true, &what, "injected fault".into()));
            }
            jitter();
            let mut data = back_rx.try_recv().unwrap_or_default();
            data.clear();
            data.extend_from_slice(&buf[self.chunk(rd.send)]);
            let msg = Msg {
                round: rd.round,
                chunk: rd.send,
                data,
                sent: Instant::now(),
            };
            tx.send(msg).map_err(|_| {
                let msg = format!("rank {} left the ring", (r + 1) % d);
                fail(false, &what, msg)
            })?;
            jitter();
            let got = match rx.recv_timeout(self.opts.recv_timeout) {
                Ok(m) => m,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(fail(false, &what, format!("rank {left} left the ring")));
                }
                Err(RecvTimeoutError::Timeout) => {
                    let msg = format!("no chunk from rank {left} in {:?}", self.opts.recv_timeout);
                    return Err(fail(true, &what, msg));
                }
            };
            let wall = got.sent.elapsed().as_secs_f64();
            let range = self.chunk(rd.recv);
            if got.round != rd.round || got.chunk != rd.recv || got.data.len() != range.len() {
                let msg = format!(
                    "expected chunk {} ({} elements) of round {}, got chunk {} ({}) of round {}",
                    rd.recv,
                    range.len(),
                    rd.round,
                    got.chunk,
                    got.data.len(),
                    got.round
                );
                return Err(fail(true, &what, msg));
            }
            let own = &mut buf[range];
            if rd.add {
                // The running sum arrives from the left; this rank's value is added to it last
                // (x + acc and acc + x are the same bits: addition commutes).
                for (x, acc) in own.iter_mut().zip(&got.data) {
                    *x += *acc;
                }
                if rd.round == rs_last && self.opts.average {
                    // The full sum of chunk r is here: divide once.
                    let dd = d as f32;
                    own.iter_mut().for_each(|x| *x /= dd);
                }
            } else {
                own.copy_from_slice(&got.data);
            }
            let kind = Kind::Hop {
                to: r,
                round: rd.round,
            };
            let bytes = 4 * got.data.len() as u64;
            entries.push(self.stamp.entry(left, kind, bytes, wall));
            // best effort: a full or closed return channel just drops the buffer
            let _ = back_tx.try_send(got.data);
        }
        drop(tx);
        let out = stage_out(r, buf).map_err(|e| fail(true, "stage out", e.to_string()))?;
        entries.extend(out);
        Ok(entries)
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

/// Runs `f(rank)` on one scoped thread per rank; errors name the rank.
pub(super) fn per_rank<T: Send>(
    d: usize,
    stamp: &Stamp,
    what: &str,
    f: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let f = &f;
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..d).map(|r| scope.spawn(move || f(r))).collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| {
                let msg = match h.join() {
                    Ok(Ok(t)) => return Ok(t),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "worker thread panicked".to_string(),
                };
                Err(Failure {
                    primary: true,
                    error: worker_error(stamp, r, what, msg),
                })
            })
            .collect()
    });
    first_failure(results)
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
