//! The runtime's test hooks: a fault injected into one pass (or one gradient reduction) of one
//! device at one step, and the ways it shows itself. Every fault test — error, panic, lost
//! device, NaN, a stalled step — goes through the same workers as a clean run.

use crate::error::{Error, Result};

/// Test hook: at its `action`-th action of step `step`, global device `device` fails as
/// `kind` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub device: usize,
    pub action: usize,
    pub step: usize,
    pub kind: FaultKind,
}

/// Test hook: just before the gradient-norm reduction of every step, global device `device`
/// multiplies its gradient of tensor `tensor` by `factor` — the bug a layout could have (a
/// lost 1/d, a replicated tensor counted t times), for the tests that must catch it.
#[derive(Clone, Debug, PartialEq)]
pub struct GradScale {
    pub device: usize,
    pub tensor: String,
    pub factor: f32,
}

/// How an injected fault shows itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultKind {
    /// The action returns an error.
    #[default]
    Error,
    /// The worker thread panics inside the action.
    Panic,
    /// The device reports itself lost.
    DeviceLost,
    /// The action hangs (sleeps ten minutes) before running: a step that cannot finish, for
    /// the graceful-stop tests (a signal's grace period runs out while it hangs).
    Stall,
    /// The action completes, then a NaN lands in the loss (a forward of the last stage) or in
    /// the stage's gradients (any other action); the finiteness check before the optimizer
    /// step catches it.
    Nan,
}

impl FaultKind {
    /// "error", "panic", "lost", "nan" or "stall".
    pub fn by_name(name: &str) -> Result<FaultKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(FaultKind::Error),
            "panic" => Ok(FaultKind::Panic),
            "lost" | "device-lost" => Ok(FaultKind::DeviceLost),
            "stall" => Ok(FaultKind::Stall),
            "nan" => Ok(FaultKind::Nan),
            _ => Err(Error::Config(format!(
                "unknown fault kind {name:?}: expected error, panic, lost, nan or stall"
            ))),
        }
    }
}
