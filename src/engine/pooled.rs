//! The device clock of an engine's steps on pass times pooled over steps, and over engines
//! of one partition ([`PassTimes`]): a sweep's points read their passes from one sample.

use super::Engine;
use crate::error::Result;
use crate::runtime::{PassTimes, RuntimeStep};

/// A step on the device clock of pass times pooled over steps ([`Engine::pooled`]).
#[derive(Clone, Debug)]
pub struct Pooled {
    /// The last step replayed with each pass at the asked quantile of its kind on its device
    /// over the pass times given.
    pub summary: crate::runtime::Summary,
    /// The lowest and highest device-clock bubble of the same replay on the earlier and the
    /// later half of those times.
    pub bubble_range: [f64; 2],
    /// Steps this engine holds pooled (0 once `pool_steps(false)` dropped them: the times
    /// given may still have come from them).
    pub steps: usize,
    /// The replayed step as a Chrome trace, when asked for.
    pub trace: Option<serde_json::Value>,
}

impl Engine {
    /// From the next step on, keep every step to pool the device clock over them
    /// ([`Engine::pooled`]); `false` stops pooling and drops them.
    pub fn pool_steps(&mut self, on: bool) {
        self.pool = on.then(Vec::new);
    }

    /// The last step (pooled or not, one device at a time or not) replayed with each pass and
    /// the optimizer at the `quantile` of its work's samples on its device in `times` (0.5: the
    /// median; a low quantile is a quiet host's figure, as interference only ever adds time):
    /// this engine's pooled steps' ([`Engine::pass_times`]), or times carried over engines of
    /// the same partition, so every point of a sweep over the microbatch count reads its
    /// passes from one large sample, and a step whose devices ran concurrently reads the times
    /// they take alone. `tokens` per step, `trace` whether to draw the Chrome trace too. Its
    /// `bubble_range` is the same replay on the samples' earlier and later halves in time: how
    /// far the figure moves with when its passes were measured. `None` before a step with the
    /// device clock on; an error when `times` are of another layout or lack a pass of this
    /// engine (another partition's).
    pub fn pooled(
        &self,
        times: &PassTimes,
        tokens: usize,
        trace: bool,
        quantile: f64,
    ) -> Result<Option<Pooled>> {
        let Some((step, _)) = &self.last else {
            return Ok(None);
        };
        let mut range = [f64::INFINITY, f64::NEG_INFINITY];
        for half in times.halves() {
            let replica = 0..self.mesh.pp * self.mesh.tp;
            let b = self.rt.clock_on(&half, step, quantile)?.bubble(replica);
            range = [range[0].min(b), range[1].max(b)];
        }
        let clock = self.rt.clock_on(times, step, quantile)?;
        Ok(Some(Pooled {
            summary: self.rt.summary(step, &clock, tokens)?,
            bubble_range: range,
            steps: self.pool.as_ref().map_or(0, Vec::len),
            trace: match trace {
                true => Some(self.rt.chrome_trace(step, &clock)?),
                false => None,
            },
        }))
    }

    /// The pooled steps' pass times, to carry to another engine of the same partition
    /// ([`Engine::pooled`]); `None` before a pooled step or with pooling off.
    pub fn pass_times(&self) -> Result<Option<PassTimes>> {
        let steps: Vec<&RuntimeStep> = self.pool.iter().flatten().collect();
        match steps.is_empty() {
            true => Ok(None),
            false => self.rt.pass_times(&steps).map(Some),
        }
    }

    /// The seconds of every op of every device over the pooled steps, each pass at the
    /// `quantile` of its kind on its device (what [`Engine::pooled`] replays at that quantile
    /// on [`Engine::pass_times`] when the last step is the last pooled one); `None` before a
    /// pooled step.
    pub fn pooled_costs(&self, quantile: f64) -> Result<Option<Vec<Vec<f64>>>> {
        let steps: Vec<&RuntimeStep> = self.pool.iter().flatten().collect();
        match steps.is_empty() {
            true => Ok(None),
            false => self.rt.costs_over(&steps, quantile).map(Some),
        }
    }
}
