//! The runtime's device clock: a step's programs replayed with each pass at a quantile of
//! its measured times ([`PassTimes`]), communication at its link-model time.

use super::{Runtime, RuntimeStep};
use crate::error::{Error, Result};
use crate::runtime::pass_times::{PassTimes, Works};
use crate::runtime::replay::{replay, Clock};

impl Runtime {
    /// The step on the device clock: every program replayed with its ops' measured kernel
    /// seconds (each pass at the median of its kind on its device) and link-model
    /// communication seconds.
    pub fn clock(&self, run: &RuntimeStep) -> Result<Clock> {
        self.clock_on(&self.pass_times(&[run])?, run, 0.5)
    }

    /// Device-clock seconds of every op of the last of `steps`, each pass at the `quantile` of
    /// its kind on its device over all of them (a low quantile is a quiet host's figure:
    /// interference only ever adds time). Errors on no step.
    pub fn costs_over(&self, steps: &[&RuntimeStep], quantile: f64) -> Result<Vec<Vec<f64>>> {
        let Some(last) = steps.last() else {
            return Err(Error::Config(
                "a device clock needs at least one step".into(),
            ));
        };
        self.costs_on(&self.pass_times(steps)?, last, quantile)
    }

    /// `step` on the device clock with each pass at the `quantile` of its work's samples on its
    /// device in `times` (pooled over steps of this runtime or of another of the same
    /// partition), communication from `step` itself.
    pub fn clock_on(&self, times: &PassTimes, step: &RuntimeStep, quantile: f64) -> Result<Clock> {
        replay(
            &self.plan,
            &self.mesh,
            &self.costs_on(times, step, quantile)?,
        )
    }

    fn costs_on(
        &self,
        times: &PassTimes,
        step: &RuntimeStep,
        quantile: f64,
    ) -> Result<Vec<Vec<f64>>> {
        if !self.opts.device_clock {
            return Err(Error::Config(
                "the device clock is off (RuntimeOptions::device_clock): no pass was timed".into(),
            ));
        }
        times.costs(&self.works(), &step.runs, quantile)
    }

    /// What each op of the programs does, and the layout that sets a pass's work.
    fn works(&self) -> Works<'_> {
        let (m, o) = (&self.mesh, &self.opts);
        Works {
            plan: &self.plan,
            schedule: &self.schedule,
            stages: &self.stages,
            layout: format!(
                "{:?} {:?} {:?} {:?} {:?} dp {} tp {} ZeRO-{}",
                self.cfg.model,
                self.cfg.micro,
                o.precision,
                o.recompute,
                o.accumulation,
                m.dp,
                m.tp,
                m.zero
            ),
        }
    }

    /// The device times of `steps`' passes and optimizer, to pool across runtimes of one
    /// partition ([`Runtime::clock_on`]).
    pub fn pass_times(&self, steps: &[&RuntimeStep]) -> Result<PassTimes> {
        let works = self.works();
        let mut times = PassTimes::default();
        for s in steps {
            times.add(&works, &s.runs)?;
        }
        Ok(times)
    }
}
