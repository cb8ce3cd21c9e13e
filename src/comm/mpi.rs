//! The MPI communicator (feature `mpi`): each device's worker in its own MPI process, one
//! [`MpiComm`] per group it belongs to (pipeline, tensor, data-parallel, world), each over a
//! sub-communicator of `MPI_COMM_WORLD` whose rank r is the group's device r. World ranks are
//! the global device ids.
//!
//! ```text
//!   mpirun -n 4 prog          world ranks 0..4 = devices 0..4
//!   mpi_groups(world, [[0, 1], [2, 3]], …)   ─▶ ranks 0, 1 get group 0, ranks 2, 3 group 1
//!   Reduction::Ordered   collectives = the loopback's ring / gather on MPI messages:
//!                        the in-process bits, exactly
//!   Reduction::Native    all-reduce, reduce-scatter, all-gather, broadcast = MPI's own
//!                        (sums in MPI's order: equal to rounding); p2p stays as above
//! ```
//!
//! Every message is a nonblocking send (the ring sends before it receives on every rank),
//! tagged by lane: collectives, tagged messages and abort notices never mix. Every wait —
//! a receive, a native collective — polls with short sleeps, reads abort notices from any peer
//! and gives up after the group's timeout, so no call waits forever: a peer that calls
//! [`Communicator::abort`](super::Communicator::abort) ends the others' waits at once with
//! [`Error::Aborted`] naming it and why.
//!
//! Start-up: [`init`] once per process (MPI with `MPI_THREAD_MULTIPLE`), then every world rank
//! builds every group, in the same order ([`mpi_group`], [`mpi_groups`]). Drop every
//! communicator before the [`Universe`] (which finalises MPI).
//!
//! Files: `wire` (the lanes as MPI tags, sends in flight, abort notices, the polling wait),
//! `native` (MPI's own collectives), `start` ([`init`], the world, group construction).

use std::cell::RefCell;
use std::os::raw::c_int;
use std::time::Duration;

pub use ::mpi::environment::Universe;
pub use ::mpi::topology::SimpleCommunicator;

pub use super::launched_by_mpirun;
use super::wired::{Native, Transport, WireComm};
use crate::error::{Error, Result};

mod native;
mod start;
mod wire;

pub use start::{
    init, library_version, mpi_group, mpi_groups, processor_name, world_rank, world_size,
};
use wire::{Handles, ABORT};

/// One rank of an MPI group.
pub type MpiComm = WireComm<MpiWire>;

/// How an [`MpiComm`] reduces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduction {
    /// The crate's own algorithms on MPI point-to-point messages: bit-identical to the
    /// in-process communicators for the same inputs and chunk bounds.
    #[default]
    Ordered,
    /// MPI's collectives (`MPI_Iallreduce`, …): the library's algorithms and summation order.
    Native,
}

impl Reduction {
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Ordered => "ordered",
            Reduction::Native => "native",
        }
    }

    /// "ordered" or "native".
    pub fn by_name(name: &str) -> Result<Reduction> {
        match name.trim().to_ascii_lowercase().as_str() {
            "ordered" => Ok(Reduction::Ordered),
            "native" => Ok(Reduction::Native),
            _ => Err(Error::Config(format!(
                "unknown MPI reduction {name:?}: expected ordered (the crate's ring, \
                 bit-identical to in-process runs) or native (MPI's own collectives)"
            ))),
        }
    }
}

/// The MPI transport of one rank of a group.
pub struct MpiWire {
    mpi: Handles,
    rank: usize,
    size: usize,
    timeout: Duration,
    reduction: Reduction,
    /// Why the group stopped (a peer's abort notice, or this rank's own abort): every call
    /// fails with it from then on.
    stopped: RefCell<Option<String>>,
}

/// A count MPI takes (a C int).
fn count(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Error::Config(format!(
            "{what}: {n} elements is more than one MPI message carries ({}); split the buffer",
            c_int::MAX
        ))
    })
}

impl Transport for MpiWire {
    fn abort(&self, why: String) {
        // best effort: a peer that is gone never reads its notice
        for q in (0..self.size).filter(|&q| q != self.rank) {
            let _ = self.isend(q as c_int, ABORT, why.clone().into_bytes());
        }
        self.stopped.borrow_mut().get_or_insert(why);
    }

    fn is_native(&self) -> bool {
        self.reduction == Reduction::Native
    }

    fn native(&mut self, op: Native<'_>, buf: &mut Vec<f32>) -> Result<()> {
        let call = match op {
            Native::AllReduce { .. } => "mpi_all_reduce",
            Native::ReduceScatter { .. } => "mpi_reduce_scatter",
            Native::AllGather { .. } => "mpi_all_gather",
            Native::Broadcast { .. } => "mpi_broadcast",
        };
        self.check_running(call)?;
        match op {
            Native::AllReduce { average } => self.all_reduce(buf, average),
            Native::ReduceScatter { bounds, average } => self.reduce_scatter(buf, bounds, average),
            Native::AllGather { bounds } => self.all_gather(buf, bounds),
            Native::Broadcast { root } => self.broadcast(buf, root),
        }
    }
}

impl WireComm<MpiWire> {
    /// How this communicator reduces.
    pub fn reduction(&self) -> Reduction {
        self.wire().reduction
    }
}
