//! The in-process communicator: the ranks of a group are threads of this process. A
//! collective moves every rank's host buffer (its `Vec`, not a copy) to rank 0, which runs the
//! crate's host algorithms on all of them at once (`collective::host`: the zero-copy pipelined
//! ring, the pairwise tree, the naive sum), then hands each rank its buffer back with the ledger
//! entries of the hops it sent. Point-to-point messages travel on one bounded channel per
//! ordered pair of ranks (the bound is the activation memory a pipeline link may hold).
//!
//! ```text
//!   rank 1 ──(buf, op)──▶ rank 0: host algorithm over [buf0, buf1, …] ──(buf, entries)──▶ rank 1
//!   rank a ──(tag, data)──▶ channel (a → b, bound k) ──▶ rank b
//! ```

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::early::Early;
use super::wait::Switch;
use super::{check_bounds, Communicator, Tag};
use crate::collective::{self, host, Algo, Entry, Ledger, Opts, Phases};
use crate::error::{Error, Result};
use crate::link::Link;

/// What a collective call is; every rank must make the same call.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    AllReduce(Algo, Option<Vec<usize>>, bool),
    ReduceScatter(Vec<usize>, bool),
    AllGather(Vec<usize>),
    Broadcast(usize),
    Bytes,
}

enum Payload {
    Floats(Vec<f32>),
    Bytes(Vec<u8>),
    AllBytes(Vec<Vec<u8>>),
}

struct Up {
    rank: usize,
    op: Op,
    payload: Payload,
}

type Message = (Tag, Vec<f32>);
/// Rank 0's answer to one rank: its result and the hops it sent.
type Answer = (Payload, Vec<Entry>);

/// One rank of an in-process group.
pub struct LocalComm {
    rank: usize,
    devices: Arc<Vec<usize>>,
    link: Link,
    switch: Arc<Switch>,
    up: Sender<Up>,
    /// Rank 0: every rank's calls, and the way back to each.
    leader: Option<(Receiver<Up>, Vec<Sender<Answer>>)>,
    down: Receiver<Answer>,
    to: Vec<Option<Sender<Message>>>,
    from: Vec<Option<Receiver<Message>>>,
    /// Messages of another flow that arrived before their receive.
    early: Early<Vec<f32>>,
    ledger: Ledger,
}

/// Knobs of a group.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// Longest any call waits for a peer.
    pub timeout: Duration,
    /// Messages a point-to-point link holds before `send` waits.
    pub channel_bound: usize,
    /// Link model that prices every hop in the ledger.
    pub link: Link,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            timeout: Duration::from_secs(120),
            channel_bound: 2,
            link: Link::nvlink(),
        }
    }
}

/// The ranks of a group over the global devices `devices` (rank r is device `devices[r]`),
/// one communicator each, to be moved into each rank's worker thread.
pub fn local_group(devices: &[usize], opts: &GroupOptions) -> Vec<LocalComm> {
    let d = devices.len();
    let devices = Arc::new(devices.to_vec());
    let switch = Arc::new(Switch::new(opts.timeout));
    let (up, up_rx) = unbounded();
    let (downs, down_rxs): (Vec<_>, Vec<_>) = (0..d).map(|_| unbounded()).unzip();
    // p2p[a][b]: a → b
    let mut tx: Vec<Vec<Option<Sender<Message>>>> = (0..d).map(|_| vec![None; d]).collect();
    let mut rx: Vec<Vec<Option<Receiver<Message>>>> = (0..d).map(|_| vec![None; d]).collect();
    for a in 0..d {
        for b in (0..d).filter(|&b| b != a) {
            let (s, r) = bounded(opts.channel_bound.max(1));
            tx[a][b] = Some(s);
            rx[b][a] = Some(r);
        }
    }
    let mut leader = Some((up_rx, downs));
    down_rxs
        .into_iter()
        .zip(tx.into_iter().zip(rx))
        .enumerate()
        .map(|(rank, (down, (to, from)))| {
            let mut ledger = Ledger::new();
            ledger.group = devices.to_vec();
            LocalComm {
                rank,
                devices: devices.clone(),
                link: opts.link,
                switch: switch.clone(),
                up: up.clone(),
                leader: if rank == 0 { leader.take() } else { None },
                down,
                to,
                from,
                early: Early::default(),
                ledger,
            }
        })
        .collect()
}

impl LocalComm {
    fn what(&self, op: &Op) -> String {
        format!(
            "rank {} (device {}) in {op:?}",
            self.rank, self.devices[self.rank]
        )
    }

    /// Runs one collective: rank 0 gathers every rank's payload, computes, answers.
    fn call(&mut self, op: Op, mine: Payload) -> Result<Payload> {
        let what = self.what(&op);
        let d = self.devices.len();
        let (payload, entries) = if self.rank != 0 {
            let up = Up {
                rank: self.rank,
                op,
                payload: mine,
            };
            self.switch.send(&self.up, up, &|| what.clone())?;
            self.switch.recv(&self.down, &|| what.clone())?
        } else {
            let (rx, downs) = self.leader.as_ref().expect("rank 0 leads");
            let mut ins: Vec<Option<Payload>> = (0..d).map(|_| None).collect();
            ins[0] = Some(mine);
            for _ in 1..d {
                let u = self.switch.recv(rx, &|| what.clone())?;
                if u.op != op {
                    let msg = format!(
                        "rank {} called {:?} while rank 0 called {op:?}: the ranks' programs differ",
                        u.rank, u.op
                    );
                    self.switch.abort(msg.clone());
                    return Err(Error::Config(msg));
                }
                ins[u.rank] = Some(u.payload);
            }
            let ins: Vec<Payload> = ins.into_iter().map(|p| p.expect("every rank")).collect();
            let mut outs = self.compute(&op, ins)?;
            let mine = outs.remove(0);
            for (out, tx) in outs.into_iter().zip(&downs[1..]) {
                self.switch.send(tx, out, &|| what.clone())?;
            }
            mine
        };
        self.ledger.calls += 1;
        self.ledger.entries.extend(entries);
        Ok(payload)
    }

    /// Rank 0's part: the host algorithm over every rank's payload; per rank its result and
    /// the entries of the hops it sent.
    fn compute(&self, op: &Op, ins: Vec<Payload>) -> Result<Vec<Answer>> {
        let d = ins.len();
        if *op == Op::Bytes {
            let all: Vec<Vec<u8>> = ins
                .into_iter()
                .map(|p| match p {
                    Payload::Bytes(b) => b,
                    _ => Vec::new(),
                })
                .collect();
            return Ok((0..d)
                .map(|_| (Payload::AllBytes(all.clone()), Vec::new()))
                .collect());
        }
        let mut bufs: Vec<Vec<f32>> = ins
            .into_iter()
            .map(|p| match p {
                Payload::Floats(v) => v,
                _ => Vec::new(),
            })
            .collect();
        // a ledger that numbers this call as the group's next
        let mut l = self.ledger.next_call();
        let link = &self.link;
        let avg = |average: bool| Opts {
            average,
            recv_timeout: self.switch.timeout,
            ..Opts::default()
        };
        match op {
            Op::AllReduce(Algo::Ring, bounds, average) => {
                let n = bufs[0].len();
                let b = bounds
                    .clone()
                    .unwrap_or_else(|| collective::even_bounds(n, d));
                host::ring_in(&mut bufs, Phases::Both, &b, &avg(*average), &mut l, link)?
            }
            Op::AllReduce(Algo::Naive, _, average) => {
                host::naive_all_reduce(&mut bufs, &avg(*average), &mut l, link)?
            }
            Op::AllReduce(Algo::Tree, _, average) => {
                host::tree_all_reduce(&mut bufs, &avg(*average), &mut l, link)?
            }
            Op::ReduceScatter(b, average) => host::ring_in(
                &mut bufs,
                Phases::ReduceScatter,
                b,
                &avg(*average),
                &mut l,
                link,
            )?,
            Op::AllGather(b) => host::ring_in(
                &mut bufs,
                Phases::AllGather,
                b,
                &Opts::default(),
                &mut l,
                link,
            )?,
            Op::Broadcast(root) => host::broadcast(&mut bufs, *root, &mut l, link)?,
            Op::Bytes => unreachable!("handled above"),
        }
        let mut per: Vec<Vec<Entry>> = vec![Vec::new(); d];
        for e in l.entries {
            if let Some(v) = per.get_mut(e.rank) {
                v.push(e);
            }
        }
        Ok(bufs
            .into_iter()
            .zip(per)
            .map(|(b, e)| (Payload::Floats(b), e))
            .collect())
    }

    fn floats(&mut self, op: Op, buf: &mut Vec<f32>) -> Result<()> {
        match self.call(op, Payload::Floats(std::mem::take(buf)))? {
            Payload::Floats(v) => {
                *buf = v;
                Ok(())
            }
            _ => Err(Error::Config("a collective answered with bytes".into())),
        }
    }
}

impl Communicator for LocalComm {
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
        if let Some(b) = bounds {
            check_bounds("all_reduce", b, self.size(), buf.len())?;
        }
        self.floats(
            Op::AllReduce(algo, bounds.map(<[usize]>::to_vec), average),
            buf,
        )
    }

    fn reduce_scatter(
        &mut self,
        buf: &mut Vec<f32>,
        bounds: &[usize],
        average: bool,
    ) -> Result<()> {
        check_bounds("reduce_scatter", bounds, self.size(), buf.len())?;
        self.floats(Op::ReduceScatter(bounds.to_vec(), average), buf)
    }

    fn all_gather(&mut self, buf: &mut Vec<f32>, bounds: &[usize]) -> Result<()> {
        check_bounds("all_gather", bounds, self.size(), buf.len())?;
        self.floats(Op::AllGather(bounds.to_vec()), buf)
    }

    fn broadcast(&mut self, buf: &mut Vec<f32>, root: usize) -> Result<()> {
        crate::collective::host::check_root("broadcast", root, self.size())?;
        self.floats(Op::Broadcast(root), buf)
    }

    fn all_gather_bytes(&mut self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        match self.call(Op::Bytes, Payload::Bytes(mine))? {
            Payload::AllBytes(all) => Ok(all),
            _ => Err(Error::Config(
                "a byte all-gather answered with floats".into(),
            )),
        }
    }

    fn send(&mut self, to: usize, tag: Tag, data: Vec<f32>) -> Result<()> {
        let Some(Some(tx)) = self.to.get(to) else {
            return Err(Error::Config(format!(
                "rank {} cannot send to rank {to}: not a peer in this group of {}",
                self.rank,
                self.size()
            )));
        };
        let bytes = 4 * data.len() as u64;
        let t = std::time::Instant::now();
        let what = || format!("rank {} sending {tag:?} to rank {to}", self.rank);
        self.switch.send(tx, (tag, data), &what)?;
        let (rank, d, secs) = (self.rank, self.size(), t.elapsed().as_secs_f64());
        self.ledger
            .record_send(rank, to, d, bytes, secs, &self.link)
    }

    fn recv(&mut self, from: usize, tag: Tag) -> Result<Vec<f32>> {
        let Some(Some(rx)) = self.from.get(from) else {
            return Err(Error::Config(format!(
                "rank {} cannot receive from rank {from}: not a peer in this group of {}",
                self.rank,
                self.size()
            )));
        };
        let what = || format!("rank {} waiting for {tag:?} from rank {from}", self.rank);
        let switch = &self.switch;
        self.early
            .take(self.rank, from, tag, || switch.recv(rx, &what))
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
