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
    /// A pass: the blocks of its chunk, its kind, whether the chunk's backward is split into
    /// B and W (a B then computes input gradients only), the segments of the chunk it runs.
    Pass(Vec<Block>, Kind, bool, Range<usize>),
    /// AdamW over the device's chunks.
    Optimizer,
}

/// What the programs' ops do: each local chunk's blocks follow from the schedule's placement.
pub(crate) struct Works<'a> {
    pub plan: &'a Plan,
    pub schedule: &'a Schedule,
    /// The model stages' blocks.
    pub stages: &'a [Vec<Block>],
    /// What else sets a pass's work: model, microbatch shape, precision, recomputation, the
    /// data- and tensor-parallel degrees and ZeRO stage (`Debug` of each, joined).
    pub layout: String,
}

impl Works<'_> {
    /// `op`'s work, `None` for an op whose cost is the replayed step's own (communication).
    fn of(&self, p: &Program, op: &Op) -> Result<Option<Work>> {
        match op {
            Op::Compute { action, segs } => {
                let stage = self.schedule.stage(p.place.stage, action.chunk);
                let blocks = self.stages.get(stage);
                let shape = self.plan.shapes.get(p.place.stage);
                let split = shape.and_then(|s| s.get(action.chunk)).map(|c| c.split);
                let (Some(blocks), Some(split)) = (blocks, split) else {
                    return Err(Error::Config(format!(
                        "device {}: no model stage for chunk {} of pipeline position {}",
                        p.device, action.chunk, p.place.stage
                    )));
                };
                let w = Work::Pass(blocks.clone(), action.kind, split, segs.clone());
                Ok(Some(w))
            }
            Op::Optimizer => Ok(Some(Work::Optimizer)),
            _ => Ok(None),
        }
    }
}

/// Device seconds of repeated work, per device and per work, in the order they were added,
/// and the layout they were measured under.
#[derive(Clone, Debug, Default)]
pub struct PassTimes {
    layout: Option<String>,
    per_device: Vec<HashMap<Work, Vec<f64>>>,
}

impl PassTimes {
    /// The passes and optimizer of one step of `works` (`runs`: one per device, records
    /// aligned with its program's ops). Errors on a step of another layout than the times
    /// held.
    pub(crate) fn add(&mut self, works: &Works, runs: &[WorkerRun]) -> Result<()> {
        self.same_layout(&works.layout)?;
        self.layout = Some(works.layout.clone());
        let programs = &works.plan.programs;
        if self.per_device.len() < programs.len() {
            self.per_device.resize_with(programs.len(), HashMap::new);
        }
        for ((p, run), by) in programs.iter().zip(runs).zip(&mut self.per_device) {
            for (op, rec) in p.ops.iter().zip(&run.records) {
                if let Some(w) = works.of(p, op)? {
                    by.entry(w).or_default().push(rec.device);
                }
            }
        }
        Ok(())
    }

    fn same_layout(&self, layout: &str) -> Result<()> {
        match &self.layout {
            Some(mine) if mine != layout => Err(Error::Config(format!(
                "pass times measured under {mine} cannot cost a step under {layout}"
            ))),
            _ => Ok(()),
        }
    }

    /// Every sample of `other` after this one's. Errors when the two were measured under
    /// different layouts.
    pub fn extend(&mut self, other: &PassTimes) -> Result<()> {
        if let Some(theirs) = &other.layout {
            self.same_layout(theirs)?;
            self.layout = Some(theirs.clone());
        }
        if self.per_device.len() < other.per_device.len() {
            self.per_device
                .resize_with(other.per_device.len(), HashMap::new);
        }
        for (mine, theirs) in self.per_device.iter_mut().zip(&other.per_device) {
            for (w, v) in theirs {
                mine.entry(w.clone()).or_default().extend(v);
            }
        }
        Ok(())
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
            layout: self.layout.clone(),
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

    /// Per op of every device of `works`, its device-clock seconds: a pass or the optimizer at
    /// the `quantile` of its work's samples on its device (the sample of rank ⌊q·n⌋ in
    /// ascending order: 0.5 is the upper median of an even count), any other op its measured
    /// and link-model seconds in `last` (the replayed step). Errors when the times are of
    /// another layout or lack a pass of this one (another partition's).
    pub(crate) fn costs(
        &self,
        works: &Works,
        last: &[WorkerRun],
        quantile: f64,
    ) -> Result<Vec<Vec<f64>>> {
        self.same_layout(&works.layout)?;
        (works.plan.programs.iter().zip(last).enumerate())
            .map(|(d, (p, run))| {
                let by = self.per_device.get(d);
                let mut q: HashMap<Work, f64> = HashMap::new();
                (p.ops.iter().zip(&run.records))
                    .map(|(op, rec)| {
                        let Some(w) = works.of(p, op)? else {
                            return Ok(rec.device + rec.link);
                        };
                        if let Some(&c) = q.get(&w) {
                            return Ok(c);
                        }
                        let v = by.and_then(|by| by.get(&w));
                        let Some(c) = v.and_then(|v| at_quantile(v, quantile)) else {
                            return Err(Error::Config(format!(
                                "no measured time for device {d}'s {w:?}{}",
                                match self.fewest() {
                                    0 => ": no pass was timed",
                                    _ => ": the pass times come from another partition",
                                }
                            )));
                        };
                        q.insert(w, c);
                        Ok(c)
                    })
                    .collect()
            })
            .collect()
    }
}

/// The sample of rank ⌊q·n⌋ (clamped) of `v` in ascending order; `None` when empty.
fn at_quantile(v: &[f64], q: f64) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = (q.clamp(0.0, 1.0) * v.len() as f64) as usize;
    v.get(i.min(v.len().saturating_sub(1))).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device 0's times of one pass and of the optimizer.
    fn times(pass: &[f64], optimizer: &[f64]) -> PassTimes {
        let f = Work::Pass(vec![Block::Embedding], Kind::F, false, 0..1);
        let by = HashMap::from([(f, pass.to_vec()), (Work::Optimizer, optimizer.to_vec())]);
        PassTimes {
            layout: Some("a".into()),
            per_device: vec![by],
        }
    }

    #[test]
    fn the_quantile_is_the_sample_of_rank_q_n() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(at_quantile(&v, 0.0), Some(1.0));
        assert_eq!(at_quantile(&v, 0.1), Some(1.0));
        assert_eq!(at_quantile(&v, 0.5), Some(3.0), "the upper median");
        assert_eq!(at_quantile(&v, 1.0), Some(4.0));
        assert_eq!(at_quantile(&[], 0.5), None);
    }

    #[test]
    fn fewest_counts_passes_not_the_optimizer() {
        assert_eq!(PassTimes::default().fewest(), 0);
        assert_eq!(times(&[1.0, 2.0, 3.0], &[9.0]).fewest(), 3);
    }

    #[test]
    fn halves_split_each_work_in_time_the_first_rounded_up() {
        let [a, b] = times(&[1.0, 2.0, 3.0], &[9.0]).halves();
        let f = Work::Pass(vec![Block::Embedding], Kind::F, false, 0..1);
        assert_eq!(a.per_device[0][&f], [1.0, 2.0]);
        assert_eq!(b.per_device[0][&f], [3.0]);
        // one sample: both halves keep it, so neither is empty
        assert_eq!(a.per_device[0][&Work::Optimizer], [9.0]);
        assert_eq!(b.per_device[0][&Work::Optimizer], [9.0]);
    }

    #[test]
    fn times_of_another_layout_are_refused() {
        let mut t = times(&[1.0], &[1.0]);
        let mut other = times(&[2.0], &[2.0]);
        other.layout = Some("b".into());
        let e = t.extend(&other).expect_err("another layout");
        assert!(e.to_string().contains("cannot cost"), "{e}");
        t.extend(&times(&[2.0], &[2.0])).expect("the same layout");
        assert_eq!(t.fewest(), 2);
    }
}
