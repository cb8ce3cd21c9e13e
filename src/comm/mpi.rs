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

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

use ::mpi::datatype::Equivalence;
use ::mpi::environment::Threading;
use ::mpi::ffi;
use ::mpi::point_to_point::{MatchedReceiveVec, Source};
use ::mpi::raw::{AsRaw, AsRawMut};
use ::mpi::topology::{Color, Communicator as _};
use ::mpi::Tag as MpiTag;

pub use ::mpi::environment::Universe;
pub use ::mpi::topology::SimpleCommunicator;

pub use super::launched_by_mpirun;
use super::p2p::{Lane, Wire};
use super::wait::late;
use super::wired::{Native, Transport, WireComm};
use super::GroupOptions;
use crate::error::{Error, Result};

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

/// MPI tags of the lanes: each is in order between two ranks, and they never mix.
const COLL: MpiTag = 1;
const MSGS: MpiTag = 2;
const ABORT: MpiTag = 3;

fn lane_tag(lane: Lane) -> MpiTag {
    match lane {
        Lane::Coll => COLL,
        Lane::Msgs => MSGS,
    }
}

/// How long a dropped communicator lets its sends in flight finish before leaving them.
const DROP_GRACE: Duration = Duration::from_secs(2);

/// The raw MPI state of one rank: the group's communicator and the sends in flight.
struct Handles {
    comm: SimpleCommunicator,
    /// Nonblocking sends not yet completed, each with the bytes MPI reads from: a send's
    /// buffer must live, unmoved, until `MPI_Test` says it is done.
    sending: RefCell<Vec<(ffi::MPI_Request, Vec<u8>)>>,
    /// Buffers of finished messages, reused for the next ones (a fresh large allocation
    /// faults in every page).
    spare: RefCell<Vec<Vec<u8>>>,
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
    fn isend(&self, to: c_int, tag: MpiTag, bytes: Vec<u8>) -> Result<()> {
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
    fn settle<T>(&self, mut req: ffi::MPI_Request, keep: T, call: &str) -> Result<T> {
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
    fn check_running(&self, call: &str) -> Result<()> {
        self.read_notices();
        match self.stop_reason() {
            Some(why) => Err(Error::Aborted(format!(
                "rank {} in {call}: {why}",
                self.rank
            ))),
            None => Ok(()),
        }
    }

    /// A nonblocking sum over the group of every rank's `send`, `out` floats of it landing on
    /// this rank, started by `start`.
    fn sum(&self, start: StartSum, send: Vec<f32>, out: usize, call: &str) -> Result<Vec<f32>> {
        let _ = count(send.len(), call)?;
        let n = count(out, call)?;
        let mut recv = vec![0f32; out];
        // SAFETY: MPI reads `send` and writes `n` floats of `recv` until the request completes;
        // `settle` keeps both alive until then (the Vecs move, their heap blocks do not).
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            start(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                n,
                f32::equivalent_datatype().as_raw(),
                ffi::RSMPI_SUM,
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        let (_, recv) = self.settle(req, (send, recv), call)?;
        Ok(recv)
    }

    /// MPI_Iallreduce (sum) over `buf`, then the division by the size.
    fn all_reduce(&self, buf: &mut Vec<f32>, average: bool) -> Result<()> {
        let n = buf.len();
        *buf = self.sum(
            ffi::MPI_Iallreduce,
            std::mem::take(buf),
            n,
            "mpi_all_reduce",
        )?;
        if average {
            mean(buf, self.size);
        }
        Ok(())
    }

    /// Reduce-scatter over arbitrary chunk bounds: every chunk padded with zeros to the
    /// longest, then MPI_Ireduce_scatter_block; rank r keeps its chunk's first |c_r| sums.
    fn reduce_scatter(&self, buf: &mut [f32], bounds: &[usize], average: bool) -> Result<()> {
        let (d, r) = (self.size, self.rank);
        let m = longest(bounds);
        let mut send = vec![0f32; d * m];
        for k in 0..d {
            let c = &buf[bounds[k]..bounds[k + 1]];
            send[k * m..k * m + c.len()].copy_from_slice(c);
        }
        let call = "mpi_reduce_scatter";
        let sum = self.sum(ffi::MPI_Ireduce_scatter_block, send, m, call)?;
        let own = &mut buf[bounds[r]..bounds[r + 1]];
        own.copy_from_slice(&sum[..own.len()]);
        if average {
            mean(own, d);
        }
        Ok(())
    }

    /// All-gather over arbitrary chunk bounds: each rank's chunk padded to the longest, then
    /// MPI_Iallgather; chunk k is copied back from its padded slot.
    fn all_gather(&self, buf: &mut [f32], bounds: &[usize]) -> Result<()> {
        let (d, r) = (self.size, self.rank);
        let m = longest(bounds);
        let mut send = vec![0f32; m];
        let own = &buf[bounds[r]..bounds[r + 1]];
        send[..own.len()].copy_from_slice(own);
        let _ = count(d * m, "mpi_all_gather")?;
        let mut recv = vec![0f32; d * m];
        // SAFETY: as in `sum`: MPI reads m floats of `send` and writes d·m of `recv`.
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            ffi::MPI_Iallgather(
                send.as_ptr().cast(),
                m as c_int,
                f32::equivalent_datatype().as_raw(),
                recv.as_mut_ptr().cast(),
                m as c_int,
                f32::equivalent_datatype().as_raw(),
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        let (_, all) = self.settle(req, (send, recv), "mpi_all_gather")?;
        for k in 0..d {
            let c = &mut buf[bounds[k]..bounds[k + 1]];
            let len = c.len();
            c.copy_from_slice(&all[k * m..k * m + len]);
        }
        Ok(())
    }

    /// MPI_Ibcast of the root's length, then of its floats into every rank's `buf`.
    fn broadcast(&self, buf: &mut Vec<f32>, root: usize) -> Result<()> {
        let root = root as c_int;
        let len = vec![buf.len() as u64];
        let (len,) = self.ibcast(len, root)?;
        if self.rank as c_int != root {
            buf.clear();
            buf.resize(len[0] as usize, 0.0);
        }
        let _ = count(buf.len(), "mpi_broadcast")?;
        let (got,) = self.ibcast(std::mem::take(buf), root)?;
        *buf = got;
        Ok(())
    }

    /// MPI_Ibcast of `data` (the root's is sent, the others' overwritten).
    fn ibcast<T: Equivalence>(&self, mut data: Vec<T>, root: c_int) -> Result<(Vec<T>,)> {
        // SAFETY: MPI reads (root) or writes (others) `data.len()` elements until the request
        // completes; `settle` keeps the Vec alive. The length fits: checked by the caller.
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            ffi::MPI_Ibcast(
                data.as_mut_ptr().cast(),
                data.len() as c_int,
                T::equivalent_datatype().as_raw(),
                root,
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        self.settle(req, (data,), "mpi_broadcast")
    }
}

/// `MPI_Iallreduce` or `MPI_Ireduce_scatter_block`, which take the same arguments: send
/// buffer, receive buffer, floats received, datatype, operation, communicator, request.
type StartSum = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    c_int,
    ffi::MPI_Datatype,
    ffi::MPI_Op,
    ffi::MPI_Comm,
    *mut ffi::MPI_Request,
) -> c_int;

/// The sum divided by the size, once (as the ring averages).
fn mean(xs: &mut [f32], d: usize) {
    let d = d as f32;
    xs.iter_mut().for_each(|x| *x /= d);
}

/// The longest chunk of `bounds`.
fn longest(bounds: &[usize]) -> usize {
    bounds.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
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

/// Initialises MPI for this process with `MPI_THREAD_MULTIPLE` (communicators move into
/// worker threads). Call once, first; keep the [`Universe`] until every communicator is
/// dropped (dropping it finalises MPI).
pub fn init() -> Result<Universe> {
    let Some((universe, level)) = ::mpi::initialize_with_threading(Threading::Multiple) else {
        return Err(Error::Config(
            "MPI is already initialised in this process: call comm::mpi::init once, at start-up"
                .into(),
        ));
    };
    if level < Threading::Multiple {
        return Err(Error::Config(format!(
            "the MPI library grants thread level {level:?}, but communicators move between \
             worker threads and need Multiple: use an MPI built with MPI_THREAD_MULTIPLE \
             (Open MPI: `ompi_info | grep -i thread`)"
        )));
    }
    Ok(universe)
}

/// This process's rank in `world` (= its global device id).
pub fn world_rank(world: &SimpleCommunicator) -> usize {
    world.rank() as usize
}

/// Processes in `world` (= devices of the run).
pub fn world_size(world: &SimpleCommunicator) -> usize {
    world.size() as usize
}

/// The name of the machine this process runs on (`MPI_Get_processor_name`: the hostname).
pub fn processor_name() -> Result<String> {
    ::mpi::environment::processor_name()
        .map_err(|e| Error::Config(format!("MPI's processor name is not UTF-8: {e}")))
}

/// The MPI library's version string (`MPI_Get_library_version`), for run records.
pub fn library_version() -> Result<String> {
    ::mpi::environment::library_version()
        .map(|v| v.trim_end_matches(['\0', '\n', ' ']).to_string())
        .map_err(|e| Error::Config(format!("MPI's library version is not UTF-8: {e}")))
}

/// This rank's communicator of the group `members` (world ranks in group-rank order), or
/// `None` when this rank is not a member. Collective over `world`: every world rank calls it,
/// for every group, in the same order.
pub fn mpi_group(
    world: &SimpleCommunicator,
    members: &[usize],
    opts: &GroupOptions,
    reduction: Reduction,
) -> Result<Option<MpiComm>> {
    mpi_groups(world, &[members.to_vec()], opts, reduction)
}

/// This rank's communicator of a family of disjoint groups made at once (one split of
/// `world`): e.g. every pipeline group, `groups[g]` listing group g's world ranks in
/// group-rank order. `None` when this rank is in none. Collective over `world` like
/// [`mpi_group`]; every rank checks the same arguments, so a bad family fails on all of them
/// before any waits.
pub fn mpi_groups(
    world: &SimpleCommunicator,
    groups: &[Vec<usize>],
    opts: &GroupOptions,
    reduction: Reduction,
) -> Result<Option<MpiComm>> {
    let n = world_size(world);
    // (group, position) of every world rank
    let mut place: Vec<Option<(usize, usize)>> = vec![None; n];
    for (g, members) in groups.iter().enumerate() {
        if members.is_empty() {
            return Err(Error::Config(format!("MPI group {g} has no ranks")));
        }
        for (pos, &m) in members.iter().enumerate() {
            let Some(slot) = place.get_mut(m) else {
                return Err(Error::Config(format!(
                    "MPI group {g} names world rank {m}, but the world has {n} ranks \
                     (start as many processes as devices: mpirun -n)"
                )));
            };
            if let Some((h, _)) = slot.replace((g, pos)) {
                return Err(Error::Config(format!(
                    "world rank {m} is in MPI groups {h} and {g}: groups made together must be \
                     disjoint"
                )));
            }
        }
    }
    let mine = place[world_rank(world)];
    let color = match mine {
        Some((g, _)) => Color::with_value(count(g, "group index")?),
        None => Color::undefined(),
    };
    let key = count(mine.map_or(0, |(_, pos)| pos), "group rank")?;
    let split = world.split_by_color_with_key(color, key);
    let (Some((g, pos)), Some(comm)) = (mine, split) else {
        return Ok(None);
    };
    let members = groups[g].clone();
    if comm.size() as usize != members.len() || comm.rank() as usize != pos {
        return Err(Error::Config(format!(
            "MPI split gave rank {} of {} for group {g} {members:?}, expected rank {pos}",
            comm.rank(),
            comm.size()
        )));
    }
    let wire = MpiWire {
        mpi: Handles {
            comm,
            sending: RefCell::new(Vec::new()),
            spare: RefCell::new(Vec::new()),
        },
        rank: pos,
        size: members.len(),
        timeout: opts.timeout,
        reduction,
        stopped: RefCell::new(None),
    };
    Ok(Some(WireComm::new(pos, members, opts.link, wire)))
}
