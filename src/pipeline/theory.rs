//! Pipeline schedules on paper: the bubble (idle share of each device) and how many
//! microbatches' activations the busiest stage (stage 0) holds at once.
//!
//! GPipe / 1F1B with p stages and m microbatches, F and B of one time unit each per stage:
//!
//! ```text
//! stage 0  F0 F1 F2 F3 ·  ·  ·  B0 B1 B2 B3        each device idles (p−1) slots of F and of B:
//! stage 1  ·  F0 F1 F2 F3 ·  ·  B0 B1 B2 B3 …      bubble = (p−1) / (m + p − 1)
//! stage 2  ·  ·  F0 F1 F2 F3 ·  …
//! ```
//!
//! Interleaved 1F1B (v model chunks per device) shrinks each slot v-fold:
//! `(p−1) / (v·m + p − 1)` (Narayanan et al. 2021).
//!
//! ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism") splits B into B (input gradient)
//! and W (weight gradient) and fills the warm-up/cool-down holes with W. With unit costs
//! F = B = W = 1 (3 units of work per microbatch per stage):
//!
//! ```text
//! 1F1B   idle per device = (p−1)·(F + B + W) = 3(p−1)   work = 3m   bubble = (p−1)/(m + p − 1)
//! ZB-H1  idle per device = (p−1)·(F + B − W) =  (p−1)   work = 3m   bubble = (p−1)/(3m + p − 1)
//! ```
//!
//! so ZB-H1's idle time is a third of 1F1B's, at the same peak activation memory as 1F1B.
//!
//! ZB-V (the same paper, §6) puts two chunks of half a stage on each device in a V and counts
//! in chunk units (F = B = W = 1 per chunk, 6m units of work per device). Device p−1 cannot start
//! before p−1 forwards have run upstream and has 6m units to do, so no order ends before
//! `6m + p − 1`; ZB-V's order reaches that bound for `m ≥ ⌊3p/2⌋`:
//!
//! ```text
//! ZB-V   idle per device = p−1 chunk units = (p−1)/2 stage units   bubble = (p−1)/(6m + p − 1)
//! ```
//!
//! half of ZB-H1's idle time, at 1F1B's peak activation memory (2p half-stage microbatches = p).
//! It is "zero bubble" in the sense that nothing idles beyond the start-up every order pays.
//!
//! DualPipeV (DeepSeek's DualPipe on a V, as PyTorch's `ScheduleDualPipeV` lays it out) pairs the
//! forward of one chunk with the full backward of the other ("F&B"). Its published idle time,
//! (p−1)·(F&B + B − 3W) per device with B the input-gradient part, is p−1 chunk units with
//! F = B = W = 1 and F&B = F + B + W (what one device running the two back to back costs):
//! the same bound as ZB-V, reached at every `m ≥ 2p`, at one more half-stage microbatch of
//! activations (2p + 1). What DualPipe buys beyond ZB-V is F&B < F + B + W where a pass's
//! communication hides under the other's compute.

use super::{Schedule, ScheduleKind};
use crate::error::{Error, Result};
use std::fmt;

/// The analytic bubble of schedule `s` (the planner's formula, [`bubble`]).
pub fn theory(s: &Schedule) -> f64 {
    bubble(s.kind, s.v, s.p, s.m)
}

/// Idle fraction of each device's time for schedule `kind` (`v` model chunks per device,
/// read for interleaved only), p stages, m microbatches; 0 when p ≤ 1.
///
/// - GPipe, 1F1B: `(p−1) / (m + p − 1)`
/// - interleaved: `(p−1) / (v·m + p − 1)`
/// - ZB-H1: `(p−1) / (3m + p − 1)` (unit F = B = W; see the module doc)
/// - ZB-V: `(p−1) / (6m + p − 1)` (unit F = B = W per chunk, `m ≥ ⌊3p/2⌋`; see the module doc)
/// - DualPipeV: the same (unit F = B = W per chunk, F&B = F + B + W; it needs `m ≥ 2p`)
pub fn bubble(kind: ScheduleKind, v: usize, p: usize, m: usize) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    let (p, m) = ((p - 1) as f64, m as f64);
    let slots = match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB => m,
        ScheduleKind::Interleaved => v as f64 * m,
        ScheduleKind::ZeroBubbleH1 => 3.0 * m,
        ScheduleKind::ZeroBubbleV | ScheduleKind::DualPipeV => 6.0 * m,
    };
    p / (slots + p)
}

/// Microbatches whose activations stage 0 holds at the peak, in units of "one microbatch
/// through the device's L/p layers" (Korthikanti et al. 2022, §4.2.3):
///
/// - p = 1 (plain gradient accumulation): 1
/// - GPipe: m
/// - 1F1B, ZB-H1, ZB-V: min(m, p)
/// - DualPipeV: min(m, p + 1/2) (2p + 1 half-stage chunks)
/// - interleaved: min(m, p·(1 + (p−1)/(p·v))) = min(m, p + (p−1)/v)
pub fn held_microbatches(kind: ScheduleKind, v: usize, p: usize, m: usize) -> f64 {
    if p <= 1 {
        return 1.0;
    }
    let (pf, mf) = (p as f64, m as f64);
    match kind {
        ScheduleKind::GPipe => mf,
        ScheduleKind::OneFOneB | ScheduleKind::ZeroBubbleH1 | ScheduleKind::ZeroBubbleV => {
            mf.min(pf)
        }
        ScheduleKind::DualPipeV => mf.min(pf + 0.5),
        ScheduleKind::Interleaved => mf.min(pf + (pf - 1.0) / v as f64),
    }
}

/// Model chunks per device (v for interleaved, 2 for ZB-V, else 1): the number of stage
/// boundaries each microbatch crosses on a device, for point-to-point traffic.
pub fn chunks(kind: ScheduleKind, v: usize) -> usize {
    kind.fixed_chunks().unwrap_or(v)
}

/// The bubble formula as text, for printing.
pub fn formula(kind: ScheduleKind) -> &'static str {
    match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB => "(p-1)/(m+p-1)",
        ScheduleKind::Interleaved => "(p-1)/(v·m+p-1)",
        ScheduleKind::ZeroBubbleH1 => "(p-1)/(3m+p-1)",
        ScheduleKind::ZeroBubbleV | ScheduleKind::DualPipeV => "(p-1)/(6m+p-1)",
    }
}

/// Checks schedule `kind` (`v` chunks when interleaved or ZB-V) against p stages, m
/// microbatches and L layers: L divisible by p·v, m divisible by p when interleaved
/// (Megatron's rule), m ≥ 2p for DualPipeV, two chunks per device for the V schedules and one
/// for the others.
pub fn validate(kind: ScheduleKind, v: usize, p: usize, m: usize, layers: usize) -> Result<()> {
    match kind.fixed_chunks() {
        Some(1) if v > 1 => {
            return Err(Error::Config(format!(
                "v = {v} model chunks per device need the interleaved schedule ({kind} runs one \
                 chunk per device); use the interleaved schedule or v = 1"
            )))
        }
        Some(n) if v != n => {
            return Err(Error::Config(format!(
                "{kind} places {n} model chunks per device (a V), got v = {v}; use v = {n}"
            )))
        }
        _ => {}
    }
    let chunks = chunks(kind, v);
    if chunks == 0 {
        return Err(Error::Config(
            "interleaved schedule needs v ≥ 1 model chunks per device; use v = 2 or more".into(),
        ));
    }
    if !layers.is_multiple_of(p.saturating_mul(chunks)) {
        return Err(Error::Config(format!(
            "{layers} layers do not split into pp·v = {p}·{chunks} equal stages; choose pp (and v) dividing the layer count"
        )));
    }
    if kind == ScheduleKind::DualPipeV && m < 2 * p {
        return Err(Error::Config(format!(
            "the dualpipev schedule needs microbatches m = {m} ≥ 2·pp = {}; choose m = {}",
            2 * p,
            2 * p
        )));
    }
    if kind == ScheduleKind::Interleaved && p > 1 && !m.is_multiple_of(p) {
        return Err(Error::Config(format!(
            "the interleaved schedule needs microbatches m = {m} to be a multiple of pp = {p}; choose m = {}",
            m.div_ceil(p).saturating_mul(p)
        )));
    }
    Ok(())
}

/// The planner's short name of schedule `kind` with `v` chunks: "gpipe", "1f1b", "interl.v2",
/// "zb-h1".
pub fn label(kind: ScheduleKind, v: usize) -> Label {
    Label { kind, v }
}

/// A schedule as the planner prints it (see [`label`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label {
    pub kind: ScheduleKind,
    pub v: usize,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ScheduleKind::Interleaved => write!(f, "interl.v{}", self.v),
            kind => f.write_str(kind.name()),
        }
    }
}
