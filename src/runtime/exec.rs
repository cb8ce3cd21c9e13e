//! The runtime of a layout: its workers (one per device of this process), their communicator
//! groups, and the step that runs every worker's program on a persistent thread of its own.
//!
//! ```text
//! Runtime::new: Mesh ─▶ chunks per device ─▶ shapes ─lower─▶ Plan ─check─▶ workers + groups
//! step(dp × m microbatches): worker d ◀─ its replica's m microbatches, on its own thread
//!   (one per worker, started with the runtime); the first failure (not the aborts it caused
//!   in its peers) is the step's error
//! ```

mod clock;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::check;
use super::chunk::{Chunk, ChunkInfo, ChunkSpec};
use super::crew::Crew;
use super::exchange::{exchange_runs, exchange_shapes, ShapesByStage};
use super::groups::groups;
use super::ir::{ChunkShape, Plan};
use super::lower::lower_with;
pub use super::options::{CommKind, RuntimeOptions};
use super::turn::Turn;
use super::worker::{Comms, StepIn, Worker, WorkerRun};
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::mesh::Mesh;
use crate::model::{Block, TpRank};
use crate::parallel::accumulate::Accumulation;
use crate::pipeline::partition::stage_blocks;
use crate::pipeline::Schedule;
use crate::step::TrainConfig;

/// A layout's workers and programs.
pub struct Runtime {
    pub mesh: Mesh,
    pub cfg: TrainConfig,
    pub schedule: Schedule,
    pub plan: Plan,
    /// Blocks of each model stage.
    pub stages: Vec<Vec<Block>>,
    pub opts: RuntimeOptions,
    /// The workers of the devices this process runs (every device, unless distributed), in
    /// device order.
    pub workers: Vec<Worker>,
    /// Distributed: every device's process, for what the processes exchange between steps
    /// (chunk shapes, step records, model state). `None` when this process runs every device.
    control: Option<Mutex<Box<dyn Communicator>>>,
    /// A step failed: the groups were aborted and are rebuilt before the next step.
    broken: bool,
    /// One persistent thread per worker; a step lends each its worker (so `workers` holds
    /// fewer than the crew's threads only if one was lost).
    crew: Crew,
}

/// What one step did on every worker.
#[derive(Clone)]
pub struct RuntimeStep {
    pub runs: Vec<WorkerRun>,
    pub wall: f64,
}

impl Runtime {
    /// Places `cfg.model` on `gpus` (one per device of `mesh`), every device initialised from
    /// one device's weights; lowers and checks the programs.
    pub fn new(
        gpus: &[Gpu],
        cfg: TrainConfig,
        mesh: Mesh,
        opts: RuntimeOptions,
    ) -> Result<Runtime> {
        super::options::validate(&cfg, &mesh, &opts, gpus.len())?;
        let local: Vec<(usize, Gpu)> = gpus[..mesh.devices()].iter().cloned().enumerate().collect();
        let comms = groups(&mesh, &opts);
        Runtime::build(&local, cfg, mesh, opts, comms, None)
    }

    /// The runtime of the devices `local` (global device, its GPU) of a layout whose other
    /// devices run in other processes: `comms` are the local devices' communicators (in the
    /// order of `local`) and `control` a communicator over one rank per device (rank = global
    /// device) on which the processes exchange chunk shapes, step records and model state.
    /// Every process must call it, with the same configuration.
    pub fn distributed(
        local: &[(usize, Gpu)],
        cfg: TrainConfig,
        mesh: Mesh,
        opts: RuntimeOptions,
        comms: Vec<Comms>,
        control: Box<dyn Communicator>,
    ) -> Result<Runtime> {
        super::options::validate(&cfg, &mesh, &opts, mesh.devices())?;
        if control.size() != mesh.devices() {
            return Err(Error::Config(format!(
                "{} needs {} ranks, the world has {}",
                mesh.describe(),
                mesh.devices(),
                control.size()
            )));
        }
        Runtime::build(local, cfg, mesh, opts, comms, Some(control))
    }

    fn build(
        local: &[(usize, Gpu)],
        cfg: TrainConfig,
        mesh: Mesh,
        opts: RuntimeOptions,
        comms: Vec<Comms>,
        mut control: Option<Box<dyn Communicator>>,
    ) -> Result<Runtime> {
        if local.len() != comms.len() || local.iter().any(|(d, _)| *d >= mesh.devices()) {
            return Err(Error::Config(format!(
                "{} local devices {:?} with {} sets of communicators",
                local.len(),
                local.iter().map(|x| x.0).collect::<Vec<_>>(),
                comms.len()
            )));
        }
        let schedule = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks)?;
        crate::pipeline::validate(&schedule, opts.channel_bound)?;
        let stages = stage_blocks(&cfg.model, schedule.stages(), &opts.balance)?;
        // every local device's stages fit before anything is allocated anywhere
        for (d, gpu) in local {
            for k in 0..mesh.chunks {
                let blocks = &stages[schedule.stage(mesh.coords(*d).stage, k)];
                crate::model::fit::check(&cfg.model, blocks, cfg.micro, mesh.tp, &gpu.limits)?;
            }
        }
        super::precision::check(mesh, &opts)?;
        let slots = schedule.slots_needed();
        let dloss = 1.0 / (cfg.tokens_per_step() * mesh.dp) as f32;
        let mut chunks: Vec<Vec<Chunk>> = Vec::with_capacity(local.len());
        for (d, gpu) in local {
            let at = mesh.coords(*d);
            let mine = (0..mesh.chunks)
                .map(|k| {
                    let stage = schedule.stage(at.stage, k);
                    let spec = ChunkSpec {
                        stage,
                        blocks: &stages[stage],
                        slots: slots[at.stage][k],
                        tp: TpRank {
                            t: mesh.tp,
                            r: at.tp_rank,
                        },
                        dp: (at.replica, mesh.dp),
                        zero: mesh.zero,
                        split: schedule.kind.split_backward(),
                        bucket_bytes: opts.bucket_bytes,
                        dloss,
                        tree: (opts.accumulation == Accumulation::PairwiseTree)
                            .then_some(mesh.microbatches),
                        recompute: opts.recompute,
                        precision: opts.precision,
                    };
                    Chunk::new(gpu, &cfg, &spec)
                })
                .collect::<Result<Vec<_>>>()?;
            chunks.push(mine);
        }
        // every device of a pipeline position cuts its chunks alike: the position's shapes
        // from its devices here, and (distributed) from the other processes'
        let mut by_stage: ShapesByStage = vec![Vec::new(); mesh.pp];
        for ((d, _), cs) in local.iter().zip(&chunks) {
            let shape: Vec<ChunkShape> = cs.iter().map(|c| c.shape.clone()).collect();
            by_stage[mesh.coords(*d).stage].push((*d, shape));
        }
        if let Some(c) = control.as_mut() {
            by_stage = exchange_shapes(&mut **c, by_stage)?;
        }
        let mut shapes: Vec<Vec<ChunkShape>> = Vec::with_capacity(mesh.pp);
        for (s, all) in by_stage.iter().enumerate() {
            let (_, first) = all.first().ok_or_else(|| {
                Error::Config(format!(
                    "no device reported the chunks of pipeline position {s}"
                ))
            })?;
            if let Some((d, _)) = all.iter().find(|(_, sh)| sh != first) {
                return Err(Error::Config(format!(
                    "device {d}'s chunks are cut differently from its stage's first device"
                )));
            }
            shapes.push(first.clone());
        }
        let plan = lower_with(&mesh, &schedule, &shapes, opts.prefetch)?;
        check(&plan, &mesh, &schedule, opts.channel_bound)?;
        let workers: Vec<Worker> = chunks
            .into_iter()
            .zip(comms)
            .zip(local)
            .map(|((chunks, comms), (d, gpu))| Worker {
                device: *d,
                place: mesh.coords(*d),
                gpu: gpu.clone(),
                chunks,
                comms,
                ops: plan.programs[*d].ops.clone(),
                schedule: schedule.clone(),
                cfg: cfg.clone(),
                mesh,
                canonical: cfg.model.canonical_names(),
                dp_algo: opts.dp_algo,
                loss_log: None,
            })
            .collect();
        let crew = Crew::new(&workers.iter().map(|w| w.device).collect::<Vec<_>>())?;
        Ok(Runtime {
            crew,
            mesh,
            cfg,
            schedule,
            plan,
            stages,
            opts,
            workers,
            control: control.map(Mutex::new),
            broken: false,
        })
    }

    /// Whether this process writes the run's files: the only process, or rank 0 of a
    /// distributed run.
    pub fn is_lead(&self) -> bool {
        self.control().is_none_or(|c| c.rank() == 0)
    }

    /// The communicator over every device's process, locked (distributed runs only).
    pub(super) fn control(&self) -> Option<std::sync::MutexGuard<'_, Box<dyn Communicator>>> {
        self.control
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Global device `device`'s chunks (one per pipeline chunk it runs).
    pub fn chunks(&self, device: usize) -> Vec<ChunkInfo> {
        self.workers
            .get(device)
            .map(|w| w.chunks.iter().map(Chunk::info).collect())
            .unwrap_or_default()
    }

    /// Microbatches one step takes: dp × m (replica r takes the r-th contiguous share).
    pub fn batches_per_step(&self) -> usize {
        self.mesh.dp * self.mesh.microbatches
    }

    /// One optimizer step, index `s`, over `batches` (dp × m microbatches).
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<RuntimeStep> {
        let m = self.mesh.microbatches;
        if batches.len() != self.batches_per_step() {
            return Err(Error::Config(format!(
                "a step of {} needs {} microbatches, got {}",
                self.mesh.describe(),
                self.batches_per_step(),
                batches.len()
            )));
        }
        if self.broken && self.control.is_some() {
            return Err(Error::Config(
                "an earlier step failed and aborted the process groups of this distributed run; \
                 restart it from its last checkpoint"
                    .into(),
            ));
        }
        if std::mem::take(&mut self.broken) {
            // the last step aborted its groups: fresh ones, the ledgers carried over
            let mut fresh = groups(&self.mesh, &self.opts);
            for w in &mut self.workers {
                let mut c = fresh.remove(0);
                for (new, old) in [
                    (&mut c.pp, &w.comms.pp),
                    (&mut c.tp, &w.comms.tp),
                    (&mut c.dp, &w.comms.dp),
                    (&mut c.world, &w.comms.world),
                ] {
                    *new.ledger_mut() = old.ledger().clone();
                }
                w.comms = c;
            }
        }
        if self.workers.len() != self.crew.len() {
            return Err(Error::Device(
                "a worker was lost with its thread in an earlier step; rebuild the runtime from \
                 the last checkpoint"
                    .into(),
            ));
        }
        let serial = self
            .opts
            .serial
            .then(|| Turn::new(self.opts.serial_lock.as_deref()).map(Arc::new))
            .transpose()?;
        let t0 = Instant::now();
        let jobs: Vec<(Worker, StepIn)> = std::mem::take(&mut self.workers)
            .into_iter()
            .map(|w| {
                let r = w.place.replica;
                let input = StepIn {
                    batches: batches[r * m..(r + 1) * m].to_vec(),
                    step: s,
                    fault: self.opts.fault,
                    reduce_fault: self.opts.reduce_fault,
                    grad_scale: self.opts.grad_scale.clone(),
                    serial: serial.clone(),
                    timed: self.opts.device_clock,
                    t0,
                };
                (w, input)
            })
            .collect();
        let done = self.crew.step(jobs);
        let wall = t0.elapsed().as_secs_f64();
        let done = done.inspect_err(|_| self.broken = true)?;
        let mut runs = Vec::with_capacity(done.len());
        let mut failures = Vec::new();
        for (w, r) in done {
            self.workers.push(w);
            match r {
                Ok(run) => runs.push(run),
                Err(f) => failures.push(f),
            }
        }
        if !failures.is_empty() {
            self.broken = true;
            let pick = failures.iter().position(|f| f.primary).unwrap_or(0);
            let error = failures.swap_remove(pick).error;
            if let Some(c) = self.control() {
                // the other processes may be past their last message to us: tell them
                c.abort(&error.to_string());
            }
            return Err(error);
        }
        let devices = self.mesh.devices();
        let exchanged = self
            .control()
            .map(|mut c| exchange_runs(&mut **c, std::mem::take(&mut runs), devices));
        match exchanged {
            Some(Ok(all)) => runs = all,
            Some(Err(e)) => {
                self.broken = true;
                return Err(e);
            }
            None => {}
        }
        Ok(RuntimeStep { runs, wall })
    }
}
