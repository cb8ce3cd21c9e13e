//! A worker's communicators, and how an op calls one: its messages tagged, the link-model
//! seconds of what it sent read from the ledger.

use crate::collective::Ledger;
use crate::comm::{Communicator, Tag};
use crate::error::Result;
use crate::pipeline::schedule::Flow;

/// A worker's communicators.
pub struct Comms {
    /// The pipeline devices of this (replica, tensor rank): rank = pipeline position.
    pub pp: Box<dyn Communicator>,
    /// The tensor-parallel group of this (replica, stage): rank = tensor rank.
    pub tp: Box<dyn Communicator>,
    /// The data-parallel group of this (stage, tensor rank): rank = replica.
    pub dp: Box<dyn Communicator>,
    /// Every device: rank = global device.
    pub world: Box<dyn Communicator>,
}

impl Comms {
    pub(super) fn all(&self) -> [&dyn Communicator; 4] {
        [&*self.pp, &*self.tp, &*self.dp, &*self.world]
    }
    /// Stamps step `s` on new ledger entries and drops those of earlier steps (a long run's
    /// ledgers stay one step long; the engine reads each step's costs right after it).
    pub(super) fn set_step(&mut self, s: usize) {
        for c in [&mut self.pp, &mut self.tp, &mut self.dp, &mut self.world] {
            let l = c.ledger_mut();
            l.step = s;
            l.entries.retain(|e| e.step >= s);
        }
    }
}

pub(super) fn tag(flow: Flow, micro: usize, stage: usize) -> Tag {
    Tag {
        flow: match flow {
            Flow::Activation => 0,
            Flow::Gradient => 1,
        },
        micro,
        stage,
    }
}

/// Runs one communicator call; returns the link-model seconds of the hops it recorded.
pub(super) fn comm_call(
    c: &mut dyn Communicator,
    f: impl FnOnce(&mut dyn Communicator) -> Result<()>,
) -> Result<f64> {
    let before = c.ledger().entries.len();
    f(c)?;
    let entries = c.ledger().entries[before..].to_vec();
    Ok(Ledger {
        entries,
        ..Ledger::default()
    }
    .link_clock())
}
