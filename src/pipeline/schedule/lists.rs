//! The one-chunk and interleaved schedules' action lists: GPipe, 1F1B, ZB-H1 and interleaved
//! 1F1B, each device's list built from its position.

use super::{check_sizes, Action, Kind, Schedule, ScheduleKind};
use crate::error::{Error, Result};

/// GPipe: every device runs all forwards, then all backwards (both in microbatch order).
/// Each device holds the activations of all `m` microbatches at its peak.
///
/// ```text
/// gpipe(2, 2):  0F0 0F1 .   .   0B0 0B1
///               .   1F0 1F1 1B0 1B1 .
/// ```
pub fn gpipe(p: usize, m: usize) -> Result<Schedule> {
    check_sizes("gpipe", p, m, 1)?;
    let actions = (0..p)
        .map(|_| {
            (0..m)
                .map(|i| Action::f(i, 0))
                .chain((0..m).map(|i| Action::b(i, 0)))
                .collect()
        })
        .collect();
    Ok(Schedule::of(ScheduleKind::GPipe, p, m, 1, actions))
}

/// 1F1B (PipeDream-flush): device `d` runs `p−1−d` warm-up forwards, then alternates one forward
/// and one backward, then drains the remaining backwards. Device `d` holds at most
/// `min(p−d, m)` microbatches' activations.
pub fn one_f_one_b(p: usize, m: usize) -> Result<Schedule> {
    check_sizes("1f1b", p, m, 1)?;
    let actions = (0..p).map(|d| one_f_one_b_list(p, m, d)).collect();
    Ok(Schedule::of(ScheduleKind::OneFOneB, p, m, 1, actions))
}

/// The 1F1B list of device `d` (F and B only).
fn one_f_one_b_list(p: usize, m: usize, d: usize) -> Vec<Action> {
    let warm = (p - 1 - d).min(m);
    let mut list: Vec<Action> = (0..warm).map(|i| Action::f(i, 0)).collect();
    for j in 0..m {
        if warm + j < m {
            list.push(Action::f(warm + j, 0));
        }
        list.push(Action::b(j, 0));
    }
    list
}

/// Zero-bubble ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B with each
/// backward split into B (input gradient, on the critical path between stages) and W (weight
/// gradient, local). Device `d` keeps 1F1B's F/B order and runs the W of microbatch `j` right
/// after the B of microbatch `j + d`; the `d` W's left at the end fill the cool-down bubble.
/// Device `d` therefore holds at most `p−d` + `d` = `p` microbatches (activations are freed by
/// W): the same peak as 1F1B's first device. With unit-cost F, B, W the bubble is
/// `(p−1)/(3m+p−1)` for `m ≥ p`, a third of 1F1B's idle time.
///
/// ```text
/// zero_bubble_h1(2, 3):  0F0 0F1 .   0B0 0W0 0F2 0B1 0W1 0B2 0W2
///                        .   1F0 1B0 1F1 1B1 1W0 1F2 1B2 1W1 1W2
/// ```
pub fn zero_bubble_h1(p: usize, m: usize) -> Result<Schedule> {
    check_sizes("zb-h1", p, m, 1)?;
    let actions = (0..p)
        .map(|d| {
            let mut list = Vec::with_capacity(3 * m);
            let mut next_w = 0;
            for a in one_f_one_b_list(p, m, d) {
                list.push(a);
                if a.kind == Kind::B && a.micro >= d {
                    list.push(Action::w(next_w, 0));
                    next_w += 1;
                }
            }
            list.extend((next_w..m).map(|j| Action::w(j, 0)));
            list
        })
        .collect();
    Ok(Schedule::of(ScheduleKind::ZeroBubbleH1, p, m, 1, actions))
}

/// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each device holds `v` chunks and
/// walks microbatches in groups of `p`: the k-th forward on every device is microbatch
/// `(k / pv)·p + k % p` on chunk `(k % pv) / p`; backwards walk the same order with the chunks
/// reversed. Device `d` runs `2(p−1−d) + (v−1)p` warm-up forwards (at most `m·v`), then
/// alternates one forward and one backward, then drains. Needs `m % p == 0`. The bubble with
/// unit-cost chunks is `(p−1)/(v·m+p−1)`. With `v = 1` this is plain 1F1B.
pub fn interleaved(p: usize, m: usize, v: usize) -> Result<Schedule> {
    check_sizes("interleaved", p, m, v)?;
    if v == 1 {
        let one = one_f_one_b(p, m)?;
        return Ok(Schedule {
            kind: ScheduleKind::Interleaved,
            ..one
        });
    }
    if !m.is_multiple_of(p) {
        return Err(Error::Config(format!(
            "interleaved schedule needs the microbatch count to be a multiple of the device \
             count (m % p == 0), got m = {m}, p = {p}"
        )));
    }
    let total = m * v;
    // The k-th forward (backward) of any device: (microbatch, chunk).
    let at = |k: usize, forward: bool| {
        let (group, r) = (k / (p * v), k % (p * v));
        let chunk = if forward { r / p } else { v - 1 - r / p };
        (group * p + r % p, chunk)
    };
    let actions = (0..p)
        .map(|d| {
            let warm = (2 * (p - 1 - d) + (v - 1) * p).min(total);
            let mut list = Vec::with_capacity(2 * total);
            list.extend((0..warm).map(|k| {
                let (i, c) = at(k, true);
                Action::f(i, c)
            }));
            for k in 0..total {
                if warm + k < total {
                    let (i, c) = at(warm + k, true);
                    list.push(Action::f(i, c));
                }
                let (i, c) = at(k, false);
                list.push(Action::b(i, c));
            }
            list
        })
        .collect();
    Ok(Schedule::of(ScheduleKind::Interleaved, p, m, v, actions))
}
