//! The planner: enumerate every layout of a cluster, keep those that fit in memory, rank them
//! by predicted step time, and apply docs/design.md's decision guide.
//!
//! Enumeration: dp·tp·pp = all devices, with tp dividing the heads and tp ≤ devices per node
//! (tensor parallel stays inside a node), pp dividing the layers; ZeRO stage 0–3 when dp > 1;
//! for pp > 1 the schedules 1F1B, interleaved (v = 2, when 2·pp divides the layers and pp
//! divides m) and ZB-H1 (GPipe has 1F1B's bubble and more memory, so it never wins); every
//! microbatch count m dividing `global_batch / dp`.
//!
//! The decision guide, one family per row of docs/design.md's table, simplest first:
//!
//! ```text
//! family     layouts                    rule
//! pure DP    tp = pp = 1, ZeRO 0        the model fits on one card
//! ZeRO       tp = pp = 1, ZeRO 1–3      optimizer state is too big to replicate
//! TP         tp > 1, pp = 1             one layer no longer fits: split it, inside a node
//! PP         pp > 1                     very many layers: pipeline, many microbatches (m ≥ 4p)
//! ```
//!
//! Choice: let T* be the fastest fitting step time. Among fitting layouts within
//! [`SIMPLICITY_MARGIN`] of T*, take the simplest: the simplest family, then the lowest ZeRO
//! stage, the smallest tp, the smallest pp; among those the fastest (ties: fewer microbatches).
//! A few percent of predicted time buys a split with fewer moving parts, less sharding traffic
//! and, usually, memory headroom. Each other family gets one line saying why it lost:
//! impossible for this input, does not fit (and by how much), slower (and by how much), or
//! within the margin but more complex.

use super::cluster::Cluster;
use super::comm::Overlap;
use super::divisors;
use super::layout::MeshCost;
use super::memory::{MemoryBreakdown, ZeroStage};
use super::model::{Footprint, ModelShape};
use super::step::{estimate_unchecked, StepEstimate};
use super::GB;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::pipeline::ScheduleKind;
use std::cmp::Ordering;

mod family;
pub use family::Family;

/// The largest global batch (sequences) the planner enumerates, 2²⁰, so that planning stays fast.
pub const MAX_GLOBAL_BATCH: usize = 1 << 20;

/// A simpler family wins when its step is within this fraction of the fastest (5 %).
pub const SIMPLICITY_MARGIN: f64 = 0.05;

/// What to plan for.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRequest {
    pub model: ModelShape,
    pub precision: Footprint,
    pub cluster: Cluster,
    /// Sequences per optimizer step, over all replicas.
    pub global_batch: usize,
    pub overlap: Overlap,
}

/// One evaluated layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub layout: Mesh,
    pub memory: MemoryBreakdown,
    pub step: StepEstimate,
}

impl Candidate {
    pub fn family(&self) -> Family {
        Family::of(&self.layout)
    }

    /// Whether its memory per device fits the cluster's devices.
    pub fn fits(&self, cluster: &Cluster) -> bool {
        self.memory.total <= cluster.mem_per_device
    }
}

/// Why a family was chosen or rejected.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyVerdict {
    pub family: Family,
    pub chosen: bool,
    /// One line, e.g. "does not fit: … needs 142.3 GB per device, 62.3 GB over 80 GB".
    pub reason: String,
}

/// The planner's answer: every fitting layout ranked, and why each family won or lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranking {
    pub recommended: Candidate,
    /// Fitting layouts, the recommended first, then by step time; one entry per
    /// (dp, tp, pp, ZeRO stage): its best schedule and microbatch count.
    pub ranked: Vec<Candidate>,
    /// One verdict per family, in [`Family::ALL`] order.
    pub verdicts: Vec<FamilyVerdict>,
    /// Layouts evaluated and layouts that fit.
    pub considered: usize,
    pub fitting: usize,
}

/// Every layout the planner considers, evaluated, fitting or not (see the module doc).
pub fn enumerate(req: &PlanRequest) -> Result<Vec<Candidate>> {
    req.model.validate()?;
    req.precision.validate()?;
    req.cluster.validate()?;
    if req.global_batch == 0 || req.global_batch > MAX_GLOBAL_BATCH {
        return Err(Error::Config(format!(
            "the global batch must be 1 to {MAX_GLOBAL_BATCH} sequences, got {}; pass --global-batch, e.g. 64",
            req.global_batch
        )));
    }
    let (model, cluster) = (&req.model, &req.cluster);
    let devices = cluster.devices();
    let mut out = Vec::new();
    for tp in divisors(devices) {
        if !model.heads.is_multiple_of(tp) || tp > cluster.devices_per_node {
            continue;
        }
        for pp in divisors(devices / tp) {
            if !model.layers.is_multiple_of(pp) {
                continue;
            }
            let dp = devices / (tp * pp);
            if !req.global_batch.is_multiple_of(dp) {
                continue;
            }
            let zeros = if dp > 1 { ZeroStage::ALL.len() } else { 1 };
            // (kind, chunks v)
            let schedules: &[(ScheduleKind, usize)] = if pp > 1 {
                &[
                    (ScheduleKind::OneFOneB, 1),
                    (ScheduleKind::Interleaved, 2),
                    (ScheduleKind::ZeroBubbleH1, 1),
                    (ScheduleKind::ZeroBubbleV, 2),
                    (ScheduleKind::DualPipeV, 2),
                ]
            } else {
                &[(ScheduleKind::OneFOneB, 1)]
            };
            for zero in 0..zeros {
                for &(schedule, chunks) in schedules {
                    for m in divisors(req.global_batch / dp) {
                        let layout = Mesh {
                            dp,
                            tp,
                            pp,
                            zero,
                            schedule,
                            microbatches: m,
                            chunks,
                        };
                        let Ok(b) = layout.validate_on(model, cluster, req.global_batch) else {
                            continue;
                        };
                        out.push(Candidate {
                            layout,
                            memory: layout.memory(model, &req.precision, b),
                            step: estimate_unchecked(
                                model,
                                &req.precision,
                                cluster,
                                &layout,
                                b,
                                req.global_batch,
                                req.overlap,
                            ),
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Plans a layout for `req`: the recommendation, a ranked list, and one verdict per family.
/// Errors when no layout is possible or none fits (saying by how much memory).
pub fn plan(req: &PlanRequest) -> Result<Ranking> {
    let all = enumerate(req)?;
    let cluster = &req.cluster;
    let (model, devices) = (&req.model, cluster.devices());
    if all.is_empty() {
        return Err(Error::Config(format!(
            "no layout of {devices} devices splits a global batch of {} sequences (dp must divide it, \
             dp·tp·pp = {devices}, tp | {} heads and tp ≤ {} per node, pp | {} layers); \
             use a global batch that is a multiple of {devices}",
            req.global_batch, model.heads, cluster.devices_per_node, model.layers
        )));
    }
    let mut fitting: Vec<Candidate> = all.iter().copied().filter(|c| c.fits(cluster)).collect();
    if fitting.is_empty() {
        let least = smallest(&all);
        let cap = cluster.mem_per_device;
        return Err(Error::Config(format!(
            "no layout fits in {:.1} GB per device: the smallest, {} (b={}), needs {:.1} GB, {:.1} GB over; \
             add devices or memory per device, or shorten the sequence",
            cap / GB,
            least.layout.label(),
            least.step.micro_batch,
            least.memory.total / GB,
            (least.memory.total - cap) / GB
        )));
    }
    fitting.sort_by(faster);
    let fastest = fitting[0].step.step;
    let recommended = *fitting
        .iter()
        .filter(|c| c.step.step <= fastest * (1.0 + SIMPLICITY_MARGIN))
        .min_by(|a, b| simpler(a, b).then(faster(a, b)))
        .unwrap_or(&fitting[0]);
    let chosen = recommended.family();

    let mut ranked = vec![recommended];
    for c in &fitting {
        let key = |x: &Candidate| (x.layout.dp, x.layout.tp, x.layout.pp, x.layout.zero);
        if !ranked.iter().any(|r| key(r) == key(c)) {
            ranked.push(*c);
        }
    }
    let verdicts = Family::ALL
        .iter()
        .map(|&f| verdict(f, chosen, &all, &fitting, &recommended, req))
        .collect();
    Ok(Ranking {
        recommended,
        ranked,
        verdicts,
        considered: all.len(),
        fitting: fitting.len(),
    })
}

/// Order by step time; ties go to the lower ZeRO stage, then fewer microbatches, smaller tp, pp.
fn faster(a: &Candidate, b: &Candidate) -> Ordering {
    a.step
        .step
        .total_cmp(&b.step.step)
        .then(a.layout.zero.cmp(&b.layout.zero))
        .then(a.layout.microbatches.cmp(&b.layout.microbatches))
        .then(a.layout.tp.cmp(&b.layout.tp))
        .then(a.layout.pp.cmp(&b.layout.pp))
}

/// Order by simplicity: family, then ZeRO stage, tp, pp.
fn simpler(a: &Candidate, b: &Candidate) -> Ordering {
    let key = |c: &Candidate| (c.family(), c.layout.zero, c.layout.tp, c.layout.pp);
    key(a).cmp(&key(b))
}

/// The candidate needing the least memory per device.
fn smallest(cands: &[Candidate]) -> Candidate {
    *cands
        .iter()
        .min_by(|a, b| a.memory.total.total_cmp(&b.memory.total))
        .expect("smallest() is called on a non-empty list")
}

/// The one-line verdict for family `f`.
fn verdict(
    f: Family,
    chosen: Family,
    all: &[Candidate],
    fitting: &[Candidate],
    rec: &Candidate,
    req: &PlanRequest,
) -> FamilyVerdict {
    let (model, cluster) = (&req.model, &req.cluster);
    let mine: Vec<Candidate> = all.iter().copied().filter(|c| c.family() == f).collect();
    let best = fitting.iter().find(|c| c.family() == f);
    let reason = if f == chosen {
        let l = rec.layout;
        let extra = if l.pp > 1 && l.microbatches < 4 * l.pp {
            format!(
                "; note m = {} < 4p = {}: bubble {:.1} %",
                l.microbatches,
                4 * l.pp,
                100.0 * rec.step.bubble
            )
        } else {
            String::new()
        };
        format!(
            "chosen: {} needs {:.1} of {:.1} GB per device, step {:.3} s; the simplest family within {:.0} % \
             of the fastest (docs/design.md: {}){extra}",
            l.label(),
            rec.memory.total / GB,
            cluster.mem_per_device / GB,
            rec.step.step,
            100.0 * SIMPLICITY_MARGIN,
            f.rule()
        )
    } else if mine.is_empty() {
        match f {
            Family::Zero if cluster.devices() == 1 => {
                "not possible: one device has no data-parallel group to shard over".to_string()
            }
            Family::PureDp | Family::Zero => format!(
                "not possible: dp = {} devices must divide the global batch {}",
                cluster.devices(),
                req.global_batch
            ),
            Family::Tensor => format!(
                "not possible: no tp > 1 divides the {} heads, the {} devices of a node and the global batch's split",
                model.heads, cluster.devices_per_node
            ),
            Family::Pipeline => format!(
                "not possible: no pp > 1 divides both the {} layers and the {} devices (with the global batch's split)",
                model.layers,
                cluster.devices()
            ),
        }
    } else if let Some(best) = best {
        let fastest = fitting[0].step.step;
        if best.step.step > fastest * (1.0 + SIMPLICITY_MARGIN) || f < chosen {
            format!(
                "fits but slower: best {} takes {:.3} s, +{:.1} % over the chosen {:.3} s",
                best.layout.label(),
                best.step.step,
                100.0 * (best.step.step / rec.step.step - 1.0),
                rec.step.step
            )
        } else {
            format!(
                "fits and is within {:.0} % ({} at {:.3} s), but the guide prefers the simpler {}",
                100.0 * SIMPLICITY_MARGIN,
                best.layout.label(),
                best.step.step,
                chosen.name()
            )
        }
    } else {
        let least = smallest(&mine);
        format!(
            "does not fit: the smallest, {} (b={}), needs {:.1} GB per device, {:.1} GB over {:.1} GB",
            least.layout.label(),
            least.step.micro_batch,
            least.memory.total / GB,
            (least.memory.total - cluster.mem_per_device) / GB,
            cluster.mem_per_device / GB
        )
    };
    FamilyVerdict {
        family: f,
        chosen: f == chosen,
        reason,
    }
}
