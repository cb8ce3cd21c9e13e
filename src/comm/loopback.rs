//! The loopback communicator: a test double for a communicator that crosses a process
//! boundary. Ranks are threads of this process, but nothing is shared between them: every
//! message is serialised to bytes and moved on a channel, and the collectives are built from
//! point-to-point messages (the ring of `p2p`, as the MPI communicator runs it: both are a
//! [`WireComm`], differing only in the transport). A worker that trains to the same bits over
//! this communicator as over [`super::local`] talks to its peers only through the interface.

use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::p2p::{Lane, Wire};
use super::wait::Switch;
use super::wired::{Transport, WireComm};
use super::GroupOptions;
use crate::error::{Error, Result};

/// One rank of a loopback group.
pub type LoopbackComm = WireComm<Lanes>;

/// Byte channels from one rank to every other and back (one lane's).
struct Links {
    to: Vec<Option<Sender<Vec<u8>>>>,
    from: Vec<Option<Receiver<Vec<u8>>>>,
}

/// The loopback transport of one rank: a set of channels per lane, so collectives and tagged
/// messages never interleave, and the group's abort switch.
pub struct Lanes {
    rank: usize,
    switch: Arc<Switch>,
    coll: Links,
    msgs: Links,
}

impl Lanes {
    fn links(&self, lane: Lane) -> &Links {
        match lane {
            Lane::Coll => &self.coll,
            Lane::Msgs => &self.msgs,
        }
    }
}

impl Wire for Lanes {
    fn put(&mut self, lane: Lane, to: usize, bytes: Vec<u8>) -> Result<()> {
        let r = self.rank;
        let tx = self.links(lane).to.get(to).and_then(Option::as_ref);
        let tx = tx.ok_or_else(|| Error::Config(format!("rank {r} has no link to rank {to}")))?;
        self.switch
            .send(tx, bytes, &|| format!("rank {r} sending to rank {to}"))
    }

    fn take(&mut self, lane: Lane, from: usize) -> Result<Vec<u8>> {
        let r = self.rank;
        let rx = self.links(lane).from.get(from).and_then(Option::as_ref);
        let rx =
            rx.ok_or_else(|| Error::Config(format!("rank {r} has no link from rank {from}")))?;
        self.switch
            .recv(rx, &|| format!("rank {r} waiting for rank {from}"))
    }
}

impl Transport for Lanes {
    fn abort(&self, why: String) {
        self.switch.abort(why);
    }
}

/// Every rank's channels of one lane.
fn links(d: usize) -> Vec<Links> {
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
        .map(|(to, from)| Links { to, from })
        .collect()
}

/// The ranks of a loopback group over the global devices `devices`.
pub fn loopback_group(devices: &[usize], opts: &GroupOptions) -> Vec<LoopbackComm> {
    let d = devices.len();
    let switch = Arc::new(Switch::new(opts.timeout));
    links(d)
        .into_iter()
        .zip(links(d))
        .enumerate()
        .map(|(rank, (coll, msgs))| {
            let lanes = Lanes {
                rank,
                switch: switch.clone(),
                coll,
                msgs,
            };
            WireComm::new(rank, devices.to_vec(), opts.link, lanes)
        })
        .collect()
}
