//! Communication: ring collectives, link time, the share of a step they cost, and the
//! tensor-parallel traffic of one transformer block.
//!
//! Ring all-reduce of S bytes over p devices = reduce-scatter + all-gather, each p−1 steps
//! moving S/p per step, so every device sends (and receives) `2(p−1)/p·S`:
//!
//! ```text
//!   d0 ──▶ d1 ──▶ d2 ──▶ … ──▶ d(p−1)
//!    ▲                            │      reduce-scatter: p−1 steps of S/p
//!    └────────────────────────────┘      all-gather:     p−1 steps of S/p
//! time = 2(p−1)·α + 2(p−1)/p·S / β          (α latency per step, β bandwidth of the slowest hop)
//! ```
//!
//! As p grows the volume approaches `2·S` (the **large-p** convention, docs/design.md's "≈ 28 GB"
//! for S = 14 GB); at p = 8 it is 24.5 GB (the **ring** convention).

use std::fmt;

/// Which all-reduce volume a figure uses; printed next to every communication figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Convention {
    /// The exact ring volume `2(p−1)/p·S`.
    Ring,
    /// The large-p limit `2·S` (docs/design.md's reference figure).
    LargeP,
}

impl fmt::Display for Convention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Convention::Ring => "ring 2(p-1)/p·S",
            Convention::LargeP => "large-p 2·S",
        })
    }
}

/// Ring all-reduce volume per device: `2(p−1)/p·S`; 0 for p ≤ 1.
pub fn ring_allreduce_bytes(s: f64, p: usize) -> f64 {
    2.0 * ring_collective_bytes(s, p)
}

/// The large-p limit of the ring all-reduce volume: `2·S`.
pub fn large_p_allreduce_bytes(s: f64) -> f64 {
    2.0 * s
}

/// Ring reduce-scatter or all-gather volume per device: `(p−1)/p·S`; 0 for p ≤ 1.
pub fn ring_collective_bytes(s: f64, p: usize) -> f64 {
    if p <= 1 {
        0.0
    } else {
        (p - 1) as f64 / p as f64 * s
    }
}

/// The link model (bandwidth β, latency α): the crate's one [`Link`].
pub use crate::link::Link;

/// Ring all-reduce time of S bytes over p devices: `2(p−1)·α + 2(p−1)/p·S/β`; 0 for p ≤ 1.
pub fn ring_allreduce_time(s: f64, p: usize, link: Link) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    2.0 * (p - 1) as f64 * link.latency_s + link.time(ring_allreduce_bytes(s, p))
}

/// Ring reduce-scatter or all-gather time: `(p−1)·α + (p−1)/p·S/β`; 0 for p ≤ 1.
pub fn ring_collective_time(s: f64, p: usize, link: Link) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    (p - 1) as f64 * link.latency_s + link.time(ring_collective_bytes(s, p))
}

/// How much of a collective can hide behind computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// Nothing overlaps: the step is compute + comm.
    None,
    /// Gradient buckets are reduced while the backward pass runs: up to the backward time,
    /// 2/3 of the compute by the 6·N rule (forward 2·N, backward 4·N FLOPs per token), hides.
    /// (The step model also lets ZeRO-3's prefetched gathers hide behind the forward pass.)
    Backward,
    /// Everything may hide behind the whole compute (an upper bound).
    Full,
}

impl Overlap {
    /// The compute time that communication can hide behind: 0, 2/3 or all of `compute`.
    pub fn window(self, compute: f64) -> f64 {
        match self {
            Overlap::None => 0.0,
            Overlap::Backward => compute * 2.0 / 3.0,
            Overlap::Full => compute,
        }
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Overlap::None => "no overlap",
            Overlap::Backward => "overlapped with backward (2/3 of compute)",
            Overlap::Full => "fully overlapped",
        })
    }
}

/// The communication left on the critical path: `max(0, comm − window)`.
pub fn exposed(comm: f64, window: f64) -> f64 {
    (comm - window).max(0.0)
}

/// Fraction of the step lost to communication: `exposed / (compute + exposed)`, exposed =
/// `max(0, comm − window)`. Without overlap this is `comm / (compute + comm)`: docs/design.md's
/// 70 / (200 + 70) ≈ 26 %.
pub fn fraction_lost(comm: f64, compute: f64, overlap: Overlap) -> f64 {
    let e = exposed(comm, overlap.window(compute));
    if compute + e <= 0.0 {
        0.0
    } else {
        e / (compute + e)
    }
}

/// Tensor-parallel traffic of one transformer block for one microbatch (Megatron-LM, no
/// sequence parallelism): the attention and MLP outputs are all-reduced in the forward pass
/// (`reduce_from_tp`), and their conjugates (`copy_to_tp`) in the backward pass: 2 + 2
/// all-reduces of the `b·s·h` activation, over the t devices of the TP group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TpTraffic {
    /// Bytes of one all-reduced tensor: `b·s·h·act_bytes`.
    pub message: f64,
    /// All-reduces per block per microbatch: 2 forward + 2 backward.
    pub allreduces: usize,
    /// Bytes each device sends per block per microbatch: `4 · 2(t−1)/t · message` (ring).
    pub bytes: f64,
    /// Time per block per microbatch: `4 · (2(t−1)·α + 2(t−1)/t·message/β)`; not overlapped.
    pub time: f64,
}

/// TP traffic of one block for a microbatch of `b` sequences of `s` tokens, hidden `h`, over
/// `t` devices on `link` (zero for t = 1).
pub fn tp_block_traffic(
    b: usize,
    s: usize,
    h: usize,
    act_bytes: f64,
    t: usize,
    link: Link,
) -> TpTraffic {
    let message = b as f64 * s as f64 * h as f64 * act_bytes;
    let allreduces = 4;
    TpTraffic {
        message,
        allreduces,
        bytes: allreduces as f64 * ring_allreduce_bytes(message, t),
        time: allreduces as f64 * ring_allreduce_time(message, t, link),
    }
}
