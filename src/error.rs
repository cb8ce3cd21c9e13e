//! The one error type of the crate: every failure a user can cause or meet is a variant with a
//! message that says what to change. Nothing in the library panics on bad input.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// No wgpu adapter matched the request (none installed, or none on the chosen backend).
    #[error("no GPU adapter found{0}; install a Vulkan driver (e.g. mesa-vulkan-drivers) or use WGPU_BACKEND=gl")]
    NoAdapter(String),
    /// A backend name that wgpu does not know.
    #[error("unknown backend {0:?}: expected one of vulkan, gl, metal, dx12, all")]
    UnknownBackend(String),
    /// The adapter refused a device, or the device reported an error.
    #[error("device error: {0}")]
    Device(String),
    /// A model or run configuration that cannot work (the message names the constraint).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A data file that cannot be used.
    #[error("data error: {0}")]
    Data(String),
    /// A pipeline or data-parallel worker failed; names where and when.
    #[error("device {device} (stage {stage}) failed at action {action} of step {step}: {msg}")]
    Worker {
        device: usize,
        stage: usize,
        action: String,
        step: usize,
        msg: String,
    },
    /// A checkpoint that cannot be written, read or used; `msg` says what is wrong and what
    /// to do about it.
    #[error("checkpoint {path}: {msg}")]
    Checkpoint { path: String, msg: String },
    /// A communicator call ended because a peer stopped (its own error is reported where it
    /// happened) or did not answer in time; `String` says which peer and what it was doing.
    #[error("communication stopped: {0}")]
    Aborted(String),
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// `Ok` when `value` is finite and > 0; else a configuration error naming the input and the fix.
pub(crate) fn positive(what: &str, value: f64, fix: &str) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{what} must be a positive finite number, got {value}; {fix}"
        )))
    }
}

/// `Ok` when `value` ≥ 1; else a configuration error naming the input and the fix.
pub(crate) fn at_least_one(what: &str, value: usize, fix: &str) -> Result<()> {
    if value >= 1 {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{what} must be at least 1, got 0; {fix}"
        )))
    }
}
