//! The measured device times of the ops that do the same work every time (a chunk's F, B or
//! W over the same segments, the optimizer), gathered per device and per work, and the per-op
//! costs the device clock replays from them.
//!
//! Such an op's times differ only by the host's noise: they pool over the steps of one engine
//! and over engines of one partition (the same chunks on the same devices; the microbatch
//! count and the schedule's order do not change a pass's work). Its cost is a quantile of its
//! samples, so a step can be replayed on times measured in other steps (one device at a time,
//! say, while the replayed step ran concurrently); communication is costed from the replayed
//! step itself (its link-model seconds).
//!
//! ```text
//! per device: Work::Pass(chunk, kind, segments) | Work::Optimizer → [seconds, as measured]
//! ```

use std::collections::HashMap;
use std::ops::Range;

use super::ir::{Op, Plan, Program};
use super::worker::WorkerRun;
use crate::error::{Error, Result};
use crate::model::Block;
use crate::pipeline::schedule::Kind;
use crate::pipeline::Schedule;

/// One kind of work a device repeats.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    /// A pass: the blocks of its chunk, its kind, the segments of the chunk it runs.
    Pass(Vec<Block>, Kind, Range<usize>),
    /// AdamW over the device's chunks.
    Optimizer,
}

/// What the programs' ops do: each local chunk's blocks follow from the schedule's placement.
#[derive(Clone, Copy)]
pub(crate) struct Works<'a> {
    pub plan: &'a Plan,
    pub schedule: &'a Schedule,
    /// The model stages' blocks.
    pub stages: &'a [Vec<Block>],
}

impl Works<'_> {
    fn of(&self, p: &Program, op: &Op) -> Option<Work> {
        match op {
            Op::Compute { action, segs } => {
                let stage = self.schedule.stage(p.place.stage, action.chunk);
                let blocks = self.stages.get(stage)?.clone();
                Some(Work::Pass(blocks, action.kind, segs.clone()))
            }
            Op::Optimizer => Some(Work::Optimizer),
            _ => None,
        }
    }
}

/// Device seconds of repeated work, per device and per work, in the order they were added.
#[derive(Clone, Debug, Default)]
pub struct PassTimes {
    per_device: Vec<HashMap<Work, Vec<f64>>>,
}

impl PassTimes {
    /// The passes and optimizer of one step of `works` (`runs`: one per device, records
    /// aligned with its program's ops).
    pub(crate) fn add(&mut self, works: Works, runs: &[WorkerRun]) {
        let programs = &works.plan.programs;
        if self.per_device.len() < programs.len() {
            self.per_device.resize_with(programs.len(), HashMap::new);
        }
        for ((p, run), by) in programs.iter().zip(runs).zip(&mut self.per_device) {
            for (op, rec) in p.ops.iter().zip(&run.records) {
                if let Some(w) = works.of(p, op) {
                    by.entry(w).or_default().push(rec.device);
                }
            }
        }
    }

    /// Every sample of `other` after this one's.
    pub fn extend(&mut self, other: &PassTimes) {
        if self.per_device.len() < other.per_device.len() {
            self.per_device
                .resize_with(other.per_device.len(), HashMap::new);
        }
        for (mine, theirs) in self.per_device.iter_mut().zip(&other.per_device) {
            for (w, v) in theirs {
                mine.entry(w.clone()).or_default().extend(v);
            }
        }
    }

    /// The fewest samples of any pass on any device (0 when none was added). The optimizer,
    /// once a step, is not counted.
    pub fn fewest(&self) -> usize {
        let passes = self.per_device.iter().flat_map(|by| {
            by.iter()
                .filter(|(w, _)| matches!(w, Work::Pass(..)))
                .map(|(_, v)| v.len())
        });
        passes.min().unwrap_or(0)
    }

    /// The samples split in time: each work's first half (rounded up) and the rest, both
    /// non-empty where it has two samples or more.
    pub fn halves(&self) -> [PassTimes; 2] {
        let split = |at_first: bool| PassTimes {
            per_device: (self.per_device.iter())
                .map(|by| {
                    by.iter()
                        .map(|(w, v)| {
                            let (a, b) = v.split_at(v.len().div_ceil(2));
                            let half = if at_first || b.is_empty() { a } else { b };
                            (w.clone(), half.to_vec())
                        })
                        .collect()
                })
                .collect(),
        };
        [split(true), split(false)]
    }

    /// Per op of every device of `plan`, its device-clock seconds: a pass or the optimizer at
    /// the `quantile` (0.5: the median) of its work's samples on its device, any other op its
    /// measured and link-model seconds in `last` (the replayed step). Errors when a pass has
    /// no sample here (another partition's times).
    pub(crate) fn costs(
        &self,
        works: Works,
        last: &[WorkerRun],
        quantile: f64,
    ) -> Result<Vec<Vec<f64>>> {
        let at = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            let i = (quantile.clamp(0.0, 1.0) * v.len() as f64) as usize;
            v[i.min(v.len() - 1)]
        };
        (works.plan.programs.iter().zip(last).enumerate())
            .map(|(d, (p, run))| {
                let by = self.per_device.get(d);
                let mut q: HashMap<Work, f64> = HashMap::new();
                (p.ops.iter().zip(&run.records))
                    .map(|(op, rec)| {
                        let Some(w) = works.of(p, op) else {
                            return Ok(rec.device + rec.link);
                        };
                        if let Some(&c) = q.get(&w) {
                            return Ok(c);
                        }
                        let v = by.and_then(|by| by.get(&w)).filter(|v| !v.is_empty());
                        let Some(v) = v else {
                            return Err(Error::Config(format!(
                                "no measured time for device {d}'s {w:?}: the pass times \
                                 come from another partition"
                            )));
                        };
                        let c = at(v);
                        q.insert(w, c);
                        Ok(c)
                    })
                    .collect()
            })
            .collect()
    }
}
