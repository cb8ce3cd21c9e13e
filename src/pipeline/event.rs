//! What a pipeline step did, pass by pass, on the wall clock: the events the pipeline summary
//! and the Chrome trace read (filled by the runtime from its op records).

use super::schedule::Action;
use crate::memory::Usage;
use crate::step::StepStats;

/// One executed action: wall-clock interval (seconds from the step start), measured device time
/// of its kernels, and the bytes it sent to a neighbour stage.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    pub device: usize,
    pub stage: usize,
    pub label: String,
    #[serde(skip)]
    pub action: Action,
    pub start: f64,
    pub end: f64,
    /// Device-clock seconds of the action: its kernels (a tensor-parallel segment costs its
    /// slowest rank) plus its tensor-parallel all-reduces on the link model (`tp_comm`).
    pub compute: f64,
    /// The tensor-parallel all-reduce part of `compute` (0 without tensor parallelism).
    pub tp_comm: f64,
    pub bytes_out: u64,
    /// Host-staging time of the send (download + channel), seconds.
    pub send_time: f64,
}

/// What one pipeline step did.
#[derive(Clone, Debug)]
pub struct StepReport {
    pub stats: StepStats,
    pub events: Vec<Event>,
    /// Wall time of the schedule (threads start → all joined), seconds.
    pub wall: f64,
    /// Most microbatches whose activations a stage held at once, per stage.
    pub peak_held: Vec<usize>,
    /// Per GPU (schedule device order, tensor ranks within): bytes now and each memory-ledger
    /// category's peak so far.
    pub memory: Vec<Usage>,
}
