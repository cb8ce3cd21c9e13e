//! A layout on paper: the cost model's view of a [`Mesh`] (dp × tp × pp, ZeRO stage, schedule,
//! microbatches, chunks), its constraints, and the memory it needs per device.
//!
//! The layout *is* the trainer's [`Mesh`]; [`MeshCost`] adds what the cost model asks of it
//! (an extension trait, because `Mesh` lives in [`crate::mesh`]).
//!
//! Each data-parallel replica takes `global_batch / dp` sequences per step, in `m` microbatches
//! of `b = global_batch / (dp·m)` sequences: the pipeline's microbatches, or plain gradient
//! accumulation when pp = 1.

use super::cluster::Cluster;
use super::memory::{activation_bytes_per_layer, zero_state_bytes, MemoryBreakdown, ZeroStage};
use super::model::{Footprint, ModelShape};
use super::pipeline;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use std::fmt;

/// The cost model's questions to a [`Mesh`].
pub trait MeshCost {
    /// Pure data parallel over `dp` devices with `m` microbatches of gradient accumulation
    /// (tp = pp = 1, ZeRO 0, 1F1B, one chunk).
    fn data_parallel(dp: usize, m: usize) -> Self;

    /// The ZeRO stage as the formulas take it (stages above 3, which
    /// [`validate_on`](MeshCost::validate_on) refuses, count as 3).
    fn zero_stage(&self) -> ZeroStage;

    /// Checks the layout against the model, the cluster and the global batch (in sequences)
    /// and returns the microbatch size b. Tensor parallel may cross nodes here (the cost model
    /// prices it on the inter-node link); the planner keeps it inside a node.
    fn validate_on(
        &self,
        model: &ModelShape,
        cluster: &Cluster,
        global_batch: usize,
    ) -> Result<usize>;

    /// Parameters one device owns before ZeRO sharding, for the heaviest stage (stage 0, which
    /// also holds the embeddings): `(L/pp · block + (V + ctx)·d) / tp`. This is also the
    /// payload of the data-parallel collectives.
    fn device_params(&self, model: &ModelShape) -> f64;

    /// Memory per device for microbatch size `b` (see [`MemoryBreakdown`]):
    ///
    /// ```text
    /// params      = (L/pp · block + (V + ctx)·d) / tp          heaviest stage: stage 0
    /// states      = zero_state_bytes(params, dp, zero, (P, G, K))
    /// buffer      = (P + G) · block / tp                        ZeRO-3 only
    /// activations = held(schedule, pp, m) · L/pp · act_layer(b, s, h, a, tp)
    /// ```
    fn memory(&self, model: &ModelShape, prec: &Footprint, b: usize) -> MemoryBreakdown;

    /// The planner's one-line name: "dp=4 tp=1 pp=2 zero=1 zb-h1 m=16" (the schedule only
    /// when pp > 1).
    fn label(&self) -> Label<'_>;
}

impl MeshCost for Mesh {
    fn data_parallel(dp: usize, m: usize) -> Self {
        Mesh {
            dp,
            microbatches: m,
            ..Mesh::default()
        }
    }

    fn zero_stage(&self) -> ZeroStage {
        ZeroStage::ALL[self.zero.min(3)]
    }

    fn validate_on(
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
        if ZeroStage::from_index(self.zero).is_none() {
            return Err(Error::Config(format!(
                "ZeRO stage {} does not exist; choose a stage 0 to 3",
                self.zero
            )));
        }
        let devices = self.dp.saturating_mul(self.tp).saturating_mul(self.pp);
        if devices != cluster.devices() {
            return Err(Error::Config(format!(
                "layout dp·tp·pp = {}·{}·{} = {} but the cluster has {} devices; choose degrees whose product is {}",
                self.dp,
                self.tp,
                self.pp,
                devices,
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
        pipeline::validate(
            self.schedule,
            self.chunks,
            self.pp,
            self.microbatches,
            model.layers,
        )?;
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

    fn device_params(&self, model: &ModelShape) -> f64 {
        let layers_here = model.layers as f64 / self.pp as f64;
        (layers_here * model.block_params() + model.embedding_params()) / self.tp as f64
    }

    fn memory(&self, model: &ModelShape, prec: &Footprint, b: usize) -> MemoryBreakdown {
        let tp = self.tp as f64;
        let layers_here = model.layers as f64 / self.pp as f64;
        let params = self.device_params(model);
        let zero = self.zero_stage();
        let states = zero_state_bytes(params, self.dp, zero, (prec.param, prec.grad, prec.optim));
        let gather_buffer = if zero == ZeroStage::Stage3 && self.dp > 1 {
            (prec.param + prec.grad) * model.block_params() / tp
        } else {
            0.0
        };
        let held =
            pipeline::held_microbatches(self.schedule, self.chunks, self.pp, self.microbatches);
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

    fn label(&self) -> Label<'_> {
        Label(self)
    }
}

/// A mesh as the planner prints it (see [`MeshCost::label`]).
#[derive(Clone, Copy, Debug)]
pub struct Label<'a>(pub &'a Mesh);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "dp={} tp={} pp={} zero={}", m.dp, m.tp, m.pp, m.zero)?;
        if m.pp > 1 {
            write!(f, " {}", pipeline::label(m.schedule, m.chunks))?;
        }
        write!(f, " m={}", m.microbatches)
    }
}
