//! The analytic cost model and the planner: what a split of the work costs on paper.
//!
//! Everything here is pure arithmetic on plain structs, documented with its formula, so that
//! every figure the trainer measures can be printed beside the figure theory predicts.
//!
//! ```text
//! model      ModelShape (params, layers, hidden, heads, seq, vocab), Footprint (P, G, K, act bytes)
//! comm       ring all-reduce 2(p−1)/p·S, link time S/β + α, step fraction lost, TP traffic per block
//! pipeline   bubble per ScheduleKind (GPipe, 1F1B, interleaved v, ZB-H1), microbatches held
//! memory     ZeRO 0–3 for any (P, G, K), GPT activations per layer (Korthikanti et al.)
//! cluster    nodes × devices, links, rank placement (tp innermost, then pp, then dp)
//! layout     the trainer's Mesh on paper (MeshCost): checked against model and cluster, memory
//! step       step time = pipeline work / (1 − bubble) + exposed data-parallel traffic
//! plan       enumerate layouts, filter by memory, rank by step time, apply the decision guide
//! validate   a plan run on the trainer: calibrated rate, layouts on the engine, exact bytes
//! ```
//!
//! Units: bytes, seconds, FLOP/s, bytes/s, all as `f64`. "GB" is 10⁹ bytes, as in docs/design.md
//! (7e9 bf16 parameters = 14 GB), and "GB/s" is 10⁹ bytes/s.
//!
//! Conventions: a communication figure is either the exact **ring** volume `2(p−1)/p·S` or its
//! **large-p** limit `2·S`; every printed figure names the one it uses (see [`comm::Convention`]).
//!
//! The reference case of docs/design.md, reproduced by the golden tests:
//!
//! ```
//! use triaxis::cost::comm::{fraction_lost, large_p_allreduce_bytes, ring_allreduce_bytes, Link, Overlap};
//! let s = 7e9 * 2.0; // bf16 gradients: S = 14 GB
//! assert!((ring_allreduce_bytes(s, 8) - 24.5e9).abs() < 1.0); // ring, p = 8
//! let t = Link::gbps(400.0).time(large_p_allreduce_bytes(s)); // 28 GB at 400 GB/s
//! assert!((t - 0.070).abs() < 1e-12);
//! let lost = fraction_lost(t, 0.200, Overlap::None); // 70 / (200 + 70)
//! assert_eq!((lost * 100.0).round(), 26.0);
//! ```

pub mod activation;
pub mod cluster;
pub mod comm;
pub mod layout;
pub mod memory;
pub mod model;
/// Pipeline schedules on paper (bubble, held microbatches): [`crate::pipeline::theory`].
pub use crate::pipeline::theory as pipeline;
pub mod plan;
pub mod step;
pub mod validate;
pub mod zero;

pub use cluster::Cluster;
pub use comm::{Convention, Link, Overlap};
pub use layout::MeshCost;
pub use memory::{MemoryBreakdown, ZeroStage};
pub use model::{Footprint, ModelShape};
pub use plan::{plan, Candidate, Family, FamilyVerdict, PlanRequest, Ranking};
pub use step::StepEstimate;

/// One gigabyte as docs/design.md counts it: 10⁹ bytes.
pub const GB: f64 = 1e9;

pub(crate) use crate::error::{at_least_one, positive};

/// The divisors of `n` in increasing order (n ≥ 1; empty for 0).
pub fn divisors(n: usize) -> Vec<usize> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1;
    while d <= n / d {
        if n.is_multiple_of(d) {
            small.push(d);
            if d != n / d {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small
}
