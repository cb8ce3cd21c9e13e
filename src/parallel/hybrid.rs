//! Data parallelism over pipelines: d pipeline replicas of p stages each (dp × pp devices),
//! each stage optionally a tensor-parallel group of t GPUs (dp × tp × pp devices).
//!
//! ```text
//!            stage 0   stage 1   …  stage p−1
//! replica 0   dev 0     dev 1        dev p−1      each replica runs the schedule on its share
//! replica 1   dev p     dev p+1      dev 2p−1     of the global batch; then stage s's gradients
//!   …           └── all-reduce over replicas ──┘  are averaged across the replicas' stage s
//! ```
//!
//! With tensor parallelism, replica r uses GPUs `[r·p·t, (r+1)·p·t)` and the all-reduce runs
//! per (stage, tensor-parallel rank): rank k of stage s of every replica holds the same slice.
//!
//! Each replica weights its tokens as its own batch's mean, so the mean over replicas
//! (`Opts::mean`, division once on the full sum) is the global batch's mean gradient.

use crate::collective::{self, Algo, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::link::Link;
use crate::optim::{global_norm_sq, global_norm_sq_parts};
use crate::parallel::zero1::ShardedGroup;
use crate::pipeline::executor::{Options, Pipeline, StepReport};
use crate::pipeline::partition::Balance;
use crate::pipeline::Schedule;
use crate::step::{ModelState, StepStats, TrainConfig};

pub struct DpPipeline {
    pub pipes: Vec<Pipeline>,
    pub algo: Algo,
    pub link: Link,
    pub ledger: Ledger,
    /// Each replica's report of the last step (events for the timeline and bubble).
    pub reports: Vec<StepReport>,
    /// ZeRO-1: one sharded optimizer per (stage, tensor rank) data-parallel group; empty
    /// without sharding.
    pub zero1: Vec<ShardedGroup>,
    canonical: Vec<String>,
}

impl DpPipeline {
    /// `gpus.len()` must be d × p × t (t = `opts.tp`); replica r uses devices
    /// `[r·p·t, (r+1)·p·t)`. `cfg.grad_accum` is the microbatches per replica (= the
    /// schedule's m).
    pub fn new(
        gpus: &[Gpu],
        dp: usize,
        cfg: TrainConfig,
        schedule: Schedule,
        balance: &Balance,
        opts: Options,
    ) -> Result<DpPipeline> {
        DpPipeline::with_zero(gpus, dp, cfg, schedule, balance, opts, 0)
    }

    /// Like [`DpPipeline::new`] with ZeRO stage `zero` over each (stage, tensor rank)'s
    /// data-parallel group: 0 (none) or 1 (sharded optimizer state, [`ShardedGroup`]).
    #[allow(clippy::too_many_arguments)]
    pub fn with_zero(
        gpus: &[Gpu],
        dp: usize,
        cfg: TrainConfig,
        schedule: Schedule,
        balance: &Balance,
        opts: Options,
        zero: usize,
    ) -> Result<DpPipeline> {
        if zero > 1 {
            return Err(Error::Config(format!(
                "ZeRO stage {zero} is not offered with pipeline or tensor-parallel stages (as in \
                 DeepSpeed): use --zero 1 there, or --tp 1 --pp 1 for stages 2 and 3"
            )));
        }
        let (p, t) = (schedule.p, opts.tp);
        if dp == 0 || gpus.len() != dp * p * t {
            return Err(Error::Config(format!(
                "dp × tp × pp = {dp} × {t} × {p} needs {} devices, got {}",
                dp * p * t,
                gpus.len()
            )));
        }
        let per = p * t;
        let pipes = (0..dp)
            .map(|r| {
                Pipeline::new(
                    &gpus[r * per..(r + 1) * per],
                    cfg.clone(),
                    schedule.clone(),
                    balance,
                    Options {
                        device_base: opts.device_base + r * per,
                        external_optimizer: zero == 1,
                        ..opts.clone()
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let mut zero1 = Vec::new();
        if zero == 1 {
            let models: Vec<Vec<_>> = pipes.iter().map(|p| p.stage_models()).collect();
            for (i, &(stage, k, _)) in models[0].iter().enumerate() {
                let group: Vec<_> = models.iter().map(|m| m[i].2).collect();
                zero1.push(ShardedGroup::new(&group, stage, k)?);
            }
        }
        Ok(DpPipeline {
            canonical: cfg.model.canonical_names(),
            pipes,
            algo: Algo::Ring,
            link: Link::nvlink(),
            ledger: Ledger::new(),
            reports: Vec::new(),
            zero1,
        })
    }

    /// Parameters and AdamW moments in the one-device layout (replica 0's parameters; the
    /// moments from their shards under ZeRO-1).
    pub fn state(&self) -> Result<ModelState> {
        if self.zero1.is_empty() {
            return self.pipes[0].state();
        }
        let group = |stage: usize, k: usize| {
            self.zero1
                .iter()
                .find(|g| g.stage == stage && g.tp_rank == k)
                .ok_or_else(|| Error::Config(format!("no ZeRO-1 group for stage {stage}")))
        };
        let p0 = &self.pipes[0];
        Ok(ModelState {
            params: p0.gather_params()?,
            m: p0.gather_with(|st, k, _| group(st, k)?.moments(false))?,
            v: p0.gather_with(|st, k, _| group(st, k)?.moments(true))?,
        })
    }

    /// Loads a state given in the one-device layout into every replica (and shard).
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        if self.zero1.is_empty() {
            return self.pipes.iter().try_for_each(|p| p.set_state(st));
        }
        for p in &self.pipes {
            p.scatter_with(&st.params, |_, _, m, local| {
                m.gpu.upload(&m.buffers.params, &local)
            })?;
        }
        for (second, src) in [(false, &st.m), (true, &st.v)] {
            self.pipes[0].scatter_with(src, |stage, k, _, local| {
                self.zero1
                    .iter()
                    .find(|g| g.stage == stage && g.tp_rank == k)
                    .ok_or_else(|| Error::Config(format!("no ZeRO-1 group for stage {stage}")))?
                    .set_moments(second, &local)
            })?;
        }
        Ok(())
    }

    /// One step over `dp × m` microbatches: replica r takes the r-th contiguous share.
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<StepStats> {
        let dp = self.pipes.len();
        let m = self.pipes[0].schedule.m;
        if batches.len() != dp * m {
            return Err(Error::Config(format!(
                "a dp × pp step needs {} microbatches, got {}",
                dp * m,
                batches.len()
            )));
        }
        // each replica checks its own loss and gradients before they are mixed
        let run = |pipe: &mut Pipeline, share: &[(Vec<u32>, Vec<u32>)]| -> Result<StepReport> {
            let rep = pipe.run_schedule(share, s)?;
            pipe.check_finite(rep.stats.loss, &pipe.tensor_sq()?, s)?;
            Ok(rep)
        };
        // serial: one replica after another too, so every device's kernel times are its own
        let runs: Vec<Result<StepReport>> = if self.pipes[0].opts.serial {
            self.pipes
                .iter_mut()
                .enumerate()
                .map(|(r, pipe)| run(pipe, &batches[r * m..(r + 1) * m]))
                .collect()
        } else {
            std::thread::scope(|scope| {
                let hs: Vec<_> = self
                    .pipes
                    .iter_mut()
                    .enumerate()
                    .map(|(r, pipe)| {
                        let share = &batches[r * m..(r + 1) * m];
                        scope.spawn(move || run(pipe, share))
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Device("pipeline replica panicked".into()))
                        })
                    })
                    .collect()
            })
        };
        let mut loss = 0.0;
        self.reports.clear();
        for r in runs {
            let rep = r?;
            loss += rep.stats.loss / dp as f32;
            self.reports.push(rep);
        }
        self.ledger.step = s;
        if !self.zero1.is_empty() {
            return self.step_zero1(loss, s);
        }
        let stages: Vec<Vec<_>> = self.pipes.iter().map(|p| p.stage_grads()).collect();
        for st in 0..stages[0].len() {
            let gpus: Vec<Gpu> = stages.iter().map(|r| r[st].0.clone()).collect();
            let views: Vec<_> = stages.iter().map(|r| r[st].1.clone()).collect();
            collective::all_reduce(
                &gpus,
                &views,
                self.algo,
                &Opts::mean(),
                &mut self.ledger,
                &self.link,
            )?;
        }
        let norm_sq = global_norm_sq(&self.pipes[0].tensor_sq()?, &self.canonical);
        let h = self.pipes[0].cfg.adam_at(s);
        for p in &self.pipes {
            p.apply(&h, norm_sq)?;
        }
        Ok(StepStats {
            loss,
            grad_norm: norm_sq.sqrt(),
            lr: h.lr,
        })
    }

    /// ZeRO-1: reduce-scatter each group's gradients, check and combine the norm from the
    /// owned chunks, AdamW on each chunk, all-gather the parameters.
    fn step_zero1(&mut self, loss: f32, s: usize) -> Result<StepStats> {
        let mut parts = Vec::new();
        for g in &self.zero1 {
            g.reduce_scatter(&mut self.ledger, &self.link)?;
            let p = g.parts_sq()?;
            if let Some(bad) = p.iter().find(|x| !x.sq.is_finite()) {
                return Err(Error::Worker {
                    device: 0,
                    stage: g.stage,
                    action: "gradient check".into(),
                    step: s,
                    msg: format!(
                        "the gradient of {} is not finite (Σg² = {}); stopping before the \
                         optimizer step",
                        bad.tensor, bad.sq
                    ),
                });
            }
            parts.extend(p);
        }
        let norm_sq = global_norm_sq_parts(&parts, &self.canonical);
        let h = self.pipes[0].cfg.adam_at(s);
        for g in &self.zero1 {
            g.step(&h, norm_sq)?;
            g.all_gather(&mut self.ledger, &self.link)?;
        }
        Ok(StepStats {
            loss,
            grad_norm: norm_sq.sqrt(),
            lr: h.lr,
        })
    }
}
