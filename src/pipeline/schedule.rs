//! Pipeline schedules as data: one ordered list of [`Action`]s per device, built by pure
//! functions (`gpipe`, `one_f_one_b`, `interleaved`, `zero_bubble_h1` here; the V schedules
//! `zero_bubble_v` and `dual_pipe_v` in its child `schedule/vshape.rs`). The same value feeds the validator, the
//! unit-cost simulator and the runtime's lowering; nothing else knows a schedule's shape.
//!
//! Placement. With `p` devices and `v` chunks per device, the model is cut into `p·v` stages and
//! device `d` holds stages `d, d+p, d+2p, …` (Megatron's interleaving). An action's `chunk` is the
//! local chunk index `c`; its model stage is `c·p + d`, where `d` is the index of the list that
//! holds it. Without interleaving `v = 1` and every chunk is 0.
//!
//! The V placement (ZB-V): two chunks per device, device `d` holding stages `d` and `2p−1−d`, so
//! device 0 runs both the first and the last stage and the turn of the V (stages `p−1` → `p`)
//! stays on device `p−1`. [`Schedule::stage`] and [`Schedule::place`] are the only places that
//! know either rule.
//!
//! ```text
//!   p = 2, V                stage 0    stage 1    stage 2    stage 3
//!   device 0 (chunks 0,1)   [c0] ───▶ ─┐                     ┌─▶ [c1] → loss
//!   device 1 (chunks 0,1)              └─▶ [c0] ─▶ [c1] ───┘
//! ```
//!
//! ```text
//!   p = 2, v = 2            stage 0    stage 1    stage 2    stage 3
//!   device 0 (chunks 0,1)   [c0] ───▶ ─┐          [c1] ───▶ ─┐
//!   device 1 (chunks 0,1)              └─▶ [c0] ───┘          └─▶ [c1] → loss
//! ```
//!
//! Labels: `{device}{kind}{micro}`, e.g. `2F0`, `1B3`, `0W5`; when `v > 1` the local chunk
//! follows after `c`: `1F3c1` is device 1's forward of microbatch 3 on its chunk 1 (stage p+1).
//!
//! Messages. The forward of stage `s < p·v−1` sends an activation to stage `s+1`; the backward
//! (B) of stage `s > 0` sends a gradient to stage `s−1`. W sends nothing. Between different
//! devices a message travels on the channel `(from, to, flow)`, strictly first in first out.

use crate::error::{Error, Result};
use std::fmt;

mod lists;
pub(super) mod vshape;
pub use lists::{gpipe, interleaved, one_f_one_b, zero_bubble_h1};

/// What an action computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Forward of one microbatch through one chunk.
    F,
    /// Backward. The full backward (input and weight gradients) except in zero-bubble
    /// schedules, where it is the input-gradient part only.
    B,
    /// Weight-gradient part of the backward (zero-bubble schedules only).
    W,
}

impl Kind {
    /// F, B, W as 0, 1, 2: the index of per-pass arrays (segments, work, marks).
    pub fn index(self) -> usize {
        match self {
            Kind::F => 0,
            Kind::B => 1,
            Kind::W => 2,
        }
    }
}

/// One unit of work on one device: `kind` of microbatch `micro` through local chunk `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Action {
    pub kind: Kind,
    pub micro: usize,
    pub chunk: usize,
}

impl Action {
    pub fn f(micro: usize, chunk: usize) -> Action {
        Action {
            kind: Kind::F,
            micro,
            chunk,
        }
    }
    pub fn b(micro: usize, chunk: usize) -> Action {
        Action {
            kind: Kind::B,
            micro,
            chunk,
        }
    }
    pub fn w(micro: usize, chunk: usize) -> Action {
        Action {
            kind: Kind::W,
            micro,
            chunk,
        }
    }
    /// The printed form on `device`: `2F0`, or `1F3c1` when the schedule has `v > 1`.
    pub fn label(&self, device: usize, v: usize) -> String {
        match v {
            1 => format!("{device}{:?}{}", self.kind, self.micro),
            _ => format!("{device}{:?}{}c{}", self.kind, self.micro, self.chunk),
        }
    }
}

/// The schedule families, parsed from "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v",
/// "dualpipev".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleKind {
    GPipe,
    OneFOneB,
    Interleaved,
    ZeroBubbleH1,
    ZeroBubbleV,
    DualPipeV,
}

impl ScheduleKind {
    pub const ALL: [ScheduleKind; 6] = [
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved,
        ScheduleKind::ZeroBubbleH1,
        ScheduleKind::ZeroBubbleV,
        ScheduleKind::DualPipeV,
    ];
    pub const NAMES: [&'static str; 6] =
        ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"];

    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::GPipe => "gpipe",
            ScheduleKind::OneFOneB => "1f1b",
            ScheduleKind::Interleaved => "interleaved",
            ScheduleKind::ZeroBubbleH1 => "zb-h1",
            ScheduleKind::ZeroBubbleV => "zb-v",
            ScheduleKind::DualPipeV => "dualpipev",
        }
    }

    /// Whether the backward is split into B (input gradients) and W (weight gradients).
    pub fn split_backward(self) -> bool {
        matches!(
            self,
            ScheduleKind::ZeroBubbleH1 | ScheduleKind::ZeroBubbleV | ScheduleKind::DualPipeV
        )
    }

    /// Whether stages sit on the devices in a V (two chunks per device; see the module doc).
    pub fn v_shaped(self) -> bool {
        matches!(self, ScheduleKind::ZeroBubbleV | ScheduleKind::DualPipeV)
    }

    /// The chunks per device the schedule needs, when it fixes them (the V schedules: 2).
    pub fn fixed_chunks(self) -> Option<usize> {
        match self {
            ScheduleKind::Interleaved => None,
            ScheduleKind::ZeroBubbleV | ScheduleKind::DualPipeV => Some(2),
            _ => Some(1),
        }
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ScheduleKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<ScheduleKind> {
        let lower = s.trim().to_ascii_lowercase();
        ScheduleKind::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown pipeline schedule {s:?}: expected one of {}",
                    ScheduleKind::NAMES.join(", ")
                ))
            })
    }
}

/// Which way a message flows between stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// Output of a forward, to the next stage.
    Activation,
    /// Input gradient of a backward, to the previous stage.
    Gradient,
}

/// A message between two stages: produced by `micro`'s F (activation) or B (gradient) on
/// stage `stage`, which lives on device `from`; consumed on device `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Msg {
    pub from: usize,
    pub to: usize,
    pub flow: Flow,
    pub micro: usize,
    pub stage: usize,
}

/// A pipeline schedule: `actions[d]` is the ordered work of device `d`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Devices (pipeline ranks).
    pub p: usize,
    /// Microbatches per step.
    pub m: usize,
    /// Chunks (virtual stages) per device; 1 unless interleaved.
    pub v: usize,
    pub kind: ScheduleKind,
    pub actions: Vec<Vec<Action>>,
}

impl Schedule {
    /// Build the schedule `kind` for `p` devices, `m` microbatches and `v` chunks per device
    /// (`v` is 1 except for interleaved, which takes any, and zb-v, which takes 2).
    pub fn new(kind: ScheduleKind, p: usize, m: usize, v: usize) -> Result<Schedule> {
        match kind.fixed_chunks() {
            Some(1) if v != 1 => {
                return Err(Error::Config(format!(
                    "{kind} has one chunk per device (v = 1), got v = {v}; only interleaved \
                     uses v > 1"
                )))
            }
            Some(n) if v != n => {
                return Err(Error::Config(format!(
                    "{kind} places {n} chunks per device (a V), got v = {v}; use v = {n}"
                )))
            }
            _ => {}
        }
        match kind {
            ScheduleKind::GPipe => gpipe(p, m),
            ScheduleKind::OneFOneB => one_f_one_b(p, m),
            ScheduleKind::Interleaved => interleaved(p, m, v),
            ScheduleKind::ZeroBubbleH1 => zero_bubble_h1(p, m),
            ScheduleKind::ZeroBubbleV => vshape::zero_bubble_v(p, m),
            ScheduleKind::DualPipeV => vshape::dual_pipe_v(p, m),
        }
    }

    /// The value itself (no checks; `validate` checks).
    pub fn of(
        kind: ScheduleKind,
        p: usize,
        m: usize,
        v: usize,
        actions: Vec<Vec<Action>>,
    ) -> Schedule {
        Schedule {
            p,
            m,
            v,
            kind,
            actions,
        }
    }

    /// Number of model stages, `p·v`.
    pub fn stages(&self) -> usize {
        self.p * self.v
    }

    /// Model stage of local `chunk` on `device`: `c·p + d`, or in a V `d` and `2p−1−d`.
    pub fn stage(&self, device: usize, chunk: usize) -> usize {
        match (self.kind.v_shaped(), chunk) {
            (true, 1) => 2 * self.p - 1 - device,
            _ => chunk * self.p + device,
        }
    }

    /// `(device, chunk)` holding model stage `stage` (the inverse of [`Schedule::stage`]).
    pub fn place(&self, stage: usize) -> (usize, usize) {
        match self.kind.v_shaped() && stage >= self.p {
            true => (2 * self.p - 1 - stage, 1),
            false => (stage % self.p, stage / self.p),
        }
    }

    /// Label of `action` on `device` (see the module doc).
    pub fn label(&self, device: usize, action: &Action) -> String {
        action.label(device, self.v)
    }

    /// The message `action` on `device` consumes from another stage, if any: an activation for
    /// F of stage > 0, a gradient for B of a stage below the last. It may come from the same
    /// device (`from == to`), in which case no channel is involved.
    pub fn input(&self, device: usize, action: &Action) -> Option<Msg> {
        let s = self.stage(device, action.chunk);
        let (src, flow) = match action.kind {
            Kind::F if s > 0 => (s - 1, Flow::Activation),
            Kind::B if s + 1 < self.stages() => (s + 1, Flow::Gradient),
            _ => return None,
        };
        let from = self.place(src).0;
        Some(Msg {
            from,
            to: device,
            flow,
            micro: action.micro,
            stage: src,
        })
    }

    /// The message `action` on `device` produces for another stage, if any.
    pub fn output(&self, device: usize, action: &Action) -> Option<Msg> {
        let s = self.stage(device, action.chunk);
        let (dst, flow) = match action.kind {
            Kind::F if s + 1 < self.stages() => (s + 1, Flow::Activation),
            Kind::B if s > 0 => (s - 1, Flow::Gradient),
            _ => return None,
        };
        let to = self.place(dst).0;
        Some(Msg {
            from: device,
            to,
            flow,
            micro: action.micro,
            stage: s,
        })
    }
}

impl Schedule {
    /// Per (device, chunk): the most microbatches whose activations are held at once when the
    /// device's list runs in order (a forward takes a slot; the backward, or W when the backward
    /// is split, frees it) — the activation slots a stage needs.
    pub fn slots_needed(&self) -> Vec<Vec<usize>> {
        let split = self.kind.split_backward();
        self.actions
            .iter()
            .map(|list| {
                let (mut now, mut peak) = (vec![0usize; self.v], vec![0usize; self.v]);
                for a in list {
                    match a.kind {
                        Kind::F => now[a.chunk] += 1,
                        Kind::B if !split => now[a.chunk] -= 1,
                        Kind::W => now[a.chunk] -= 1,
                        Kind::B => {}
                    }
                    peak[a.chunk] = peak[a.chunk].max(now[a.chunk]);
                }
                peak
            })
            .collect()
    }
}

impl fmt::Display for Schedule {
    /// One line per device: `d: 0F0 0F1 0B0 0B1` (list order, not time).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (d, list) in self.actions.iter().enumerate() {
            let labels: Vec<String> = list.iter().map(|a| self.label(d, a)).collect();
            writeln!(f, "{d}: {}", labels.join(" "))?;
        }
        Ok(())
    }
}

pub(super) fn check_sizes(name: &str, p: usize, m: usize, v: usize) -> Result<()> {
    for (what, n) in [
        ("devices p", p),
        ("microbatches m", m),
        ("chunks per device v", v),
    ] {
        if n == 0 {
            return Err(Error::Config(format!(
                "{name} schedule needs at least one of {what}, got 0"
            )));
        }
    }
    Ok(())
}
