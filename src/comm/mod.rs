//! The communicator: one rank's handle on a process group. A device's worker owns only its
//! device and talks to other devices only through communicators (its data-, tensor- and
//! pipeline-parallel groups), so the same worker runs in a thread of this process or in a
//! process of its own: only the communicator differs.
//!
//! ```text
//!   worker (rank r of a group)                      implementations
//!   download ─▶ comm.all_reduce(&mut host) ─▶ upload    local     ranks are threads of this
//!               comm.reduce_scatter / all_gather                  process; rank 0 runs the
//!               comm.broadcast / all_gather_bytes                 host algorithms of
//!               comm.send(to, tag, data) / recv(from, tag)        `collective::host` on every
//!                                                                 rank's buffer (moved, not
//!                                                                 copied), channels for p2p
//!                                                       loopback  every message serialised to
//!                                                                 bytes; collectives run the
//!                                                                 ring on point-to-point
//!                                                                 messages (`p2p`)
//!                                                       mpi       (feature `mpi`) a rank per
//!                                                                 MPI process: loopback's ring
//!                                                                 on MPI messages, or MPI's own
//!                                                                 reductions (`Reduction`)
//! ```
//!
//! All give the same bits (MPI in its ordered mode): the ring sums chunk c as
//! `x(c+1) + x(c+2) + … + x(c)` over the same chunk bounds, the tree and the naive sum in their
//! fixed orders. Host staging stays
//! spelled out in the worker (download → communicator → upload). Every call is recorded in the
//! rank's [`Ledger`]: the hops this rank sent (bytes, wall time, link-model time).
//!
//! No call waits forever: every wait ends when the group is aborted (a peer failed and said
//! so through [`Communicator::abort`]) or after the group's timeout, with
//! [`Error::Aborted`](crate::error::Error::Aborted) naming the peer and the call.

mod bf16;
mod early;
mod launcher;
pub mod local;
pub mod loopback;
#[cfg(feature = "mpi")]
pub mod mpi;
mod p2p;
mod wait;
mod wired;
mod words;

pub use bf16::{all_gather_bf16, all_reduce_bf16, reduce_scatter_bf16, tree_all_reduce_bf16};
pub use launcher::launched_by_mpirun;
pub use local::{local_group, GroupOptions, LocalComm};
pub use loopback::{loopback_group, LoopbackComm};
pub use wired::WireComm;
pub use words::{all_gather_words, all_reduce_words, first_non_finite, reduce_scatter_words};

use crate::collective::{Algo, Ledger};
use crate::error::Result;

/// What a point-to-point message carries: `flow` (0 activation, 1 gradient, others free for
/// callers), the microbatch and the stage that produced it. A receive names the tag it
/// expects: a message of another flow that arrives first is kept until its own receive
/// (flows between two ranks interleave), one of the same flow with another tag is an error
/// (each flow is in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    pub flow: u8,
    pub micro: usize,
    pub stage: usize,
}

/// One rank of a process group.
pub trait Communicator: Send {
    /// This rank's index in the group.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn size(&self) -> usize;
    /// Global device ids of the group's ranks, in rank order (for the ledger and messages).
    fn devices(&self) -> &[usize];

    /// Every rank's `buf` (equal lengths) ends holding the sum over ranks (divided by the size
    /// once, on the full sum, when `average`). `Algo::Ring` splits into chunks at `bounds`
    /// (d + 1 offsets from 0 to the length; `None`: the even split of `collective::chunk`).
    fn all_reduce(
        &mut self,
        buf: &mut Vec<f32>,
        algo: Algo,
        bounds: Option<&[usize]>,
        average: bool,
    ) -> Result<()>;

    /// Ring reduce-scatter: afterwards `buf[bounds[r]..bounds[r+1]]` on rank r holds the
    /// reduced chunk r; the rest of `buf` holds partial sums (unspecified).
    fn reduce_scatter(&mut self, buf: &mut Vec<f32>, bounds: &[usize], average: bool)
        -> Result<()>;

    /// Ring all-gather: chunk r of `buf` on rank r is its input; afterwards every rank's `buf`
    /// holds every chunk.
    fn all_gather(&mut self, buf: &mut Vec<f32>, bounds: &[usize]) -> Result<()>;

    /// Every rank's `buf` ends holding `root`'s.
    fn broadcast(&mut self, buf: &mut Vec<f32>, root: usize) -> Result<()>;

    /// Every rank's bytes, in rank order, on every rank (small records: gradient-norm parts,
    /// configuration hashes).
    fn all_gather_bytes(&mut self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>>;

    /// Sends `data` to rank `to`; blocks while the link to it holds its bound of messages.
    fn send(&mut self, to: usize, tag: Tag, data: Vec<f32>) -> Result<()>;

    /// The next message from rank `from`, which must carry `tag`.
    fn recv(&mut self, from: usize, tag: Tag) -> Result<Vec<f32>>;

    /// This rank is stopping on an error: every peer's waiting call fails now, naming `why`.
    fn abort(&self, why: &str);

    /// The calls this rank made, with the hops it sent.
    fn ledger(&self) -> &Ledger;
    fn ledger_mut(&mut self) -> &mut Ledger;
}

/// The d + 1 offsets of a group of `d` splitting `n` elements evenly (`collective::chunk`).
pub fn even(n: usize, d: usize) -> Vec<usize> {
    crate::collective::even_bounds(n, d)
}

pub(crate) use crate::collective::check_bounds;
