//! A communicator over any transport that moves bytes between ranks ([`Wire`]): the loopback
//! double's channels, MPI's point-to-point messages. Everything above the transport lives
//! here once, so both give the same bits and the same ledgers:
//!
//! - the collectives of `p2p` (the ring, broadcast, the byte all-gather) on the wire's
//!   collective lane; the naive and tree all-reduces gather every buffer to rank 0, sum there
//!   with the host algorithm (the order the in-process communicator uses) and send the result
//!   back, so each rank's ledger records its gather hop (rank 0: the hops back);
//! - tagged messages on the message lane: a 17-byte header (flow, micro, stage) before the
//!   floats, and [`Early`] keeping another flow's message until its receive;
//! - ledger stamping: every call numbered, its hops in timing-independent order.
//!
//! A transport may instead run the float collectives its own way ([`Transport::native`], MPI's
//! reductions); their ledger entries are then the hops the ring would have sent over the same
//! chunk bounds, so the ledger's byte formulas hold whichever way the sum was made.

use std::time::Instant;

use super::early::Early;
use super::p2p::{self, from_bytes, to_bytes, Lane, Wire};
use super::{check_bounds, Communicator, Tag};
use crate::collective::{self, host, Algo, Entry, EntryKind, Ledger, Opts, Phases, Stamp};
use crate::error::{Error, Result};
use crate::link::Link;

/// Bytes before the floats of a tagged message: flow (1), micro (8), stage (8).
const HEADER: usize = 17;

/// A collective a transport runs natively on this rank's buffer (see [`Transport::native`]).
// Only the MPI transport reads the fields.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) enum Native<'a> {
    AllReduce { average: bool },
    ReduceScatter { bounds: &'a [usize], average: bool },
    AllGather { bounds: &'a [usize] },
    Broadcast { root: usize },
}

/// What a [`WireComm`] needs from its transport beyond moving bytes.
pub(crate) trait Transport: Wire + Send {
    /// This rank stops: every peer's waiting call fails now, with `why` (which names this rank).
    fn abort(&self, why: String);

    /// Whether the float collectives run through [`Transport::native`] rather than as the ring
    /// on put/take.
    fn is_native(&self) -> bool {
        false
    }

    /// Runs `op` on `buf` the transport's own way; asked only when [`Transport::is_native`].
    fn native(&mut self, op: Native<'_>, buf: &mut Vec<f32>) -> Result<()> {
        let _ = (op, buf);
        Err(Error::Config(
            "this transport has no native collectives".into(),
        ))
    }
}

/// One rank of a group whose collectives are built from point-to-point messages over the
/// transport `W` (or run natively by it). Made by [`super::loopback_group`] and, with the
/// `mpi` feature, `comm::mpi::mpi_group`.
pub struct WireComm<W> {
    rank: usize,
    devices: Vec<usize>,
    link: Link,
    wire: W,
    /// Messages of another flow that arrived before their receive.
    early: Early<Vec<u8>>,
    ledger: Ledger,
}

/// Names the call in an abort or timeout from the transport.
fn in_call<T>(call: &str, r: Result<T>) -> Result<T> {
    r.map_err(|e| match e {
        Error::Aborted(m) => Error::Aborted(format!("{call}: {m}")),
        e => e,
    })
}

impl<W> WireComm<W> {
    /// Rank `rank` of the group over the global devices `devices`, talking through `wire`.
    pub(crate) fn new(rank: usize, devices: Vec<usize>, link: Link, wire: W) -> WireComm<W> {
        let ledger = Ledger {
            group: devices.clone(),
            ..Ledger::new()
        };
        WireComm {
            rank,
            devices,
            link,
            wire,
            early: Early::default(),
            ledger,
        }
    }

    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn wire(&self) -> &W {
        &self.wire
    }

    fn finish(&mut self, mut entries: Vec<Entry>) {
        entries.sort_by_key(|e| e.order());
        self.ledger.calls += 1;
        self.ledger.entries.extend(entries);
    }
}

// The helpers' bound sits on each (private) method: on the block it would make a private
// trait bound a public item's.
impl<W> WireComm<W> {
    /// Naive or tree all-reduce: gather to rank 0, the host sum, send back.
    fn gathered(&mut self, buf: &mut Vec<f32>, algo: Algo, average: bool) -> Result<()>
    where
        W: Transport,
    {
        let name = if algo == Algo::Tree {
            "tree_all_reduce"
        } else {
            "naive_all_reduce"
        };
        let (mut l, link) = (self.ledger.next_call(), self.link);
        let stamp = l.begin(name, self.devices.len(), &link)?;
        let entries = in_call(name, self.gather_sum(buf, algo, average, &stamp))?;
        self.finish(entries);
        Ok(())
    }

    fn gather_sum(
        &mut self,
        buf: &mut Vec<f32>,
        algo: Algo,
        average: bool,
        stamp: &Stamp,
    ) -> Result<Vec<Entry>>
    where
        W: Transport,
    {
        let (d, r) = (self.devices.len(), self.rank);
        let bytes = 4 * buf.len() as u64;
        let t = Instant::now();
        let mut entries = Vec::new();
        if r != 0 {
            self.wire.put(Lane::Coll, 0, to_bytes(buf))?;
            entries.push(stamp.entry(r, EntryKind::Hop { to: 0, round: 0 }, bytes, 0.0));
            *buf = from_bytes(&self.wire.take(Lane::Coll, 0)?);
        } else if d > 1 {
            let mut bufs = vec![std::mem::take(buf)];
            for q in 1..d {
                bufs.push(from_bytes(&self.wire.take(Lane::Coll, q)?));
            }
            let opts = Opts {
                average,
                ..Opts::default()
            };
            let mut scratch = Ledger::new();
            match algo {
                Algo::Tree => host::tree_all_reduce(&mut bufs, &opts, &mut scratch, &self.link)?,
                _ => host::naive_all_reduce(&mut bufs, &opts, &mut scratch, &self.link)?,
            }
            for (q, b) in bufs.iter().enumerate().skip(1) {
                self.wire.put(Lane::Coll, q, to_bytes(b))?;
                let wall = t.elapsed().as_secs_f64();
                entries.push(stamp.entry(0, EntryKind::Hop { to: q, round: 1 }, bytes, wall));
            }
            *buf = bufs.swap_remove(0);
        }
        Ok(entries)
    }

    /// A collective the transport runs natively, recorded as the hops `hops(stamp, wall)`.
    fn native(
        &mut self,
        name: &'static str,
        op: Native<'_>,
        buf: &mut Vec<f32>,
        hops: impl FnOnce(&Stamp, f64) -> Vec<Entry>,
    ) -> Result<()>
    where
        W: Transport,
    {
        let (mut l, link) = (self.ledger.next_call(), self.link);
        let stamp = l.begin(name, self.devices.len(), &link)?;
        let t = Instant::now();
        in_call(name, self.wire.native(op, buf))?;
        let entries = hops(&stamp, t.elapsed().as_secs_f64());
        self.finish(entries);
        Ok(())
    }

    /// A float collective over `bounds`: the ring on the wire (as `names.0`), or natively
    /// (as `names.1`).
    fn chunked(
        &mut self,
        names: (&'static str, &'static str),
        op: Native<'_>,
        buf: &mut Vec<f32>,
        bounds: &[usize],
        phases: Phases,
        average: bool,
    ) -> Result<()>
    where
        W: Transport,
    {
        let (ring_name, native_name) = names;
        let (d, r) = (self.size(), self.rank);
        check_bounds(ring_name, bounds, d, buf.len())?;
        if self.wire.is_native() {
            return self.native(native_name, op, buf, |stamp, wall| {
                p2p::ring_hops(r, d, bounds, phases, stamp, wall)
            });
        }
        let (mut l, link) = (self.ledger.next_call(), self.link);
        let stamp = l.begin(ring_name, d, &link)?;
        let entries = if d > 1 {
            let ring = p2p::ring(&mut self.wire, r, d, buf, bounds, phases, average, &stamp);
            in_call(ring_name, ring)?
        } else {
            Vec::new()
        };
        self.finish(entries);
        Ok(())
    }
}

impl<W: Transport> Communicator for WireComm<W> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.devices.len()
    }

    fn devices(&self) -> &[usize] {
        &self.devices
    }

    fn all_reduce(
        &mut self,
        buf: &mut Vec<f32>,
        algo: Algo,
        bounds: Option<&[usize]>,
        average: bool,
    ) -> Result<()> {
        if algo != Algo::Ring && !self.wire.is_native() {
            return self.gathered(buf, algo, average);
        }
        let b = match bounds {
            Some(b) => b.to_vec(),
            None => collective::even_bounds(buf.len(), self.size()),
        };
        self.chunked(
            ("ring_all_reduce", "mpi_all_reduce"),
            Native::AllReduce { average },
            buf,
            &b,
            Phases::Both,
            average,
        )
    }

    fn reduce_scatter(
        &mut self,
        buf: &mut Vec<f32>,
        bounds: &[usize],
        average: bool,
    ) -> Result<()> {
        self.chunked(
            ("ring_reduce_scatter", "mpi_reduce_scatter"),
            Native::ReduceScatter { bounds, average },
            buf,
            bounds,
            Phases::ReduceScatter,
            average,
        )
    }

    fn all_gather(&mut self, buf: &mut Vec<f32>, bounds: &[usize]) -> Result<()> {
        self.chunked(
            ("ring_all_gather", "mpi_all_gather"),
            Native::AllGather { bounds },
            buf,
            bounds,
            Phases::AllGather,
            false,
        )
    }

    fn broadcast(&mut self, buf: &mut Vec<f32>, root: usize) -> Result<()> {
        let (d, r) = (self.size(), self.rank);
        crate::collective::host::check_root("broadcast", root, d)?;
        if self.wire.is_native() {
            let bytes = 4 * buf.len() as u64;
            return self.native(
                "mpi_broadcast",
                Native::Broadcast { root },
                buf,
                |stamp, wall| {
                    // what `p2p::broadcast` records: the root's hop to every other rank
                    let peers: Vec<usize> = (0..d).filter(|&q| q != root && r == root).collect();
                    let each = wall / peers.len().max(1) as f64;
                    let hop = |to| stamp.entry(r, EntryKind::Hop { to, round: 0 }, bytes, each);
                    peers.into_iter().map(hop).collect()
                },
            );
        }
        let mut l = self.ledger.next_call();
        let stamp = l.begin("broadcast", d, &self.link)?;
        let sent = p2p::broadcast(&mut self.wire, r, d, buf, root, &stamp);
        let entries = in_call("broadcast", sent)?;
        self.finish(entries);
        Ok(())
    }

    fn all_gather_bytes(&mut self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let (d, r) = (self.size(), self.rank);
        let all = p2p::all_gather_bytes(&mut self.wire, r, d, mine);
        let out = in_call("all_gather_bytes", all)?;
        self.ledger.calls += 1;
        Ok(out)
    }

    fn send(&mut self, to: usize, tag: Tag, data: Vec<f32>) -> Result<()> {
        let t = Instant::now();
        let mut msg = Vec::with_capacity(HEADER + 4 * data.len());
        msg.push(tag.flow);
        msg.extend((tag.micro as u64).to_le_bytes());
        msg.extend((tag.stage as u64).to_le_bytes());
        msg.extend(to_bytes(&data));
        in_call(&format!("send {tag:?}"), self.wire.put(Lane::Msgs, to, msg))?;
        let (rank, d, secs) = (self.rank, self.size(), t.elapsed().as_secs_f64());
        let bytes = 4 * data.len() as u64;
        self.ledger
            .record_send(rank, to, d, bytes, secs, &self.link)
    }

    fn recv(&mut self, from: usize, tag: Tag) -> Result<Vec<f32>> {
        let (rank, wire) = (self.rank, &mut self.wire);
        let msg = self.early.take(rank, from, tag, || {
            let msg = wire.take(Lane::Msgs, from)?;
            if msg.len() < HEADER {
                return Err(Error::Config(format!(
                    "rank {rank} got a {}-byte message from rank {from}: too short",
                    msg.len()
                )));
            }
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&msg[i..i + 8]);
                u64::from_le_bytes(b) as usize
            };
            let got = Tag {
                flow: msg[0],
                micro: word(1),
                stage: word(9),
            };
            Ok((got, msg))
        });
        let msg = in_call(&format!("recv {tag:?}"), msg)?;
        Ok(from_bytes(&msg[HEADER..]))
    }

    fn abort(&self, why: &str) {
        self.wire.abort(format!(
            "rank {} (device {}) stopped: {why}",
            self.rank, self.devices[self.rank]
        ));
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }
}
