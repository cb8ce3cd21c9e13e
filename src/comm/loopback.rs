//! The loopback communicator: a test double for a communicator that crosses a process
//! boundary. Ranks are threads of this process, but nothing is shared between them: every
//! message is serialised to bytes and moved on a channel, and the collectives are built from
//! point-to-point messages (the ring of `p2p`, as an MPI implementation runs it). A worker
//! that trains to the same bits over this communicator as over [`super::local`] talks to its
//! peers only through the interface.
//!
//! The naive and tree all-reduces gather every buffer to rank 0, sum there with the host
//! algorithm (the same order as in process) and send the result back; each rank's ledger then
//! records its gather hop (rank 0: the hops back).

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::early::Early;
use super::p2p::{self, from_bytes, to_bytes, Wire};
use super::wait::Switch;
use super::{check_bounds, Communicator, GroupOptions, Tag};
use crate::collective::{self, host, Algo, Kind, Ledger, Opts, Phases};
use crate::error::{Error, Result};
use crate::link::Link;

/// Byte channels from this rank to every other and back; one set for collectives, one for
/// tagged messages, so the two never interleave.
struct Lanes {
    rank: usize,
    switch: Arc<Switch>,
    to: Vec<Option<Sender<Vec<u8>>>>,
    from: Vec<Option<Receiver<Vec<u8>>>>,
}

impl Wire for Lanes {
    fn put(&mut self, to: usize, bytes: Vec<u8>) -> Result<()> {
        let tx =
            self.to.get(to).and_then(Option::as_ref).ok_or_else(|| {
                Error::Config(format!("rank {} has no link to rank {to}", self.rank))
            })?;
        let r = self.rank;
        self.switch
            .send(tx, bytes, &|| format!("rank {r} sending to rank {to}"))
    }

    fn take(&mut self, from: usize) -> Result<Vec<u8>> {
        let rx = self
            .from
            .get(from)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::Config(format!("rank {} has no link from rank {from}", self.rank))
            })?;
        let r = self.rank;
        self.switch
            .recv(rx, &|| format!("rank {r} waiting for rank {from}"))
    }
}

/// One rank of a loopback group.
pub struct LoopbackComm {
    rank: usize,
    devices: Arc<Vec<usize>>,
    link: Link,
    switch: Arc<Switch>,
    coll: Lanes,
    msgs: Lanes,
    /// Messages of another flow that arrived before their receive.
    early: Early<Vec<u8>>,
    ledger: Ledger,
}

fn lanes(d: usize, switch: &Arc<Switch>) -> Vec<Lanes> {
    let mut to: Vec<Vec<Option<Sender<Vec<u8>>>>> = (0..d).map(|_| vec![None; d]).collect();
    let mut from: Vec<Vec<Option<Receiver<Vec<u8>>>>> = (0..d).map(|_| vec![None; d]).collect();
    for a in 0..d {
        for b in (0..d).filter(|&b| b != a) {
            let (s, r) = unbounded();
            to[a][b] = Some(s);
            from[b][a] = Some(r);
        }
    }
    to.into_iter()
        .zip(from)
        .enumerate()
        .map(|(rank, (to, from))| Lanes {
            rank,
            switch: switch.clone(),
            to,
            from,
        })
        .collect()
}

/// The ranks of a loopback group over the global devices `devices`.
pub fn loopback_group(devices: &[usize], opts: &GroupOptions) -> Vec<LoopbackComm> {
    let d = devices.len();
    let devices = Arc::new(devices.to_vec());
    let switch = Arc::new(Switch::new(opts.timeout));
    lanes(d, &switch)
        .into_iter()
        .zip(lanes(d, &switch))
        .enumerate()
        .map(|(rank, (coll, msgs))| {
            let mut ledger = Ledger::new();
            ledger.group = devices.to_vec();
            LoopbackComm {
                rank,
                devices: devices.clone(),
                link: opts.link,
                switch: switch.clone(),
                coll,
                msgs,
                early: Early::default(),
                ledger,
            }
        })
        .collect()
}

impl LoopbackComm {
    /// A ledger that numbers the next call.
    fn call_ledger(&self) -> Ledger {
        Ledger {
            step: self.ledger.step,
            group: self.devices.to_vec(),
            calls: self.ledger.calls,
            entries: Vec::new(),
        }
    }

    fn ring(
        &mut self,
        name: &'static str,
        buf: &mut [f32],
        bounds: &[usize],
        phases: Phases,
        average: bool,
    ) -> Result<()> {
        let d = self.size();
        let mut l = self.call_ledger();
        let stamp = l.begin(name, d, &self.link)?;
        let entries = if d > 1 {
            p2p::ring(
                &mut self.coll,
                self.rank,
                d,
                buf,
                bounds,
                phases,
                average,
                &stamp,
            )?
        } else {
            Vec::new()
        };
        self.finish(entries);
        Ok(())
    }

    fn finish(&mut self, mut entries: Vec<collective::Entry>) {
        entries.sort_by_key(|e| e.order());
        self.ledger.calls += 1;
        self.ledger.entries.extend(entries);
    }

    /// Naive or tree all-reduce: gather to rank 0, the host sum, send back.
    fn gathered(&mut self, buf: &mut Vec<f32>, algo: Algo, average: bool) -> Result<()> {
        let (d, r) = (self.size(), self.rank);
        let name = if algo == Algo::Tree {
            "tree_all_reduce"
        } else {
            "naive_all_reduce"
        };
        let mut l = self.call_ledger();
        let stamp = l.begin(name, d, &self.link)?;
        let bytes = 4 * buf.len() as u64;
        let t = Instant::now();
        let mut entries = Vec::new();
        if r != 0 {
            self.coll.put(0, to_bytes(buf))?;
            entries.push(stamp.entry(r, Kind::Hop { to: 0, round: 0 }, bytes, 0.0));
            *buf = from_bytes(&self.coll.take(0)?);
        } else if d > 1 {
            let mut bufs = vec![std::mem::take(buf)];
            for q in 1..d {
                bufs.push(from_bytes(&self.coll.take(q)?));
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
                self.coll.put(q, to_bytes(b))?;
                let wall = t.elapsed().as_secs_f64();
                entries.push(stamp.entry(0, Kind::Hop { to: q, round: 1 }, bytes, wall));
            }
            *buf = bufs.swap_remove(0);
        }
        self.finish(entries);
        Ok(())
    }
}

impl Communicator for LoopbackComm {
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
        if algo != Algo::Ring {
            return self.gathered(buf, algo, average);
        }
        let b = match bounds {
            Some(b) => b.to_vec(),
            None => collective::even_bounds(buf.len(), self.size()),
        };
        check_bounds("all_reduce", &b, self.size(), buf.len())?;
        self.ring("ring_all_reduce", buf, &b, Phases::Both, average)
    }

    fn reduce_scatter(
        &mut self,
        buf: &mut Vec<f32>,
        bounds: &[usize],
        average: bool,
    ) -> Result<()> {
        check_bounds("reduce_scatter", bounds, self.size(), buf.len())?;
        self.ring(
            "ring_reduce_scatter",
            buf,
            bounds,
            Phases::ReduceScatter,
            average,
        )
    }

    fn all_gather(&mut self, buf: &mut Vec<f32>, bounds: &[usize]) -> Result<()> {
        check_bounds("all_gather", bounds, self.size(), buf.len())?;
        self.ring("ring_all_gather", buf, bounds, Phases::AllGather, false)
    }

    fn broadcast(&mut self, buf: &mut Vec<f32>, root: usize) -> Result<()> {
        let d = self.size();
        if root >= d {
            return Err(Error::Config(format!(
                "broadcast: root rank {root} is outside the group of {d} ranks"
            )));
        }
        let mut l = self.call_ledger();
        let stamp = l.begin("broadcast", d, &self.link)?;
        let entries = p2p::broadcast(&mut self.coll, self.rank, d, buf, root, &stamp)?;
        self.finish(entries);
        Ok(())
    }

    fn all_gather_bytes(&mut self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let d = self.size();
        let out = p2p::all_gather_bytes(&mut self.coll, self.rank, d, mine)?;
        self.ledger.calls += 1;
        Ok(out)
    }

    fn send(&mut self, to: usize, tag: Tag, data: Vec<f32>) -> Result<()> {
        let t = Instant::now();
        let mut msg = Vec::with_capacity(17 + 4 * data.len());
        msg.push(tag.flow);
        msg.extend((tag.micro as u64).to_le_bytes());
        msg.extend((tag.stage as u64).to_le_bytes());
        msg.extend(to_bytes(&data));
        self.msgs.put(to, msg)?;
        let mut l = self.call_ledger();
        let stamp = l.begin("send", self.size(), &self.link)?;
        let bytes = 4 * data.len() as u64;
        let e = stamp.entry(
            self.rank,
            Kind::Hop { to, round: 0 },
            bytes,
            t.elapsed().as_secs_f64(),
        );
        self.finish(vec![e]);
        Ok(())
    }

    fn recv(&mut self, from: usize, tag: Tag) -> Result<Vec<f32>> {
        let (rank, msgs) = (self.rank, &mut self.msgs);
        let msg = self.early.take(rank, from, tag, || {
            let msg = msgs.take(from)?;
            if msg.len() < 17 {
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
        })?;
        Ok(from_bytes(&msg[17..]))
    }

    fn abort(&self, why: &str) {
        self.switch.abort(format!(
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
