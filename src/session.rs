//! A training run under any layout, as a user drives it: steps fed from a seeded data cursor,
//! a checkpoint every N steps (written atomically), resumption from a checkpoint written under
//! any layout, and a stop that leaves the last good checkpoint intact.
//!
//! ```text
//! Session::new(engine, corpus, seed) | Session::resume(engine, corpus, path)
//!   loop: batches ◀─ corpus.train_batch(cursor) × dp·m ─▶ engine.step(s) ─▶ s += 1
//!         every N steps: Checkpoint { params, m, v (one-device layout), s, cursor } ─▶ tmp ─▶ rename
//! ```
//!
//! Resuming restores exactly what the next step reads — parameters, AdamW moments, the step
//! index (learning-rate schedule, Adam's bias correction) and the data cursor — so training k
//! steps, saving, resuming and training k more gives the same bits as 2k steps straight.
//!
//! [`Session::run`] is the run loop a program drives: before every step it asks its stop
//! callback (a signal, or every rank's agreement on one), after every step it tells its
//! observer (progress, the run record, evaluation points); both may fail the run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::data::{Batcher, Corpus};
use crate::engine::{Engine, StepCosts};
use crate::error::{Error, Result};
use crate::step::ModelState;

/// Where and how often to checkpoint.
#[derive(Clone, Debug)]
pub struct CheckpointPolicy {
    pub path: PathBuf,
    /// Save after every `every` steps (0: only when asked).
    pub every: usize,
}

/// What [`Session::run`] tells its observer after every step.
pub struct StepDone {
    /// Index of the step just taken (the session's counter is now `step + 1`).
    pub step: usize,
    pub costs: StepCosts,
    /// Wall time of the step, its checkpoint (if one was due) included.
    pub seconds: f64,
}

/// How [`Session::run`] ended without an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd<S> {
    /// The step counter reached the end.
    Reached,
    /// The stop callback asked for a stop (with its reason) before the next step.
    Stopped(S),
}

/// An engine, its data cursor and its step counter.
pub struct Session<'c> {
    pub engine: Engine,
    corpus: &'c Corpus,
    batcher: Batcher,
    /// Index of the next step.
    pub step: usize,
    pub policy: Option<CheckpointPolicy>,
    /// Step count of the last checkpoint written or resumed from.
    pub last_checkpoint: Option<usize>,
    /// After a resume: the layout that wrote the checkpoint, and the training settings that
    /// differ from this run's ("key: checkpoint X, this run Y").
    pub resumed_from: Option<(String, Vec<String>)>,
}

impl<'c> Session<'c> {
    /// A fresh run: step 0, data cursor seeded with `seed`.
    pub fn new(engine: Engine, corpus: &'c Corpus, seed: u64) -> Session<'c> {
        Session {
            engine,
            corpus,
            batcher: Batcher::new(seed),
            step: 0,
            policy: None,
            last_checkpoint: None,
            resumed_from: None,
        }
    }

    /// Continues the run saved at `path`, whatever layout wrote it: the model must match the
    /// engine's and the corpus the checkpoint's dataset version.
    pub fn resume(engine: Engine, corpus: &'c Corpus, path: &Path) -> Result<Session<'c>> {
        let ck = Checkpoint::load_for(path, &engine.cfg.model)?;
        ck.check_dataset(&corpus.version)?;
        let train = serde_json::to_value(&engine.cfg)
            .map_err(|e| Error::Config(format!("train configuration: {e}")))?;
        let resumed_from = Some((ck.layout.clone(), ck.train_differences(&train)));
        engine.set_state(&ModelState {
            params: ck.params,
            m: ck.m,
            v: ck.v,
        })?;
        Ok(Session {
            engine,
            corpus,
            batcher: Batcher::from_state(ck.data_cursor),
            step: ck.step,
            policy: None,
            last_checkpoint: Some(ck.step),
            resumed_from,
        })
    }

    /// Saves to `policy.path` after every `policy.every` steps.
    pub fn with_checkpoints(mut self, policy: CheckpointPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// One step on the next dp × m microbatches; then a checkpoint if the policy says so.
    pub fn step_once(&mut self) -> Result<StepCosts> {
        let micro = self.engine.cfg.micro;
        let batches = (0..self.engine.batches_per_step())
            .map(|_| self.corpus.train_batch(&mut self.batcher, micro))
            .collect::<Result<Vec<_>>>()?;
        let costs = self.engine.step(&batches, self.step)?;
        self.step += 1;
        if let Some(p) = &self.policy {
            if p.every > 0 && self.step.is_multiple_of(p.every) {
                let path = p.path.clone();
                self.save(&path)?;
            }
        }
        Ok(costs)
    }

    /// Runs steps until the step counter reaches `end`, calling `each` after every step.
    pub fn run_until(&mut self, end: usize, mut each: impl FnMut(usize, &StepCosts)) -> Result<()> {
        while self.step < end {
            let c = self.step_once()?;
            each(self.step - 1, &c);
        }
        Ok(())
    }

    /// The run loop: steps until the counter reaches `end`. Before every step `stop` may end
    /// the run with its reason; after every step `observe` sees the session and the step.
    /// The first error (a step's, a checkpoint's, a callback's) ends the run.
    pub fn run<S, E: From<Error>>(
        &mut self,
        end: usize,
        mut stop: impl FnMut() -> std::result::Result<Option<S>, E>,
        mut observe: impl FnMut(&Session<'c>, StepDone) -> std::result::Result<(), E>,
    ) -> std::result::Result<RunEnd<S>, E> {
        while self.step < end {
            if let Some(why) = stop()? {
                return Ok(RunEnd::Stopped(why));
            }
            let step = self.step;
            let t0 = Instant::now();
            let costs = self.step_once()?;
            let seconds = t0.elapsed().as_secs_f64();
            observe(
                self,
                StepDone {
                    step,
                    costs,
                    seconds,
                },
            )?;
        }
        Ok(RunEnd::Reached)
    }

    /// Writes the state after the steps done so far to `path` (atomically). In a distributed
    /// run every process gathers the state (a collective) and only the lead process writes.
    pub fn save(&mut self, path: &Path) -> Result<()> {
        let st = self.engine.state()?;
        if !self.engine.is_lead() {
            self.last_checkpoint = Some(self.step);
            return Ok(());
        }
        let train = serde_json::to_value(&self.engine.cfg)
            .map_err(|e| Error::Config(format!("train configuration: {e}")))?;
        Checkpoint {
            model: self.engine.cfg.model,
            train,
            step: self.step,
            params: st.params,
            m: st.m,
            v: st.v,
            data_cursor: self.batcher.state(),
            // the layout and the precision it trained in (the state is f32 in both)
            layout: format!(
                "{} precision={}",
                self.engine.mesh.describe(),
                self.engine.opts().precision
            ),
            dataset_version: self.corpus.version.clone(),
        }
        .save(path)?;
        self.last_checkpoint = Some(self.step);
        Ok(())
    }
}
