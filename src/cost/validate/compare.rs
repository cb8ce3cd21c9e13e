//! Prediction beside measurement: the planner's figures for a layout against what the engine
//! measured running it, as ratios and exact-ledger verdicts.

use super::{predicted_tp_bytes, ring_formula_dp_bytes, DeviceShare, Expected};
use crate::cost::model::{Footprint, ModelShape};
use crate::cost::plan::Candidate;
use crate::mesh::Mesh;

/// What the engine measured for one layout: medians over the measured steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Device clock: one replica's schedule (kernels, tp all-reduces, sends) plus the
    /// data-parallel all-reduce on the link model (the engine runs it after the backward).
    pub step: f64,
    /// One replica's schedule on the device clock, the replica running alone (the `plan` example measures it).
    pub device_step: f64,
    /// Replica 0's schedule while all dp replicas ran at once (= `device_step` when dp = 1).
    pub device_step_concurrent: f64,
    pub dp_comm: f64,
    /// Idle share of the busiest pipeline device (replica alone); `None` when pp = 1.
    pub bubble: Option<f64>,
    /// `StepCosts::dp_bytes` and `tp_bytes` (the same every step).
    pub dp_bytes: u64,
    pub tp_bytes: u64,
    /// The engine's placement, blocks per device in mesh order.
    pub blocks: Vec<String>,
    /// The memory ledger's model state (params, grads, Adam moments held between steps) of
    /// the busiest device after the run.
    pub state_bytes: u64,
    /// The busiest device's activation peak (the memory ledger's, from the engine's build on).
    pub activation_bytes: u64,
    /// Wall seconds of all runs, warm-up steps included.
    pub wall: f64,
}

/// One side-by-side figure: predicted, measured, and their ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    pub predicted: f64,
    pub measured: f64,
}

impl Pair {
    pub fn new(predicted: f64, measured: f64) -> Self {
        Pair {
            predicted,
            measured,
        }
    }

    /// measured / predicted (1 when both are 0).
    pub fn ratio(&self) -> f64 {
        if self.predicted == 0.0 && self.measured == 0.0 {
            1.0
        } else {
            self.measured / self.predicted
        }
    }
}

/// One planned layout, predicted beside measured (see the module doc for each figure).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub candidate: Candidate,
    pub mesh: Mesh,
    /// Device-clock step time, seconds.
    pub step: Pair,
    /// Its measured data-parallel all-reduce on the link model, seconds.
    pub dp_comm: f64,
    /// Replica 0's schedule while all replicas ran at once (see [`Measured`]).
    pub concurrent: f64,
    /// Bubble fraction; measured `None` when pp = 1.
    pub bubble: (f64, Option<f64>),
    /// Data-parallel bytes per device per step: the cost model's vs the engine's busiest device.
    pub dp_bytes: Pair,
    /// The ring formula on the engine's own parameter count (the conventions matched).
    pub dp_ring_formula: f64,
    /// Tensor-parallel bytes of the busiest rank per step.
    pub tp_bytes: Pair,
    /// Model-state bytes of the busiest device (params, grads, Adam m and v; P,G,K = 4,4,8):
    /// the cost model's vs the memory ledger's.
    pub state_bytes: Pair,
    /// Activation bytes of the busiest device: the activation predictor's vs the memory
    /// ledger's peak.
    pub activation_bytes: Pair,
    /// The engine's ledgers and placement equal what its buffers and partition imply.
    pub exact: bool,
    /// What differed, if not exact.
    pub mismatch: Vec<String>,
}

/// Puts a candidate's prediction beside the engine's measurement.
pub fn compare(
    c: &Candidate,
    shape: &ModelShape,
    prec: &Footprint,
    mesh: &Mesh,
    exp: &Expected,
    got: &Measured,
) -> Row {
    let mut mismatch = Vec::new();
    if got.dp_bytes != exp.dp_bytes_ledger {
        mismatch.push(format!(
            "dp ledger {} B, buffers imply {} B",
            got.dp_bytes, exp.dp_bytes_ledger
        ));
    }
    if got.tp_bytes != exp.tp_bytes {
        mismatch.push(format!(
            "tp ledger {} B, ring formula {} B",
            got.tp_bytes, exp.tp_bytes
        ));
    }
    if got.state_bytes != exp.state_bytes {
        mismatch.push(format!(
            "memory ledger {} B of model state, buffers imply {} B",
            got.state_bytes, exp.state_bytes
        ));
    }
    if got.activation_bytes != exp.activation_bytes {
        mismatch.push(format!(
            "memory ledger {} B of activations at the peak, predicted {} B",
            got.activation_bytes, exp.activation_bytes
        ));
    }
    let want: Vec<String> = (0..mesh.dp)
        .flat_map(|_| exp.devices.iter().map(DeviceShare::blocks))
        .collect();
    if got.blocks != want {
        mismatch.push(format!("placement {:?}, partition {:?}", got.blocks, want));
    }
    Row {
        candidate: *c,
        mesh: *mesh,
        step: Pair::new(c.step.step, got.step),
        dp_comm: got.dp_comm,
        concurrent: got.device_step_concurrent,
        bubble: (c.step.bubble, got.bubble),
        dp_bytes: Pair::new(c.step.dp_bytes, exp.dp_bytes_device as f64),
        dp_ring_formula: ring_formula_dp_bytes(exp, mesh.dp),
        tp_bytes: Pair::new(
            predicted_tp_bytes(shape, prec, &c.layout, c.step.micro_batch),
            got.tp_bytes as f64,
        ),
        state_bytes: Pair::new(c.memory.states, got.state_bytes as f64),
        activation_bytes: Pair::new(exp.activation_bytes as f64, got.activation_bytes as f64),
        exact: mismatch.is_empty(),
        mismatch,
    }
}
