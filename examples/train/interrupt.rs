//! A graceful stop on SIGINT (Ctrl-C) and SIGTERM (what a cluster scheduler sends before it
//! kills a job), as torchrun and Lightning users expect, and on SIGUSR1 — the signal Open
//! MPI's `mpirun` forwards to every rank (its own SIGINT / SIGTERM start its kill sequence):
//!
//! ```text
//! 1st signal ─▶ requested() = Some(sig): the run loop finishes its step, saves, writes its
//!               record, exits with sig.exit_code() (130 SIGINT, 143 SIGTERM, 138 SIGUSR1)
//!               └─ not acknowledged within `grace` (a step stuck mid-way): the abandon hook
//!                  writes the record (the last checkpoint is left as it is), then exit
//! 2nd signal ─▶ the abandon hook (if the run loop has not stopped yet), exit at once with its
//!               code (checkpoints are written atomically, so the last one stays intact; a
//!               half-written temporary file may remain beside it)
//! ```
//!
//! One thread listens (signal-hook's self-pipe iterator; no hand-written signal handlers). On
//! platforms without POSIX signals `install` gives a handle that never fires.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use triaxis::error::{Error, Result};

/// The signal that asked the run to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Signal {
    Sigint,
    Sigterm,
    Sigusr1,
}

impl Signal {
    /// The shell's convention: 128 + the signal number.
    pub fn exit_code(self) -> i32 {
        match self {
            Signal::Sigint => 130,
            Signal::Sigterm => 143,
            Signal::Sigusr1 => 138,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Signal::Sigint => "SIGINT",
            Signal::Sigterm => "SIGTERM",
            Signal::Sigusr1 => "SIGUSR1",
        }
    }

    /// 1, 2 or 3: the signal as one byte (for agreeing on it across processes).
    pub fn code(self) -> u8 {
        match self {
            Signal::Sigint => 1,
            Signal::Sigterm => 2,
            Signal::Sigusr1 => 3,
        }
    }

    /// The signal of [`Signal::code`]; `None` for any other byte.
    pub fn from_code(c: u8) -> Option<Signal> {
        match c {
            1 => Some(Signal::Sigint),
            2 => Some(Signal::Sigterm),
            3 => Some(Signal::Sigusr1),
            _ => None,
        }
    }
}

/// Called with the signal and whether the step in progress is being abandoned (false: the run
/// loop had already stopped on its own, e.g. it was saving when the second signal came).
type Hook = Box<dyn FnOnce(Signal, bool) + Send>;

#[derive(Default)]
struct Shared {
    /// 0: no signal yet; else [`Signal::code`] of the first.
    first: AtomicU8,
    /// The run loop has seen the request and is stopping on its own.
    acknowledged: AtomicBool,
    abandon: Mutex<Option<Hook>>,
}

/// The stop request of this process (clone it freely; all clones see the same signals).
#[derive(Clone, Default)]
pub struct Interrupt {
    shared: Arc<Shared>,
}

impl Interrupt {
    /// Starts listening for SIGINT, SIGTERM and SIGUSR1. After the first, the run loop has `grace` to
    /// [`Interrupt::acknowledge`] it before the abandon hook runs and the process exits.
    pub fn install(grace: Duration) -> Result<Interrupt> {
        let me = Interrupt::default();
        #[cfg(unix)]
        me.listen(grace)?;
        #[cfg(not(unix))]
        let _ = grace;
        Ok(me)
    }

    /// The first signal received, if any.
    pub fn requested(&self) -> Option<Signal> {
        Signal::from_code(self.shared.first.load(Ordering::SeqCst))
    }

    /// The run loop is stopping on its own (the step finished): the grace timer stands down.
    pub fn acknowledge(&self) {
        self.shared.acknowledged.store(true, Ordering::SeqCst);
    }

    /// What to do when a step does not finish within the grace period after a signal, or a
    /// second signal comes first (e.g. write the run record); runs on the signal thread just
    /// before the process exits, at most once.
    pub fn on_abandon(&self, hook: impl FnOnce(Signal, bool) + Send + 'static) {
        if let Ok(mut h) = self.shared.abandon.lock() {
            *h = Some(Box::new(hook));
        }
    }

    #[cfg(unix)]
    fn listen(&self, grace: Duration) -> Result<()> {
        use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1])
            .map_err(|e| Error::Config(format!("cannot install the signal handlers: {e}")))?;
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut since: Option<Instant> = None;
                loop {
                    for raw in signals.pending() {
                        let sig = match raw {
                            SIGTERM => Signal::Sigterm,
                            SIGUSR1 => Signal::Sigusr1,
                            _ => Signal::Sigint,
                        };
                        if since.is_some() {
                            eprintln!("{}: second signal, exiting at once", sig.name());
                            let hook = shared.abandon.lock().ok().and_then(|mut h| h.take());
                            if let Some(hook) = hook {
                                hook(sig, !shared.acknowledged.load(Ordering::SeqCst));
                            }
                            std::process::exit(sig.exit_code());
                        }
                        since = Some(Instant::now());
                        shared.first.store(sig.code(), Ordering::SeqCst);
                        eprintln!(
                            "{}: stopping after the current step (a second signal exits at once)",
                            sig.name()
                        );
                    }
                    let late = since.is_some_and(|t| t.elapsed() > grace);
                    if late && !shared.acknowledged.load(Ordering::SeqCst) {
                        let sig = Signal::from_code(shared.first.load(Ordering::SeqCst))
                            .unwrap_or(Signal::Sigint);
                        eprintln!(
                            "{}: the current step did not finish within {grace:?}; abandoning it",
                            sig.name()
                        );
                        let hook = shared.abandon.lock().ok().and_then(|mut h| h.take());
                        if let Some(hook) = hook {
                            hook(sig, true);
                        }
                        std::process::exit(sig.exit_code());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .map_err(|e| Error::Config(format!("cannot start the signal thread: {e}")))?;
        Ok(())
    }
}
