//! ZeRO stages 0–3 (FSDP at stage 3) over one data-parallel group: optimizer state, then
//! gradients, then parameters sharded by range arithmetic on the flat buffers ([`Grid`]).
//!
//! ```text
//!            persistent per rank             a step (d ranks, k microbatches per rank)
//! stage 0    P  G  K                         fwd/bwd → all-reduce buckets → Σg² → AdamW(all)
//! stage 1    P  G  K/d                       fwd/bwd → reduce-scatter buckets (in place)
//!                                            → AdamW(own chunks) → all-gather P
//! stage 2    P  G/d  K/d  (+ G in backward)  fwd/bwd into a step-scoped G → reduce-scatter
//!                                            into the G shard → AdamW(own) → all-gather P
//! stage 3    P/d  G/d  K/d (+ 2 block slots, G in backward)
//!            per block i: all-gather i into slot i%2, forward i, prefetch gather i+1 …
//!            backward: gather again, backward i, reduce-scatter finished buckets, prefetch i−1
//!            → AdamW(own) (no gather: the next use gathers)
//! ```
//!
//! The model runs as a chain of single-block models ([`Chain`]) so block i's parameters can
//! be read from the full buffer (stages 0–2) or from a gathered slot (stage 3). Every stage
//! reduces each bucket with the ring and the grid's chunk bounds, so each gradient element is
//! summed in the same order; the norm is cut into the same parts; AdamW is element-wise:
//! stages 0–3 give the same bits for one group. Collectives run between blocks on the calling
//! thread, one after another (host staging waits for each device's queue, so a prefetch is
//! issued early but does not overlap compute on the wall clock; the link model's clock is
//! reported instead). Stage 2/3's full-size gradient buffer exists only during a step and is
//! counted as gradients in the memory ledger: its peak shows it.
//!
//! Wiring into a pipeline stage's data-parallel group needs only the group's devices, each
//! rank's flat views and the stage's layout: [`Grid::new`] over the stage's buckets, the
//! collectives [`crate::collective::reduce_scatter_to`] / [`crate::collective::all_gather_from`]
//! with [`Grid::parts`], and [`Optimizer::sharded`] with [`Grid::pieces`].

use std::time::Instant;

use crate::collective::{self, Ledger};
use crate::cost::memory::{zero_state_bytes, ZeroStage};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::memory::{Category, Usage};
use crate::model::{fit, Micro};
use crate::optim::Optimizer;
use crate::parallel::accumulate::Accumulation;
use crate::parallel::bucket::{buckets, Bucket};
use crate::parallel::chain::{spans, Chain, Span};
use crate::parallel::data::DpOptions;
use crate::parallel::shard::Grid;
use crate::runtime::norm::{verdict, Share};
use crate::step::{checksum, StepStats, TrainConfig};

mod state;
mod step;
use step::Comm;

/// Bytes per parameter of this crate's f32 Adam: P = 4, G = 4, K = 8 (m and v).
pub const F32_ADAM: (f64, f64, f64) = (4.0, 4.0, 8.0);

/// The ZeRO stage with index `stage`, or a clear error.
pub fn stage(stage: usize) -> Result<ZeroStage> {
    ZeroStage::from_index(stage).ok_or_else(|| {
        Error::Config(format!(
            "ZeRO stage {stage} does not exist: 0 (replicated), 1 (optimizer state sharded), \
             2 (+ gradients), 3 (+ parameters)"
        ))
    })
}

/// Model-state bytes per device the ZeRO formula predicts for `n` parameters over `d` ranks in
/// f32 Adam (the same function the planner uses).
pub fn formula_bytes(st: ZeroStage, n: usize, d: usize) -> f64 {
    zero_state_bytes(n as f64, d, st, F32_ADAM)
}

/// Bytes the whole group sends rank to rank in one step of `stage` over a flat buffer of `n`
/// f32s, `d` ranks, `k` microbatches per rank: every ring reduce-scatter or all-gather of n
/// elements sends exactly (d−1)·4n bytes in total, whatever the chunk bounds. Stage 0: an
/// all-reduce (2); stages 1, 2: reduce-scatter + parameter all-gather (2); stage 3:
/// reduce-scatter + a gather before every forward and every backward (1 + 2k).
pub fn predicted_comm_bytes(st: ZeroStage, n: usize, d: usize, k: usize) -> u64 {
    let once = 4 * n as u64 * d.saturating_sub(1) as u64;
    match st {
        ZeroStage::Stage0 | ZeroStage::Stage1 | ZeroStage::Stage2 => 2 * once,
        ZeroStage::Stage3 => (1 + 2 * k as u64) * once,
    }
}

/// What one ZeRO step did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ZeroStepReport {
    pub stats: StepStats,
    pub stage: usize,
    /// Bytes sent rank to rank this step, summed over the group (the ledger's hops).
    pub comm_bytes: u64,
    /// [`predicted_comm_bytes`] for this step.
    pub predicted_bytes: u64,
    pub bytes_per_rank: Vec<u64>,
    /// Collective calls this step.
    pub collectives: usize,
    /// Wall seconds inside collectives.
    pub comm_wall: f64,
    /// The collectives on the link model's device clock, one after another.
    pub comm_link: f64,
    pub step_wall: f64,
    /// Per device: bytes now (after the step) and the peak of each category during the step.
    pub memory: Vec<Usage>,
}

/// One rank's persistent state.
struct Rank {
    gpu: Gpu,
    /// Full flat parameters (stages 0–2) or the parameter shard (stage 3).
    params: View,
    /// Full flat gradients (stages 0, 1) or the gradient shard (stages 2, 3).
    grads: View,
    optim: Optimizer,
    /// Stages 0, 1: the chain over the persistent full buffers.
    chain: Option<Chain>,
    /// Kept alive for the optimizer's views.
    _moments: (View, View),
}

/// What a stage 2/3 rank allocates for one step and frees after it.
struct Work {
    grads: View,
    slots: Vec<View>,
    chain: Chain,
}

/// d ranks training one model under a ZeRO stage.
pub struct Zero {
    pub cfg: TrainConfig,
    pub opts: DpOptions,
    pub stage: ZeroStage,
    pub grid: Grid,
    /// Gradient buckets in backward order (the grid's units).
    pub buckets: Vec<Bucket>,
    pub spans: Vec<Span>,
    ranks: Vec<Rank>,
    canonical: Vec<String>,
    dloss: f32,
    /// Every transfer of every step.
    pub ledger: Ledger,
}

impl Zero {
    /// One rank per device in `gpus` at ZeRO stage `stage` (0–3); `cfg.grad_accum` is the
    /// microbatches per rank. `opts.bucket_bytes` sets the buckets (the shard units),
    /// `opts.link` and `opts.collective` the collectives; the ring is the only algorithm.
    /// `opts.overlap` and `opts.serial` do not apply: collectives run between blocks.
    pub fn new(
        gpus: &[Gpu],
        cfg: TrainConfig,
        opts: DpOptions,
        stage_index: usize,
    ) -> Result<Zero> {
        let st = stage(stage_index)?;
        cfg.validate()?;
        if gpus.is_empty() {
            return Err(Error::Config(
                "ZeRO shards over a data-parallel group: it needs at least one device (d = 0)"
                    .into(),
            ));
        }
        if opts.algo != collective::Algo::Ring || opts.accumulation != Accumulation::Sequential {
            return Err(Error::Config(format!(
                "ZeRO reduce-scatters with the ring and sequential accumulation (got {} / {:?})",
                opts.algo.name(),
                opts.accumulation
            )));
        }
        // before the probe, the host copy of the weights and any buffer: every rank must fit
        for g in gpus {
            fit::check_model(&cfg.model, cfg.micro, 1, &g.limits)?;
        }
        let d = gpus.len();
        let model = cfg.model;
        let layout = model.layout(&model.blocks());
        let spans = spans(&model)?;
        // the buckets come from a probe model's backward (one microbatch shape)
        let probe = crate::model::gpu_model::GpuModel::new(
            &gpus[0],
            model,
            &model.blocks(),
            Micro { b: 1, t: 1 },
            1.0,
        )?;
        let buckets = buckets(&layout, &probe.grad_ready, opts.bucket_bytes);
        drop(probe);
        let units: Vec<_> = buckets.iter().map(|b| b.range.clone()).collect();
        let grid = Grid::new(&units, layout.total, d)?;
        let dloss = 1.0 / (cfg.tokens_per_step() * d) as f32;
        let init = model.init(&layout, cfg.seed);
        let ranks = gpus
            .iter()
            .enumerate()
            .map(|(r, g)| rank(g, &cfg, st, &grid, &spans, r, &init, dloss))
            .collect::<Result<Vec<_>>>()?;
        Ok(Zero {
            canonical: model.canonical_names(),
            cfg,
            opts,
            stage: st,
            grid,
            buckets,
            spans,
            ranks,
            dloss,
            ledger: Ledger::new(),
        })
    }

    pub fn degree(&self) -> usize {
        self.ranks.len()
    }

    /// Flat parameter count the shards divide (with the 64-element padding of each tensor).
    pub fn flat_len(&self) -> usize {
        self.grid.total
    }

    /// Current and peak memory of every device.
    pub fn memory(&self) -> Vec<Usage> {
        self.ranks.iter().map(|r| r.gpu.memory()).collect()
    }

    /// One step over the global batch: `d × grad_accum` microbatches, rank r taking the r-th
    /// contiguous share.
    pub fn step(&mut self, batches: &[(Vec<u32>, Vec<u32>)], s: usize) -> Result<ZeroStepReport> {
        let (d, k) = (self.degree(), self.cfg.grad_accum);
        if batches.len() != d * k {
            return Err(Error::Config(format!(
                "a step needs d × accumulation = {} microbatches, got {}",
                d * k,
                batches.len()
            )));
        }
        let t0 = Instant::now();
        for r in &self.ranks {
            r.gpu.sync()?;
            r.gpu.reset_memory_peaks();
        }
        self.ledger.step = s;
        let calls0 = self.ledger.calls;
        let st = self.stage;
        let ledger = std::mem::take(&mut self.ledger);
        let (ledger, loss, comm_wall, result) = self.compute(batches, ledger);
        self.ledger = ledger;
        result?;
        // the norm from the parts each rank holds (stage 0: rank 0 holds all of them), and the
        // one finiteness verdict of every layout: nothing non-finite reaches the parameters
        let mut shares = Vec::with_capacity(d);
        for (r, rank) in self.ranks.iter().enumerate() {
            let counts = r == 0 || st != ZeroStage::Stage0;
            shares.push(Share {
                device: r,
                stage: 0,
                loss: if r == 0 { loss } else { 0.0 },
                has_loss: r == 0,
                parts: if counts {
                    rank.optim.parts_sq()?.into_iter().map(|p| (0, p)).collect()
                } else {
                    Vec::new()
                },
                local_bad: None,
            });
        }
        let (_, norm_sq) = verdict(&shares, &self.canonical, s)?;
        let h = self.cfg.adam_at(s);
        for r in &self.ranks {
            r.optim.step(&h, norm_sq)?;
        }
        let ledger = std::mem::take(&mut self.ledger);
        let mut comm = Comm {
            z: self,
            ledger,
            wall: comm_wall,
        };
        let gathered = if matches!(st, ZeroStage::Stage1 | ZeroStage::Stage2) {
            (0..comm.z.grid.units.len()).try_for_each(|u| comm.gather_params(u))
        } else {
            Ok(())
        };
        let (ledger, comm_wall) = (comm.ledger, comm.wall);
        self.ledger = ledger;
        gathered?;
        for r in &self.ranks {
            r.gpu.sync()?;
        }
        let step_ledger = self.ledger.for_step(s);
        Ok(ZeroStepReport {
            stats: StepStats {
                loss: (loss / (self.cfg.tokens_per_step() * d) as f64) as f32,
                grad_norm: norm_sq.sqrt(),
                lr: h.lr,
            },
            stage: st.index(),
            comm_bytes: step_ledger.hop_bytes(),
            predicted_bytes: predicted_comm_bytes(st, self.grid.total, d, k),
            bytes_per_rank: step_ledger.sent_by_rank(d),
            collectives: self.ledger.calls - calls0,
            comm_wall,
            comm_link: step_ledger.link_clock(),
            step_wall: t0.elapsed().as_secs_f64(),
            memory: self.memory(),
        })
    }

    /// Forward and backward of every microbatch on every rank, with the stage's gathers and
    /// gradient reductions between blocks. Returns the ledger, the summed token loss, the wall
    /// time in collectives and the outcome.
    fn compute(
        &self,
        batches: &[(Vec<u32>, Vec<u32>)],
        ledger: Ledger,
    ) -> (Ledger, f64, f64, Result<()>) {
        let k = self.cfg.grad_accum;
        let st = self.stage;
        let mut comm = Comm {
            z: self,
            ledger,
            wall: 0.0,
        };
        let mut loss = 0.0f64;
        let result = comm.run(batches, k, st, &mut loss);
        (comm.ledger, loss, comm.wall, result)
    }

    /// Stage 2/3: each rank's step-scoped full gradient buffer, parameter slots and chain.
    fn work(&self) -> Result<Vec<Work>> {
        let longest = self.spans.iter().map(|s| s.range.len()).max().unwrap_or(1);
        self.ranks
            .iter()
            .map(|r| {
                let g = &r.gpu;
                let grads = g.buffer_in(Category::Gradients, "grads.backward", self.grid.total);
                let slots: Vec<View> = if self.stage == ZeroStage::Stage3 {
                    (0..2)
                        .map(|i| {
                            g.buffer_in(Category::Parameters, &format!("params.slot{i}"), longest)
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let spans = &self.spans;
                let chain = Chain::new(
                    g,
                    self.cfg.model,
                    self.cfg.micro,
                    self.dloss,
                    spans,
                    |i| match slots.get(i % 2) {
                        Some(s) => s.slice(0, spans[i].range.len()),
                        None => r.params.slice(spans[i].range.start, spans[i].range.len()),
                    },
                    |i| grads.slice(spans[i].range.start, spans[i].range.len()),
                )?;
                Ok(Work {
                    grads,
                    slots,
                    chain,
                })
            })
            .collect()
    }

    /// Rank `r`'s full flat parameters (stage 3: assembled from every rank's shard).
    pub fn params(&self, r: usize) -> Result<Vec<f32>> {
        if self.stage != ZeroStage::Stage3 {
            return self.ranks[r].gpu.download(&self.ranks[r].params);
        }
        let mut flat = vec![0.0f32; self.grid.total];
        for (q, rank) in self.ranks.iter().enumerate() {
            let shard: Vec<f32> = rank.gpu.download(&rank.params)?;
            for (u, unit) in self.grid.units.iter().enumerate() {
                let c = self.grid.chunk(u, q);
                let at = unit.storage[q];
                flat[c.clone()].copy_from_slice(&shard[at..at + c.len()]);
            }
        }
        Ok(flat)
    }

    /// SHA-256 of the full parameters (rank 0's, or the assembled shards at stage 3).
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.params(0)?))
    }

    /// True when every rank holds rank 0's full parameters bit for bit (stages 0–2; stage 3
    /// holds one copy, sharded: always true).
    pub fn replicas_agree(&self) -> Result<bool> {
        if self.stage == ZeroStage::Stage3 {
            return Ok(true);
        }
        let p0 = self.params(0)?;
        for r in 1..self.degree() {
            let p = self.params(r)?;
            if p.iter().zip(&p0).any(|(a, b)| a.to_bits() != b.to_bits()) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Builds rank `r`'s persistent buffers, optimizer and (stages 0, 1) chain.
#[allow(clippy::too_many_arguments)]
fn rank(
    g: &Gpu,
    cfg: &TrainConfig,
    st: ZeroStage,
    grid: &Grid,
    spans: &[Span],
    r: usize,
    init: &[f32],
    dloss: f32,
) -> Result<Rank> {
    let (total, shard) = (grid.total, grid.shard_len(r));
    let params_sharded = st == ZeroStage::Stage3;
    let grads_sharded = st >= ZeroStage::Stage2;
    let moments_len = if st == ZeroStage::Stage0 {
        total
    } else {
        shard
    };
    let len = |sharded: bool| if sharded { shard } else { total };
    let params = g.buffer_in(Category::Parameters, "params", len(params_sharded));
    let grads = g.buffer_in(Category::Gradients, "grads", len(grads_sharded));
    let m = g.buffer_in(Category::OptimizerState, "adam.m", moments_len);
    let v = g.buffer_in(Category::OptimizerState, "adam.v", moments_len);
    let layout = cfg.model.layout(&cfg.model.blocks());
    let optim = if st == ZeroStage::Stage0 {
        let b = crate::params::Buffers {
            layout: layout.clone(),
            params: params.clone(),
            grads: grads.clone(),
            m: m.clone(),
            v: v.clone(),
        };
        Optimizer::with_cuts(g, &b, &grid.cuts())?
    } else {
        let pieces = grid.pieces(r, params_sharded, grads_sharded);
        Optimizer::sharded(g, &layout, &params, &grads, &m, &v, &pieces)?
    };
    if params_sharded {
        let mut host = vec![0.0f32; shard];
        for (u, unit) in grid.units.iter().enumerate() {
            let c = grid.chunk(u, r);
            let at = unit.storage[r];
            host[at..at + c.len()].copy_from_slice(&init[c]);
        }
        g.upload(&params, &host)?;
    } else {
        g.upload(&params, init)?;
    }
    let chain = if st <= ZeroStage::Stage1 {
        Some(Chain::new(
            g,
            cfg.model,
            cfg.micro,
            dloss,
            spans,
            |i| params.slice(spans[i].range.start, spans[i].range.len()),
            |i| grads.slice(spans[i].range.start, spans[i].range.len()),
        )?)
    } else {
        None
    };
    Ok(Rank {
        gpu: g.clone(),
        params,
        grads,
        optim,
        chain,
        _moments: (m, v),
    })
}
