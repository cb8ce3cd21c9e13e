//! One entry point for every layout: a [`Mesh`] (dp × tp × pp, schedule, microbatches,
//! chunks, ZeRO stage) placed on devices and trained step by step, with the per-axis costs of
//! each step (pipeline bubble, data- and tensor-parallel communication, exposed comm) and the
//! model state in the one-device layout for checkpoints, whatever the layout.
//!
//! ```text
//! Engine::new(gpus, cfg, mesh, opts) ─ every check once, before any device work
//!   └─ the one runtime: the layout lowered to one program per device, one worker per device
//!      (crate::runtime); one device is the dp = tp = pp = 1 lowering; every chunk's models
//!      and op lists are built once (ZeRO-3 binds its blocks in two gather slots)
//! step(batches = dp × m microbatches) ─▶ replica r takes the r-th share ─▶ StepCosts from
//!   the device-clock replay of every program and the communicators' ledgers
//! ```
//!
//! Every layout gives bits a test pins: one device = every pipeline schedule; plain data
//! parallelism = ZeRO 1–3 = dp × pp.

mod pooled;
pub use pooled::Pooled;

use crate::error::Result;
use crate::gpu::Gpu;
use crate::memory::Usage;
use crate::mesh::{Coords, Mesh};
use crate::model::Block;
use crate::pipeline::event::StepReport;
use crate::pipeline::theory::theory;
use crate::pipeline::Schedule;
use crate::runtime::replay::Clock;
pub use crate::runtime::RuntimeOptions;
use crate::runtime::{Runtime, RuntimeStep};
use crate::step::{ModelState, StepStats, TrainConfig};

/// Where one device's work sits.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Placement {
    pub device: usize,
    pub adapter: String,
    pub coords: Coords,
    /// The blocks of its stage ("emb h0 h1").
    pub blocks: String,
}

/// What one step cost, per axis.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepCosts {
    pub stats: StepStats,
    /// Σg² of each tensor before clipping, canonical order (the whole model's, every layout).
    #[serde(skip)]
    pub tensor_sq: Vec<(String, f32)>,
    /// Pipeline bubble of replica 0 on the device clock (idle share of the busiest device);
    /// `None` without pipeline parallelism or with the device clock off
    /// ([`RuntimeOptions::device_clock`]).
    pub bubble: Option<f64>,
    /// Analytic bubble of the schedule.
    pub bubble_theory: Option<f64>,
    /// Device-clock seconds of the whole step, every device's program replayed with its
    /// communication (kernels, tensor-parallel all-reduces, sends, overlapped gradient
    /// reductions, the norm, AdamW). This and the two device-clock comm figures below are 0
    /// with the device clock off.
    pub device_step: f64,
    /// Data-parallel gradient reductions (and ZeRO-1 gathers): bytes the busiest replica sent
    /// (summed over its devices), the link-model seconds of the busiest device's comm stream,
    /// and the seconds of it the compute did not hide.
    pub dp_bytes: u64,
    pub dp_comm: f64,
    pub dp_exposed: f64,
    /// Tensor-parallel all-reduces of replica 0's groups: bytes the busiest rank sent, and
    /// link-model seconds summed over the groups.
    pub tp_bytes: u64,
    pub tp_comm: f64,
    /// Wall seconds of the step.
    pub wall: f64,
    /// Queue submits, host waits for the device and compute dispatches of the busiest device
    /// of this process (each the most any of its devices counted).
    pub submits: u64,
    pub waits: u64,
    pub dispatches: u64,
    /// Per device: bytes held now and the peak of each memory-ledger category so far.
    pub memory: Vec<Usage>,
}

/// A model trained under one layout.
pub struct Engine {
    pub mesh: Mesh,
    pub cfg: TrainConfig,
    rt: Box<Runtime>,
    schedule: Schedule,
    placement: Vec<Placement>,
    /// The runtime's last step and its device clock (for its pipeline report and summary).
    last: Option<(RuntimeStep, Clock)>,
    /// The steps since [`Engine::pool_steps`] turned pooling on (`None`: off).
    pool: Option<Vec<RuntimeStep>>,
}

impl Engine {
    /// Checks `mesh` for `cfg` and `gpus.len()` devices, then places and initialises the model
    /// (every layout starts from one device's initial weights). `cfg.grad_accum` must equal
    /// `mesh.microbatches`: each replica accumulates that many microbatches per step.
    pub fn new(gpus: &[Gpu], cfg: TrainConfig, mesh: Mesh, opts: RuntimeOptions) -> Result<Engine> {
        let rt = Runtime::new(gpus, cfg, mesh, opts)?;
        let local: Vec<(usize, Gpu)> = gpus[..mesh.devices()].iter().cloned().enumerate().collect();
        Engine::around(rt, &local)
    }

    /// The engine of the devices `local` (global device, GPU) of a layout whose other devices
    /// run in other processes (see [`Runtime::distributed`]): `comms` are the local devices'
    /// communicators, `control` one rank per device for what the processes exchange. Every
    /// process of the run calls it with the same configuration; each then trains only its own
    /// devices, and every process sees the whole step's costs and the whole model state.
    pub fn distributed(
        local: &[(usize, Gpu)],
        cfg: TrainConfig,
        mesh: Mesh,
        opts: RuntimeOptions,
        comms: Vec<crate::runtime::Comms>,
        control: Box<dyn crate::comm::Communicator>,
    ) -> Result<Engine> {
        let rt = Runtime::distributed(local, cfg, mesh, opts, comms, control)?;
        Engine::around(rt, local)
    }

    fn around(rt: Runtime, local: &[(usize, Gpu)]) -> Result<Engine> {
        let (mesh, cfg) = (rt.mesh, rt.cfg.clone());
        let schedule = rt.schedule.clone();
        let stages = rt.stages.clone();
        let placement = (0..mesh.devices())
            .map(|d| {
                let c = mesh.coords(d);
                let blocks: Vec<String> = (0..mesh.chunks)
                    .flat_map(|k| stages[schedule.stage(c.stage, k)].clone())
                    .map(|b| b.short_name())
                    .collect();
                let adapter = match local.iter().find(|(x, _)| *x == d) {
                    Some((_, g)) => format!("{} ({})", g.adapter_name(), g.label),
                    None => "in another process".to_string(),
                };
                Placement {
                    device: d,
                    adapter,
                    coords: c,
                    blocks: blocks.join(" "),
                }
            })
            .collect();
        Ok(Engine {
            mesh,
            cfg,
            rt: Box::new(rt),
            schedule,
            placement,
            last: None,
            pool: None,
        })
    }

    /// Microbatches one step takes: dp × m (replica r takes the r-th contiguous share).
    pub fn batches_per_step(&self) -> usize {
        self.mesh.dp * self.mesh.microbatches
    }

    /// Whether this process writes the run's files (checkpoints, records): the only process,
    /// or rank 0 of a distributed run. Every process still takes part in gathering the state.
    pub fn is_lead(&self) -> bool {
        self.rt.is_lead()
    }

    /// The runtime underneath: its plan, workers and their communicators' ledgers.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The whole model on a local device of a layout that keeps it whole (see
    /// [`Runtime::whole_model`]): what the forward-only evaluator runs on between steps.
    pub fn whole_model(&self) -> Option<&crate::model::gpu_model::GpuModel> {
        self.rt.whole_model()
    }

    /// Where every device's work sits.
    pub fn placement(&self) -> &[Placement] {
        &self.placement
    }

    /// The lowered device programs (every layout has them).
    pub fn plan(&self) -> Option<&crate::runtime::Plan> {
        Some(&self.rt.plan)
    }

    /// The knobs the run was built with (the runtime's own: one options type for every layer).
    pub fn opts(&self) -> &RuntimeOptions {
        &self.rt.opts
    }

    /// The blocks of every model stage.
    pub fn stages(&self) -> Vec<Vec<Block>> {
        self.rt.stages.clone()
    }

    /// One device's compute at a time (clean device-clock times) or all at once, from the next
    /// step on.
    pub fn set_serial(&mut self, serial: bool) {
        self.rt.opts.serial = serial;
    }

    /// The last step of replica 0 as a pipeline report (one event per pass on the wall clock);
    /// `None` before the first step.
    pub fn report(&self) -> Result<Option<StepReport>> {
        match &self.last {
            Some((run, _)) => Ok(Some(self.rt.report(run, 0)?)),
            None => Ok(None),
        }
    }

    /// The last step, replica 0's, on both clocks next to theory; `tokens` per step.
    pub fn summary(&self, tokens: usize) -> Result<Option<crate::runtime::Summary>> {
        match &self.last {
            Some((run, clock)) => Ok(Some(self.rt.summary(run, clock, tokens)?)),
            None => Ok(None),
        }
    }

    /// The last step as a Chrome trace (device clock and wall clock).
    pub fn chrome_trace(&self) -> Result<Option<serde_json::Value>> {
        match &self.last {
            Some((run, clock)) => Ok(Some(self.rt.chrome_trace(run, clock)?)),
            None => Ok(None),
        }
    }

    /// One optimizer step, index `s` (sets the learning rate and Adam's bias correction).
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<StepCosts> {
        let t0 = std::time::Instant::now();
        let run = self.rt.step(batches, s)?;
        let wall = t0.elapsed().as_secs_f64();
        // no pass timed without the device clock: the ledgers' and counters' figures only
        let clock = match self.rt.opts.device_clock {
            true => Some(self.rt.clock(&run)?),
            false => None,
        };
        let mut c = costs(&self.rt, &run, clock.as_ref(), &self.schedule)?;
        c.wall = wall;
        c.memory = run.runs.iter().map(|w| w.memory.clone()).collect();
        let Some(clock) = clock else {
            self.last = None;
            return Ok(c);
        };
        if let Some(pool) = &mut self.pool {
            pool.push(run.clone());
        }
        self.last = Some((run, clock));
        Ok(c)
    }

    /// Parameters and AdamW moments in the one-device layout (replica 0's, or assembled from
    /// the ZeRO shards; all replicas hold the same bits).
    pub fn state(&self) -> Result<ModelState> {
        self.rt.state()
    }

    /// Loads a state (from any layout) into every replica, stage, tensor rank or shard.
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        self.rt.set_state(st)
    }

    /// Whether every data-parallel replica holds the same parameters, bit for bit.
    pub fn replicas_agree(&self) -> Result<bool> {
        self.rt.replicas_agree()
    }

    /// SHA-256 of the parameters in the one-device layout.
    pub fn checksum(&self) -> Result<String> {
        self.rt.checksum()
    }
}

/// The per-axis costs of a runtime step: the device-clock replay of every program (the bubble
/// over replica 0's passes, the whole step, exposed data-parallel comm) and the ledgers' bytes.
/// Without a clock (the device clock off) the device-clock figures are `None` / 0.
fn costs(
    rt: &Runtime,
    run: &RuntimeStep,
    clock: Option<&Clock>,
    schedule: &Schedule,
) -> Result<StepCosts> {
    let mesh = rt.mesh;
    let per_replica = mesh.pp * mesh.tp;
    let (bubble, bubble_theory) = match (mesh.pp > 1, clock) {
        (true, Some(clock)) => (Some(clock.bubble(0..per_replica)), Some(theory(schedule))),
        (true, None) => (None, Some(theory(schedule))),
        (false, _) => (None, None),
    };
    // a replica's data-parallel bytes: the sum over its devices (one group per stage and tensor
    // rank); the busiest replica
    let dp_bytes = (0..mesh.dp)
        .map(|r| {
            run.runs[r * per_replica..(r + 1) * per_replica]
                .iter()
                .map(|w| w.dp_sent)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let (mut tp_bytes, mut tp_comm) = (0u64, 0.0f64);
    for w in &run.runs[..per_replica] {
        tp_bytes = tp_bytes.max(w.tp_sent);
        if mesh.coords(w.device).tp_rank == 0 {
            tp_comm += w.tp_link;
        }
    }
    // the busiest device's count of each kind
    let most =
        |f: fn(&crate::gpu::Tally) -> u64| run.runs.iter().map(|w| f(&w.counts)).max().unwrap_or(0);
    Ok(StepCosts {
        stats: run.runs[0].stats,
        tensor_sq: run.runs[0].tensor_sq.clone(),
        bubble,
        bubble_theory,
        device_step: clock.map_or(0.0, |c| c.makespan),
        dp_bytes,
        dp_comm: clock.map_or(0.0, |c| c.dp_comm.iter().copied().fold(0.0, f64::max)),
        dp_exposed: clock.map_or(0.0, |c| c.exposed_dp),
        tp_bytes,
        tp_comm,
        wall: run.wall,
        submits: most(|t| t.submits),
        waits: most(|t| t.waits),
        dispatches: most(|t| t.dispatches),
        memory: Vec::new(),
    })
}
