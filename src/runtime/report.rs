//! A runtime step seen as a pipeline step: one event per pass (F, B, W) of one replica, in the
//! form the wall-clock side of the pipeline summary reads ([`Runtime::summary`], the Chrome trace),
//! and the per-op device times with scheduler noise taken out for the whole-step replay.
//!
//! ```text
//! ops of a pass:  Compute(segs 0..1) TpAllReduce Compute(segs 1..2) … Send
//! event:          start of the first segment … end of the last; compute = Σ kernels (the
//!                 slowest tensor rank) + Σ tp all-reduces; bytes_out, send_time of its Send
//! ```

use std::collections::HashMap;

use super::exec::{Runtime, RuntimeStep};
use super::ir::Op;
use crate::error::Result;
use crate::mesh::Coords;
use crate::pipeline::event::{Event, StepReport};
use crate::pipeline::schedule::Action;

impl Runtime {
    /// Replica `replica`'s step as a pipeline report: one event per pass on each pipeline
    /// device (a tensor-parallel pass costs its slowest rank), the activation slots each stage
    /// held at most, every device's memory ledger.
    pub fn report(&self, run: &RuntimeStep, replica: usize) -> Result<StepReport> {
        let mut events: Vec<Event> = Vec::new();
        for pos in 0..self.mesh.pp {
            let mut per_pass: HashMap<Action, Event> = HashMap::new();
            let mut order: Vec<Action> = Vec::new();
            for k in 0..self.mesh.tp {
                let d = self.mesh.device(Coords {
                    replica,
                    stage: pos,
                    tp_rank: k,
                });
                let (prog, recs) = (&self.plan.programs[d], &run.runs[d].records);
                let mut mine: HashMap<Action, (f64, f64)> = HashMap::new();
                for (op, rec) in prog.ops.iter().zip(recs) {
                    let (a, kernels, tp) = match op {
                        Op::Compute { action, .. } => (*action, rec.device, 0.0),
                        Op::TpAllReduce { action, .. } => (*action, 0.0, rec.link),
                        Op::Send { action, .. } => {
                            if let Some(e) = per_pass.get_mut(action) {
                                e.bytes_out = rec.bytes;
                                e.send_time = rec.end - rec.start;
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    let e = per_pass.entry(a).or_insert_with(|| {
                        order.push(a);
                        Event {
                            device: pos,
                            stage: self.schedule.stage(pos, a.chunk),
                            label: self.schedule.label(pos, &a),
                            action: a,
                            start: rec.start,
                            end: rec.end,
                            compute: 0.0,
                            tp_comm: 0.0,
                            bytes_out: 0,
                            send_time: 0.0,
                        }
                    });
                    e.start = e.start.min(rec.start);
                    e.end = e.end.max(rec.end);
                    let m = mine.entry(a).or_default();
                    m.0 += kernels;
                    m.1 += tp;
                }
                // the slowest rank's kernels, one rank's all-reduces (all wait for each other)
                for (a, (kernels, tp)) in mine {
                    if let Some(e) = per_pass.get_mut(&a) {
                        e.compute = e.compute.max(kernels + tp);
                        e.tp_comm = e.tp_comm.max(tp);
                    }
                }
            }
            events.extend(order.into_iter().filter_map(|a| per_pass.remove(&a)));
        }
        let per_replica = self.mesh.pp * self.mesh.tp;
        let runs = &run.runs[replica * per_replica..(replica + 1) * per_replica];
        let mut peak_held = vec![0usize; self.stages.len()];
        for &(stage, peak) in runs.iter().flat_map(|w| &w.peaks) {
            peak_held[stage] = peak_held[stage].max(peak);
        }
        Ok(StepReport {
            stats: runs[0].stats,
            events,
            wall: run.wall,
            peak_held,
            memory: runs.iter().map(|w| w.memory.clone()).collect(),
        })
    }
}
