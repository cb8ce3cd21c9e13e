//! A layout: how the devices split the work (dp × tp × pp, ZeRO stage, schedule, microbatches),
//! its constraints, and the memory it needs per device.
//!
//! Each data-parallel replica takes `global_batch / dp` sequences per step, in `m` microbatches
//! of `b = global_batch / (dp·m)` sequences: the pipeline's microbatches, or plain gradient
//! accumulation when pp = 1.

use super::cluster::Cluster;
use super::memory::{activation_bytes_per_layer, zero_state_bytes, MemoryBreakdown, ZeroStage};
use super::model::{ModelShape, Precision};
use super::pipeline::Schedule;
use crate::error::{Error, Result};
use std::fmt;

/// How the devices split one training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Data-parallel degree (replicas, or ZeRO shards).
    pub dp: usize,
    /// Tensor-parallel degree (Megatron column/row split of each block).
    pub tp: usize,
    /// Pipeline stages.
    pub pp: usize,
    /// ZeRO stage over the dp group.
    pub zero: ZeroStage,
    /// Pipeline schedule (irrelevant when pp = 1).
    pub schedule: Schedule,
    /// Microbatches m per replica per step.
    pub microbatches: usize,
}

impl Layout {
    /// Pure data parallel over `dp` devices with `m` microbatches of gradient accumulation.
    pub fn data_parallel(dp: usize, m: usize) -> Self {
        Layout {
            dp,
            tp: 1,
            pp: 1,
            zero: ZeroStage::Stage0,
            schedule: Schedule::OneFOneB,
            microbatches: m,
        }
    }

    /// Devices the layout uses: dp·tp·pp.
    pub fn devices(&self) -> usize {
        self.dp.saturating_mul(self.tp).saturating_mul(self.pp)
    }

    /// Checks the layout against the model, the cluster and the global batch (in sequences)
    /// and returns the microbatch size b. Tensor parallel may cross nodes here (the cost model
    /// prices it on the inter-node link); the planner keeps it inside a node.
    pub fn validate(
        &self,
        model: &ModelShape,
        cluster: &Cluster,
        global_batch: usize,
    ) -> Result<usize> {
        for (name, v) in [
            ("dp", self.dp),
            ("tp", self.tp),
            ("pp", self.pp),
            ("microbatches", self.microbatches),
        ] {
            if v == 0 {
                return Err(Error::Config(format!("{name} must be at least 1, got 0")));
            }
        }
        if self.devices() != cluster.devices() {
            return Err(Error::Config(format!(
                "layout dp·tp·pp = {}·{}·{} = {} but the cluster has {} devices; choose degrees whose product is {}",
                self.dp,
                self.tp,
                self.pp,
                self.devices(),
                cluster.devices(),
                cluster.devices()
            )));
        }
        if !model.heads.is_multiple_of(self.tp) {
            return Err(Error::Config(format!(
                "tp = {} does not divide the {} attention heads; choose tp dividing heads",
                self.tp, model.heads
            )));
        }
        self.schedule
            .validate(self.pp, self.microbatches, model.layers)?;
        let per_micro = self.dp.saturating_mul(self.microbatches);
        if global_batch == 0 || !global_batch.is_multiple_of(per_micro) {
            return Err(Error::Config(format!(
                "global batch {global_batch} does not split into dp·m = {}·{} = {per_micro} equal microbatches; \
                 choose a global batch that is a multiple of {per_micro}",
                self.dp, self.microbatches
            )));
        }
        Ok(global_batch / per_micro)
    }

    /// Parameters one device owns before ZeRO sharding, for the heaviest stage (stage 0, which
    /// also holds the embeddings): `(L/pp · block + (V + ctx)·d) / tp`. This is also the
    /// payload of the data-parallel collectives.
    pub fn device_params(&self, model: &ModelShape) -> f64 {
        let layers_here = model.layers as f64 / self.pp as f64;
        (layers_here * model.block_params() + model.embedding_params()) / self.tp as f64
    }

    /// Memory per device for microbatch size `b` (see [`MemoryBreakdown`]):
    ///
    /// ```text
    /// params      = (L/pp · block + (V + ctx)·d) / tp          heaviest stage: stage 0
    /// states      = zero_state_bytes(params, dp, zero, (P, G, K))
    /// buffer      = (P + G) · block / tp                        ZeRO-3 only
    /// activations = held(schedule, pp, m) · L/pp · act_layer(b, s, h, a, tp)
    /// ```
    pub fn memory(&self, model: &ModelShape, prec: &Precision, b: usize) -> MemoryBreakdown {
        let tp = self.tp as f64;
        let layers_here = model.layers as f64 / self.pp as f64;
        let params = self.device_params(model);
        let states = zero_state_bytes(
            params,
            self.dp,
            self.zero,
            (prec.param, prec.grad, prec.optim),
        );
        let gather_buffer = if self.zero == ZeroStage::Stage3 && self.dp > 1 {
            (prec.param + prec.grad) * model.block_params() / tp
        } else {
            0.0
        };
        let held = self.schedule.held_microbatches(self.pp, self.microbatches);
        let per_layer = activation_bytes_per_layer(
            b,
            model.seq_len,
            model.hidden,
            model.heads,
            self.tp,
            prec.act,
        );
        MemoryBreakdown::new(
            params,
            states,
            gather_buffer,
            held * layers_here * per_layer,
        )
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dp={} tp={} pp={} zero={}",
            self.dp, self.tp, self.pp, self.zero
        )?;
        if self.pp > 1 {
            write!(f, " {}", self.schedule)?;
        }
        write!(f, " m={}", self.microbatches)
    }
}
