//! What the processes of a distributed runtime tell each other, over the control
//! communicator (one rank per device, rank = global device), so every process can lower the
//! whole layout, cost the whole step and assemble the whole model state:
//!
//! ```text
//! build   each pipeline position's chunk shapes (from the devices that hold it)   JSON
//! step    every device's WorkerRun (op records, stats, bytes, peaks, memory)      JSON
//! state   every device's pieces of params / m / v in its stage-local layout       f32 bytes
//!         (encoded where they are gathered, `state.rs`)
//! ```
//!
//! A process runs its devices' workers only; what it learns here is data, never control: every
//! process computes the same plan and the same figures from the same exchanged records.

use super::ir::ChunkShape;
use super::worker::WorkerRun;
use crate::comm::Communicator;
use crate::error::{Error, Result};

fn json<T: serde::Serialize>(x: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(x).map_err(|e| Error::Config(format!("encoding an exchange record: {e}")))
}

fn unjson<T: serde::de::DeserializeOwned>(b: &[u8], from: usize) -> Result<T> {
    serde_json::from_slice(b)
        .map_err(|e| Error::Config(format!("a corrupt exchange record from device {from}: {e}")))
}

/// Per pipeline position: (device, its chunks' shapes) of the devices that reported it.
pub(super) type ShapesByStage = Vec<Vec<(usize, Vec<ChunkShape>)>>;

/// Every process's (device, chunk shapes) of each pipeline position, merged.
pub(super) fn exchange_shapes(
    control: &mut dyn Communicator,
    mine: ShapesByStage,
) -> Result<ShapesByStage> {
    let pp = mine.len();
    let all = control.all_gather_bytes(json(&mine)?)?;
    let mut out: ShapesByStage = vec![Vec::new(); pp];
    for (rank, b) in all.iter().enumerate() {
        let theirs: ShapesByStage = unjson(b, rank)?;
        if theirs.len() != pp {
            return Err(Error::Config(format!(
                "device {rank} runs {} pipeline positions, this process {pp}: the processes \
                 disagree on the layout",
                theirs.len()
            )));
        }
        for (s, v) in theirs.into_iter().enumerate() {
            out[s].extend(v);
        }
    }
    for v in &mut out {
        v.sort_by_key(|x| x.0);
        v.dedup_by_key(|x| x.0);
    }
    Ok(out)
}

/// Every device's run of the step, in device order.
pub(super) fn exchange_runs(
    control: &mut dyn Communicator,
    mine: Vec<WorkerRun>,
    devices: usize,
) -> Result<Vec<WorkerRun>> {
    let all = control.all_gather_bytes(json(&mine)?)?;
    let mut runs = Vec::with_capacity(devices);
    for (rank, b) in all.iter().enumerate() {
        runs.extend(unjson::<Vec<WorkerRun>>(b, rank)?);
    }
    runs.sort_by_key(|r| r.device);
    runs.dedup_by_key(|r| r.device);
    if runs.len() != devices || runs.iter().enumerate().any(|(d, r)| r.device != d) {
        return Err(Error::Config(format!(
            "the processes reported {} of {devices} devices' steps",
            runs.len()
        )));
    }
    Ok(runs)
}
