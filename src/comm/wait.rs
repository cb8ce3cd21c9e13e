//! What every rank of a group shares to stop waiting: an abort switch (a peer failed) and a
//! timeout (a peer is silent). Every blocking step of the in-process communicators goes through
//! here; the MPI one polls with the same timeout and words (`late`).

use std::sync::Mutex;
use std::time::Duration;

use crossbeam_channel::{select, Receiver, Sender};

use crate::error::{Error, Result};

pub(crate) struct Switch {
    why: Mutex<Option<String>>,
    /// Dropped on abort: every `off` receiver then wakes.
    on: Mutex<Option<Sender<()>>>,
    off: Receiver<()>,
    pub timeout: Duration,
}

impl Switch {
    pub fn new(timeout: Duration) -> Switch {
        let (on, off) = crossbeam_channel::bounded(0);
        Switch {
            why: Mutex::new(None),
            on: Mutex::new(Some(on)),
            off,
            timeout,
        }
    }

    /// Stops every wait of the group; the first reason is kept.
    pub fn abort(&self, why: String) {
        if let Ok(mut w) = self.why.lock() {
            w.get_or_insert(why);
        }
        if let Ok(mut on) = self.on.lock() {
            on.take();
        }
    }

    fn stopped(&self, what: &str) -> Error {
        let why = self
            .why
            .lock()
            .ok()
            .and_then(|w| w.clone())
            .unwrap_or_else(|| "a peer left the group".into());
        Error::Aborted(format!("{what}: {why}"))
    }

    fn late(&self, what: &str) -> Error {
        late(what, self.timeout)
    }

    /// The next message on `rx`, unless the group is aborted or the timeout passes.
    pub fn recv<T>(&self, rx: &Receiver<T>, what: &dyn Fn() -> String) -> Result<T> {
        select! {
            recv(rx) -> m => m.map_err(|_| self.stopped(&what())),
            recv(self.off) -> _ => Err(self.stopped(&what())),
            default(self.timeout) => Err(self.late(&what())),
        }
    }

    /// Sends `msg` on `tx` (waiting while it is full), unless aborted or timed out.
    pub fn send<T>(&self, tx: &Sender<T>, msg: T, what: &dyn Fn() -> String) -> Result<()> {
        select! {
            send(tx, msg) -> r => r.map_err(|_| self.stopped(&what())),
            recv(self.off) -> _ => Err(self.stopped(&what())),
            default(self.timeout) => Err(self.late(&what())),
        }
    }
}

/// The error of a wait that saw no answer within `timeout`.
pub(crate) fn late(what: &str, timeout: Duration) -> Error {
    Error::Aborted(format!(
        "{what}: no answer within {timeout:?} (a peer is stuck or gone)"
    ))
}
