//! A 3D parallel layout — data × tensor × pipeline, plus a ZeRO stage — checked before any
//! device work, and the map between device indices and (replica, stage, tensor rank).
//!
//! ```text
//! device = (dp_rank · pp + stage) · tp + tp_rank      e.g. dp = 2, pp = 2, tp = 2:
//!   replica 0: stage 0 → devices 0 1   stage 1 → devices 2 3
//!   replica 1: stage 0 → devices 4 5   stage 1 → devices 6 7
//! ```
//!
//! Tensor-parallel groups are innermost (the fastest links), pipeline stages next, data-parallel
//! replicas outermost, as Megatron-LM orders them. Every rejected layout gets a message that
//! states the violated constraint and a valid layout nearby.

use crate::error::{Error, Result};
use crate::model::GptConfig;
use crate::pipeline::ScheduleKind;

/// A parallel layout of one training run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mesh {
    /// Data-parallel replicas.
    pub dp: usize,
    /// Tensor-parallel ranks per stage.
    pub tp: usize,
    /// Pipeline devices per replica.
    pub pp: usize,
    /// ZeRO stage over the data-parallel group: 0 (none) … 3 (FSDP).
    pub zero: usize,
    /// Pipeline schedule (only matters when pp > 1 or chunks > 1).
    #[serde(serialize_with = "kind_name")]
    pub schedule: ScheduleKind,
    /// Microbatches per replica per step (the schedule's m).
    pub microbatches: usize,
    /// Model chunks per pipeline device (v; interleaved only).
    pub chunks: usize,
}

fn kind_name<S: serde::Serializer>(k: &ScheduleKind, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

impl Default for Mesh {
    fn default() -> Self {
        Mesh {
            dp: 1,
            tp: 1,
            pp: 1,
            zero: 0,
            schedule: ScheduleKind::OneFOneB,
            microbatches: 1,
            chunks: 1,
        }
    }
}

/// Where one device sits in the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Coords {
    pub replica: usize,
    pub stage: usize,
    pub tp_rank: usize,
}

impl Mesh {
    /// Devices the layout needs: dp · tp · pp.
    pub fn devices(&self) -> usize {
        self.dp * self.tp * self.pp
    }

    /// "dp=2 tp=1 pp=2 zero=0 schedule=1f1b m=4 v=1"
    pub fn describe(&self) -> String {
        format!(
            "dp={} tp={} pp={} zero={} schedule={} m={} v={}",
            self.dp,
            self.tp,
            self.pp,
            self.zero,
            self.schedule.name(),
            self.microbatches,
            self.chunks
        )
    }

    /// The device index of (replica, stage, tensor rank).
    pub fn device(&self, c: Coords) -> usize {
        (c.replica * self.pp + c.stage) * self.tp + c.tp_rank
    }

    /// The coordinates of device `d` (< `devices()`).
    pub fn coords(&self, d: usize) -> Coords {
        Coords {
            replica: d / (self.pp * self.tp),
            stage: (d / self.tp) % self.pp,
            tp_rank: d % self.tp,
        }
    }

    /// Every constraint of the layout for `model`, microbatches of `micro_batch` sequences of
    /// `seq` tokens, and `available` devices. The first violated constraint is the error; its
    /// message names the constraint and suggests a valid layout nearby.
    pub fn validate(
        &self,
        model: &GptConfig,
        micro_batch: usize,
        seq: usize,
        available: usize,
    ) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        model.validate()?;
        for (name, v) in [
            ("--dp", self.dp),
            ("--tp", self.tp),
            ("--pp", self.pp),
            ("--microbatches", self.microbatches),
            ("--chunks", self.chunks),
        ] {
            if v == 0 {
                return bad(format!(
                    "{name} must be at least 1, got 0; use {name} 1 to leave that axis unsplit"
                ));
            }
        }
        if micro_batch == 0 {
            return bad(
                "the microbatch size must be at least 1 sequence, got 0; e.g. --batch 8".into(),
            );
        }
        if seq == 0 || seq > model.ctx {
            return bad(format!(
                "the sequence length must be 1..={} (the model context), got {seq}; e.g. --seq {}",
                model.ctx, model.ctx
            ));
        }
        if self.devices() != available {
            return bad(format!(
                "dp × tp × pp = {} × {} × {} = {} devices, but {available} are given; {}",
                self.dp,
                self.tp,
                self.pp,
                self.devices(),
                self.nearby_devices(available)
            ));
        }
        if self.tp > 1 {
            if let Err(Error::Config(m)) = model.check_tp(self.tp) {
                let fit = largest_divisor_at_most(model.heads, self.tp);
                return bad(format!(
                    "{m}; e.g. --tp {fit} (a divisor of the {} heads)",
                    model.heads
                ));
            }
        }
        match self.schedule.fixed_chunks() {
            Some(1) if self.chunks > 1 => {
                return bad(format!(
                    "--chunks {} needs --schedule interleaved ({} runs one chunk per device); use \
                     --schedule interleaved or --chunks 1",
                    self.chunks, self.schedule
                ))
            }
            Some(n) if self.chunks != n => {
                return bad(format!(
                    "--schedule {} places {n} chunks per device in a V (device d holds stages d \
                     and 2·pp−1−d), got --chunks {}; use --chunks {n}",
                    self.schedule, self.chunks
                ))
            }
            _ => {}
        }
        let blocks = model.layers + 2;
        let stages = self.pp * self.chunks;
        if stages > blocks {
            let pp = (blocks / self.chunks).max(1);
            return bad(format!(
                "pp × chunks = {} × {} = {stages} pipeline stages, but the model has only {blocks} \
                 blocks (embedding, {} layers, head) and every stage needs one; e.g. --pp {pp}{}",
                self.pp,
                self.chunks,
                model.layers,
                if self.chunks > 1 && self.schedule.fixed_chunks().is_none() {
                    " or --chunks 1"
                } else {
                    ""
                }
            ));
        }
        if self.schedule == ScheduleKind::Interleaved
            && self.chunks > 1
            && !self.microbatches.is_multiple_of(self.pp)
        {
            let m = self.microbatches.next_multiple_of(self.pp);
            return bad(format!(
                "the interleaved schedule needs the microbatches to be a multiple of the pipeline \
                 devices (m % pp == 0), got m = {}, pp = {}; e.g. --microbatches {m}",
                self.microbatches, self.pp
            ));
        }
        if self.schedule == ScheduleKind::DualPipeV && self.microbatches < 2 * self.pp {
            return bad(format!(
                "the dualpipev schedule needs at least as many microbatches as model stages \
                 (m ≥ 2·pp), got m = {}, pp = {}; e.g. --microbatches {}",
                self.microbatches,
                self.pp,
                2 * self.pp
            ));
        }
        self.zero_offered()?;
        Ok(())
    }

    /// Whether the ZeRO stage exists and is offered with this layout's other axes (ZeRO-3 not
    /// with a zero-bubble split backward).
    pub fn zero_offered(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.zero > 3 {
            return bad(format!(
                "ZeRO stage {} does not exist: stages are 0 (off), 1 (optimizer state), 2 (+ \
                 gradients) and 3 (+ parameters); e.g. --zero 3",
                self.zero
            ));
        }
        if self.zero > 0 && self.dp < 2 {
            return bad(format!(
                "ZeRO stage {} shards over the data-parallel group, but dp = {}: there is nothing \
                 to shard across; use --dp 2 (or more) or --zero 0",
                self.zero, self.dp
            ));
        }
        if self.zero == 3 && self.schedule.split_backward() {
            return bad(format!(
                "ZeRO stage 3 with the {} schedule is not offered: ZeRO-3 cuts each pass at \
                 its blocks to gather them, and the zero-bubble split's deferred weight-gradient \
                 pass is not cut so; use --schedule 1f1b (or gpipe, interleaved), or --zero 2",
                self.schedule.name()
            ));
        }
        Ok(())
    }

    /// A suggestion for `available` devices: keep tp and pp where they divide it.
    fn nearby_devices(&self, available: usize) -> String {
        if available == 0 {
            return "no device is available".into();
        }
        let inner = self.tp * self.pp;
        if available.is_multiple_of(inner) {
            return format!(
                "e.g. --dp {} --tp {} --pp {}",
                available / inner,
                self.tp,
                self.pp
            );
        }
        if available.is_multiple_of(self.tp) {
            return format!("e.g. --dp 1 --tp {} --pp {}", self.tp, available / self.tp);
        }
        format!("e.g. --dp {available} --tp 1 --pp 1")
    }
}

/// The largest divisor of `n` that is ≤ `at_most` (at least 1).
fn largest_divisor_at_most(n: usize, at_most: usize) -> usize {
    (1..=at_most.min(n))
        .rev()
        .find(|d| n.is_multiple_of(*d))
        .unwrap_or(1)
}
