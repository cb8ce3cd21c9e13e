//! The V schedules, ZB-V and DualPipeV: two chunks per device, device `d` holding stages `d`
//! and `2p−1−d` ([`Schedule::stage`]), the backward split into B and W. Each device's list is
//! written phase by phase with [`Counted`], which hands every (kind, chunk) its next
//! microbatch in turn.

use super::{check_sizes, Action, Kind, Schedule, ScheduleKind};
use crate::error::{Error, Result};

/// ZB-V (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §6): two chunks per device in a V
/// (device `d` holds stages `d` and `2p−1−d`), the backward split into B and W. Device `d` runs,
/// with `n = max(m, 2p−1)` microbatches laid out and those ≥ m dropped afterwards:
///
/// 1. warm-up: `2(p−d)−1` forwards on chunk 0, then `d` pairs (F chunk 1, F chunk 0), then
///    `p−d` triples (F, B, W on chunk 1): the V's turn starts its backward at once;
/// 2. steady state: (F, B, W on chunk 0; F, B, W on chunk 1) until every forward has run;
/// 3. cool-down: `d` pairs (B chunk 0, B chunk 1), then `p−d` pairs (B, W on chunk 0), then
///    the deferred W's of chunk 1 and of chunk 0, which fill the drain.
///
/// Each device holds at most `2p` chunk-microbatches of activations (half a stage each): the
/// peak of 1F1B's first device. With F = B = W of one unit per chunk the device clock idles only
/// while the V fills and drains (see `theory::bubble`).
///
/// ```text
/// zero_bubble_v(2, 3):
///   0F0c0 0F1c0 0F2c0 0F0c1 0B0c1 0W0c1 0F1c1 0B1c1 0W1c1 0B0c0 0W0c0 0F2c1 0B2c1 0W2c1 …
///   .     1F0c0 1F0c1 1F1c0 1F1c1 1B0c1 1W0c1 1F2c0 1B0c0 1W0c0 1F2c1 1B1c1 1W1c1 1B1c0 …
/// ```
pub fn zero_bubble_v(p: usize, m: usize) -> Result<Schedule> {
    check_sizes("zb-v", p, m, 2)?;
    let actions = (0..p).map(|d| zero_bubble_v_list(p, m, d)).collect();
    Ok(Schedule::of(ScheduleKind::ZeroBubbleV, p, m, 2, actions))
}

/// Device `d`'s ZB-V list (the phases in [`zero_bubble_v`]'s doc).
fn zero_bubble_v_list(p: usize, m: usize, d: usize) -> Vec<Action> {
    let n = m.max(2 * p - 1);
    let mut l = Counted::default();
    for _ in 0..2 * (p - d) - 1 {
        l.put(Kind::F, 0);
    }
    for _ in 0..d {
        l.put(Kind::F, 1);
        l.put(Kind::F, 0);
    }
    for _ in 0..p - d {
        l.put_all(1);
    }
    while l.count(Kind::F, 1) < l.count(Kind::F, 0) || l.count(Kind::F, 0) < n {
        if l.count(Kind::F, 0) < n {
            l.put(Kind::F, 0);
        }
        l.put(Kind::B, 0);
        l.put(Kind::W, 0);
        l.put_all(1);
    }
    for _ in 0..d {
        l.put(Kind::B, 0);
        l.put(Kind::B, 1);
    }
    for _ in 0..p - d {
        l.put(Kind::B, 0);
        l.put(Kind::W, 0);
    }
    // the deferred weight gradients fill the drain: chunk 1's, then chunk 0's
    for chunk in [1, 0] {
        while l.count(Kind::W, chunk) < l.count(Kind::B, chunk) {
            l.put(Kind::W, chunk);
        }
    }
    let mut list = l.list;
    list.retain(|a| a.micro < m);
    list
}

/// A device's list under construction: each (kind, chunk) takes the next microbatch in turn.
#[derive(Default)]
struct Counted {
    list: Vec<Action>,
    /// `next[kind][chunk]`, kinds in `F, B, W` order
    next: [[usize; 2]; 3],
    /// B's whose W waits, oldest first: (chunk, microbatch)
    deferred: std::collections::VecDeque<(usize, usize)>,
}

impl Counted {
    fn count(&self, kind: Kind, chunk: usize) -> usize {
        self.next[kind as usize][chunk]
    }
    fn put(&mut self, kind: Kind, chunk: usize) {
        let micro = self.count(kind, chunk);
        self.list.push(Action { kind, micro, chunk });
        self.next[kind as usize][chunk] += 1;
    }
    /// F, B and W of the next microbatch on `chunk`.
    fn put_all(&mut self, chunk: usize) {
        for kind in [Kind::F, Kind::B, Kind::W] {
            self.put(kind, chunk);
        }
    }
    /// The next B on `chunk`, with its W right after it (`full`) or deferred.
    fn backward(&mut self, chunk: usize, full: bool) {
        let micro = self.count(Kind::B, chunk);
        self.put(Kind::B, chunk);
        match full {
            true => self.list.push(Action::w(micro, chunk)),
            false => self.deferred.push_back((chunk, micro)),
        }
    }
    /// The oldest deferred W, if any.
    fn deferred_w(&mut self) {
        if let Some((chunk, micro)) = self.deferred.pop_front() {
            self.list.push(Action::w(micro, chunk));
        }
    }
}

/// DualPipeV (DeepSeek's DualPipe cut in half onto a V; Qi et al.'s V placement): two chunks per
/// device in a V, as ZB-V, and a steady state that pairs the forward of one chunk with the full
/// backward of the other ("F&B"). Device `d` runs, with `m ≥ 2p` microbatches:
///
/// 1. `2(p−1−d)` forwards on chunk 0, then `d+1` pairs (F chunk 0, F chunk 1);
/// 2. `p−1−d` times: B on chunk 1 (its W deferred), the oldest deferred W, F on chunk 1;
/// 3. `m−2p+d+1` times: F chunk 0 & full backward chunk 1, F chunk 1 & full backward chunk 0;
/// 4. `p−1−d` times: full backward chunk 1, F chunk 1 & full backward chunk 0;
/// 5. `d+1` pairs of backwards (chunk 1, chunk 0), full until halfway, then B with W deferred
///    (odd devices switch before chunk 1's, even ones before chunk 0's);
/// 6. `p−1−d` times: the oldest deferred W, a backward on chunk 0; then the `d+1` W's left.
///
/// A full backward is B followed at once by its W; "F & full backward" is F, B, W back to
/// back: the runtime runs them one after the other on the device, so what overlaps is each
/// pass's transfer with the next pass's compute (no kernel of one runs inside the other).
pub fn dual_pipe_v(p: usize, m: usize) -> Result<Schedule> {
    check_sizes("dualpipev", p, m, 2)?;
    if m < 2 * p {
        return Err(Error::Config(format!(
            "dualpipev needs at least as many microbatches as model stages (m ≥ 2p = {}), got \
             m = {m}; e.g. microbatches {}",
            2 * p,
            2 * p
        )));
    }
    let actions = (0..p).map(|d| dual_pipe_v_list(p, m, d)).collect();
    Ok(Schedule::of(ScheduleKind::DualPipeV, p, m, 2, actions))
}

/// Device `d`'s DualPipeV list (the phases in [`dual_pipe_v`]'s doc).
fn dual_pipe_v_list(p: usize, m: usize, d: usize) -> Vec<Action> {
    let mut l = Counted::default();
    for _ in 0..2 * (p - 1 - d) {
        l.put(Kind::F, 0);
    }
    for _ in 0..=d {
        l.put(Kind::F, 0);
        l.put(Kind::F, 1);
    }
    for _ in 0..p - 1 - d {
        l.backward(1, false);
        l.deferred_w();
        l.put(Kind::F, 1);
    }
    for _ in 0..m + d + 1 - 2 * p {
        l.put(Kind::F, 0);
        l.backward(1, true);
        l.put(Kind::F, 1);
        l.backward(0, true);
    }
    for _ in 0..p - 1 - d {
        l.backward(1, true);
        l.put(Kind::F, 1);
        l.backward(0, true);
    }
    // halfway through, the backwards stop running their W at once: odd devices from this
    // pair's chunk-1 backward on, even ones from its chunk-0 backward on
    let (half, odd) = (d.div_ceil(2), d % 2 == 1);
    let mut full = true;
    for i in 0..=d {
        full = full && !(i == half && odd);
        l.backward(1, full);
        full = full && (i != half || odd);
        l.backward(0, full);
    }
    for _ in 0..p - 1 - d {
        l.deferred_w();
        l.backward(0, full);
    }
    while !l.deferred.is_empty() {
        l.deferred_w();
    }
    l.list
}
