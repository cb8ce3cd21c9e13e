//! The point-to-point side of [`MpiWire`]: the lanes as MPI tags, nonblocking sends kept
//! alive until MPI is done with them (their buffers reused), abort notices, and the polling
//! wait every receive and every native collective goes through.

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

use ::mpi::datatype::Equivalence;
use ::mpi::ffi;
use ::mpi::point_to_point::{MatchedReceiveVec, Source};
use ::mpi::raw::{AsRaw, AsRawMut};
use ::mpi::topology::Communicator as _;
use ::mpi::Tag as MpiTag;

use super::{count, MpiWire, SimpleCommunicator};
use crate::comm::p2p::{Lane, Wire};
use crate::comm::wait::late;
use crate::error::{Error, Result};

/// MPI tags of the lanes: each is in order between two ranks, and they never mix.
const COLL: MpiTag = 1;
const MSGS: MpiTag = 2;
pub(super) const ABORT: MpiTag = 3;

fn lane_tag(lane: Lane) -> MpiTag {
    match lane {
        Lane::Coll => COLL,
        Lane::Msgs => MSGS,
    }
}

/// How long a dropped communicator lets its sends in flight finish before leaving them.
const DROP_GRACE: Duration = Duration::from_secs(2);

/// The raw MPI state of one rank: the group's communicator and the sends in flight.
pub(super) struct Handles {
    pub(super) comm: SimpleCommunicator,
    /// Nonblocking sends not yet completed, each with the bytes MPI reads from: a send's
    /// buffer must live, unmoved, until `MPI_Test` says it is done.
    pub(super) sending: RefCell<Vec<(ffi::MPI_Request, Vec<u8>)>>,
    /// Buffers of finished messages, reused for the next ones (a fresh large allocation
    /// faults in every page).
    pub(super) spare: RefCell<Vec<Vec<u8>>>,
}

// SAFETY: the handles are raw pointers into the MPI library, which [`init`] starts with
// `MPI_THREAD_MULTIPLE`, so any thread may call MPI with them. A communicator is not `Sync`:
// one thread at a time uses it (moving it to a worker thread is what `Send` allows).
unsafe impl Send for Handles {}

/// Whether the nonblocking operation `req` is complete (then MPI has freed it).
fn done(req: &mut ffi::MPI_Request) -> bool {
    let mut flag: c_int = 0;
    // SAFETY: `req` is a live request (or MPI_REQUEST_NULL, which tests as done). MPI errors
    // abort the job (the default MPI_ERRORS_ARE_FATAL), so the return code carries nothing.
    unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    flag != 0
}

impl Drop for Handles {
    fn drop(&mut self) {
        // A live peer takes the last messages within moments; a send still in flight after
        // that keeps its bytes for good, since MPI may yet read them.
        let sending = self.sending.get_mut();
        let until = Instant::now() + DROP_GRACE;
        loop {
            sending.retain_mut(|(req, _)| !done(req));
            if sending.is_empty() || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for (_, bytes) in sending.drain(..) {
            std::mem::forget(bytes);
        }
    }
}

impl MpiWire {
    fn peer(&self, q: usize) -> Result<c_int> {
        if q < self.size && q != self.rank {
            return count(q, "rank");
        }
        Err(Error::Config(format!(
            "rank {} has no peer {q} in this group of {}",
            self.rank, self.size
        )))
    }

    fn stop_reason(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    /// Starts sending `bytes` to rank `to` with `tag`; the bytes stay in `sending` until done.
    pub(super) fn isend(&self, to: c_int, tag: MpiTag, bytes: Vec<u8>) -> Result<()> {
        let n = count(bytes.len(), "a message")?;
        // SAFETY: MPI reads `n` bytes at the pointer until the send completes; the Vec is moved
        // into `sending` (its heap block stays put) and kept there until `done` says so.
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            ffi::MPI_Isend(
                bytes.as_ptr().cast(),
                n,
                u8::equivalent_datatype().as_raw(),
                to,
                tag,
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        self.mpi.sending.borrow_mut().push((req, bytes));
        Ok(())
    }

    /// Forgets the sends that are done, keeping their buffers for reuse.
    fn reap(&self) {
        let mut sending = self.mpi.sending.borrow_mut();
        let mut i = 0;
        while i < sending.len() {
            if done(&mut sending[i].0) {
                let (_, bytes) = sending.swap_remove(i);
                self.keep(bytes);
            } else {
                i += 1;
            }
        }
    }

    /// Keeps `bytes` for a later message (a few, the largest).
    fn keep(&self, mut bytes: Vec<u8>) {
        const KEEP: usize = 4;
        bytes.clear();
        let mut spare = self.mpi.spare.borrow_mut();
        spare.push(bytes);
        if spare.len() > KEEP {
            spare.sort_by_key(|b| std::cmp::Reverse(b.capacity()));
            spare.truncate(KEEP);
        }
    }

    /// A spare buffer of at least `len` bytes, or a new one.
    fn spare(&self, len: usize) -> Vec<u8> {
        let mut spare = self.mpi.spare.borrow_mut();
        match spare.iter().position(|b| b.capacity() >= len) {
            Some(i) => spare.swap_remove(i),
            None => Vec::with_capacity(len),
        }
    }

    /// Reads every abort notice that has arrived; the first reason is kept.
    fn read_notices(&self) {
        let comm = &self.mpi.comm;
        while let Some(m) = comm.any_process().immediate_matched_probe_with_tag(ABORT) {
            let (why, _) = m.matched_receive_vec::<u8>();
            let why = String::from_utf8_lossy(&why).into_owned();
            self.stopped.borrow_mut().get_or_insert(why);
        }
    }

    /// Polls `ready` until it gives a value, the group stops, or the timeout passes.
    fn wait<T>(
        &self,
        what: &dyn Fn() -> String,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        loop {
            if let Some(why) = self.stop_reason() {
                return Err(Error::Aborted(format!("{}: {why}", what())));
            }
            if let Some(v) = ready() {
                return Ok(v);
            }
            self.read_notices();
            self.reap();
            if self.stop_reason().is_some() {
                continue;
            }
            if start.elapsed() >= self.timeout {
                return Err(late(&what(), self.timeout));
            }
            // MPI advances a transfer only while it is polled: poll (yielding the core to
            // runnable threads) for the first 50 ms of a wait — a transfer in flight is not
            // throttled — then nap 100 µs between polls, so a long idle wait costs little CPU
            if start.elapsed() < Duration::from_millis(50) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// Waits for the nonblocking collective `req` over the buffers `keep` and gives them back.
    /// If it never completes MPI may still write into them, so they are leaked (the group is
    /// stopped then anyway).
    pub(super) fn settle<T>(&self, mut req: ffi::MPI_Request, keep: T, call: &str) -> Result<T> {
        let what = || format!("rank {} in {call}", self.rank);
        match self.wait(&what, || done(&mut req).then_some(())) {
            Ok(()) => Ok(keep),
            Err(e) => {
                std::mem::forget(keep);
                Err(e)
            }
        }
    }

    /// Before a native collective: fail at once if the group has stopped.
    pub(super) fn check_running(&self, call: &str) -> Result<()> {
        self.read_notices();
        match self.stop_reason() {
            Some(why) => Err(Error::Aborted(format!(
                "rank {} in {call}: {why}",
                self.rank
            ))),
            None => Ok(()),
        }
    }
}

impl Wire for MpiWire {
    fn put(&mut self, lane: Lane, to: usize, bytes: Vec<u8>) -> Result<()> {
        let q = self.peer(to)?;
        if let Some(why) = self.stop_reason() {
            let r = self.rank;
            return Err(Error::Aborted(format!(
                "rank {r} sending to rank {to}: {why}"
            )));
        }
        self.reap();
        self.isend(q, lane_tag(lane), bytes)
    }

    fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.spare(len)
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        self.keep(bytes);
    }

    fn take(&mut self, lane: Lane, from: usize) -> Result<Vec<u8>> {
        let q = self.peer(from)?;
        let (tag, r) = (lane_tag(lane), self.rank);
        let what = || format!("rank {r} waiting for rank {from}");
        let source = self.mpi.comm.process_at_rank(q);
        // the deadline covers the wait for the message to arrive; once matched, MPI moves a
        // message that is already sent
        let matched = self.wait(&what, || source.immediate_matched_probe_with_tag(tag))?;
        let (mut message, status) = matched;
        let len = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
        let n = count(len, "a message")?;
        // into a spare buffer: no fresh pages to fault in, nothing to clear first
        let mut bytes = self.spare(len);
        // SAFETY: MPI_Mrecv writes exactly the matched message's `len` bytes into the spare
        // capacity (at least `len`) before it returns, then `set_len` covers only those; it
        // consumes the message handle (sets it to MPI_MESSAGE_NULL, as its Drop expects).
        unsafe {
            ffi::MPI_Mrecv(
                bytes.spare_capacity_mut().as_mut_ptr().cast::<c_void>(),
                n,
                u8::equivalent_datatype().as_raw(),
                message.as_raw_mut(),
                ffi::RSMPI_STATUS_IGNORE,
            );
            bytes.set_len(len);
        }
        Ok(bytes)
    }
}
