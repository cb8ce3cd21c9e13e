//! What the simulator scales by segments, blocks, FLOPs and parameters: a fixed cost per
//! timed segment, per layer and per embedding or head, and seconds per FLOP of each pass
//! class; a fixed cost per call and seconds per parameter of the optimizer. Fitted to per-op
//! times measured on one adapter and saved as a small JSON file that names where they came
//! from.
//!
//! ```text
//! pass seconds   = segments · per_segment + layers · per_block + ends · per_end
//!                  + FLOPs · per_unit + tensor-parallel FLOPs · per_split
//!                  (ends: the embedding and the head; a layer's products split over t > 1
//!                  tensor ranks are narrower and run at their own rate, per_split)
//!                  class: F, B (input gradients of a split backward), W, BW (whole backward)
//! optimizer      = calls · per_segment + parameters · per_unit
//! fit            least squares of the relative misses over the measured passes (one point
//!                per chunk, pass and layout), every constant ≥ 0 (the best fit over the
//!                subsets of constants left free whose solution has none negative)
//! ```
//!
//! Communication, when measured too ([`Links`]), is the runtime's own host-staged path by
//! bytes: a device's download and upload, the communicator's ring all-reduce over d ranks
//! and its point-to-point message. The simulator prices communication from these only when
//! asked ([`crate::sim::CommSource::Calibration`]); by default from the cluster's links, as the
//! device clock prices the virtual devices' transfers from the link model.
//!
//! ```text
//! staging        = per_segment + d · bytes · per_unit       (download + upload of one buffer on
//!                                                           each of d devices at once)
//! ring all-reduce = 2(d−1) · per_segment + 2(d−1)/d · bytes · per_unit    (α per ring step)
//! message        = per_segment + bytes · per_unit           (one point-to-point send)
//! ```

use crate::error::{Error, Result};

/// The pass classes the calibration fits apart.
pub const CLASSES: [&str; 4] = ["F", "B", "W", "BW"];

/// What a fit scales, per pass: [segments (or optimizer calls), layers, ends (embedding,
/// head), FLOPs (or parameters), FLOPs of layers split over tensor ranks].
pub type Terms = [f64; 5];

/// A linear cost over [`Terms`].
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fit {
    /// Seconds per timed segment (passes) or per call (the optimizer).
    pub per_segment: f64,
    /// Seconds per layer.
    pub per_block: f64,
    /// Seconds per embedding or head.
    pub per_end: f64,
    /// Seconds per FLOP (passes) or per parameter (the optimizer).
    pub per_unit: f64,
    /// Seconds per FLOP of a layer split over tensor ranks, where the fit saw such passes
    /// (`None`: at `per_unit`, as calibrations without tensor-parallel points price them).
    #[serde(default)]
    pub per_split: Option<f64>,
    /// Points the fit was made from, and the largest relative miss among them.
    pub points: usize,
    pub max_miss: f64,
}

impl Fit {
    fn coefficients(&self) -> Terms {
        [
            self.per_segment,
            self.per_block,
            self.per_end,
            self.per_unit,
            self.per_split.unwrap_or(self.per_unit),
        ]
    }

    pub fn seconds(&self, terms: Terms) -> f64 {
        self.coefficients()
            .iter()
            .zip(terms)
            .map(|(c, t)| c * t)
            .sum()
    }

    /// Every constant finite and ≥ 0.
    pub fn is_valid(&self) -> bool {
        self.coefficients()
            .iter()
            .all(|c| c.is_finite() && *c >= 0.0)
    }

    /// Least squares of the relative miss of `seconds ≈ Σ constant · term` over
    /// `(terms, seconds)` (each point weighted by 1/seconds²), every constant ≥ 0: of the
    /// subsets of constants left free (the rest 0), the best fit with none negative.
    pub fn of(points: &[(Terms, f64)]) -> Result<Fit> {
        let ok = points
            .iter()
            .all(|(x, t)| x.iter().all(|v| v.is_finite()) && t.is_finite() && *t >= 0.0);
        if points.is_empty() || !ok || points.iter().all(|(x, _)| x[3] + x[4] <= 0.0) {
            return Err(Error::Config(format!(
                "a calibration fit needs measured points with work in them, got {points:?}"
            )));
        }
        let miss = |c: &Terms| -> f64 {
            points
                .iter()
                .map(|(x, t)| {
                    let p: f64 = c.iter().zip(x).map(|(c, x)| c * x).sum();
                    ((p - t) / t.max(1e-300)).powi(2)
                })
                .sum()
        };
        // where some pass splits its layers over tensor ranks, their rate is always fitted
        let split = points.iter().any(|(x, _)| x[4] > 0.0);
        let mut best: Option<(f64, Terms)> = None;
        for mask in (1u32..32).filter(|m| !split || m & 16 != 0) {
            let Some(c) = solve(points, mask) else {
                continue;
            };
            if c.iter().any(|v| *v < 0.0 || !v.is_finite()) {
                continue;
            }
            let m = miss(&c);
            if best.is_none_or(|(b, _)| m < b * (1.0 - 1e-12)) {
                best = Some((m, c));
            }
        }
        let (_, c) = best.ok_or_else(|| {
            Error::Config(format!("no calibration fit with costs ≥ 0 for {points:?}"))
        })?;
        let mut fit = Fit {
            per_segment: c[0],
            per_block: c[1],
            per_end: c[2],
            per_unit: c[3],
            per_split: split.then_some(c[4]),
            points: points.len(),
            max_miss: 0.0,
        };
        fit.max_miss = points
            .iter()
            .map(|(x, t)| (fit.seconds(*x) - t).abs() / t.max(1e-12))
            .fold(0.0, f64::max);
        Ok(fit)
    }
}

/// The weighted least-squares constants over the terms in `mask` (the others 0), by the
/// normal equations and Gaussian elimination; `None` when they do not pin the constants.
fn solve(points: &[(Terms, f64)], mask: u32) -> Option<Terms> {
    let free: Vec<usize> = (0..5).filter(|i| mask & (1 << i) != 0).collect();
    let n = free.len();
    // [A | b], A = Σ w·x·xᵀ, b = Σ w·x·t over the free terms
    let mut a = vec![vec![0.0f64; n + 1]; n];
    for (x, t) in points {
        let w = 1.0 / (t * t).max(1e-300);
        for (r, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate() {
                a[r][c] += w * x[i] * x[j];
            }
            a[r][n] += w * x[i] * t;
        }
    }
    let scale: Vec<f64> = (0..n).map(|r| a[r][r].sqrt()).collect();
    if scale.iter().any(|s| *s <= 0.0 || !s.is_finite()) {
        return None;
    }
    // scaled so the diagonal is 1: FLOPs and counts differ by 10⁹
    for r in 0..n {
        for c in 0..n {
            a[r][c] /= scale[r] * scale[c];
        }
        a[r][n] /= scale[r];
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-9 {
            return None;
        }
        a.swap(col, pivot);
        let row = a[col].clone();
        for (r, other) in a.iter_mut().enumerate() {
            if r != col {
                let f = other[col] / row[col];
                for (x, y) in other.iter_mut().zip(&row).skip(col) {
                    *x -= f * y;
                }
            }
        }
    }
    let mut out = [0.0; 5];
    for (r, &i) in free.iter().enumerate() {
        out[i] = a[r][n] / a[r][r] / scale[r];
    }
    Some(out)
}

/// Per-op costs of one adapter, and where they came from.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// The adapter, its backend and driver, as wgpu names them.
    pub adapter: String,
    pub driver: String,
    /// The model and layouts it was measured on, in words.
    pub model: String,
    /// f32 or bf16.
    pub precision: String,
    /// When (UTC date) it was measured.
    pub date: String,
    /// Passes, by class ([`CLASSES`]).
    pub passes: [Fit; 4],
    pub optimizer: Fit,
    /// Host-staged communication by bytes, when it was measured too.
    #[serde(default)]
    pub links: Option<Links>,
}

/// The runtime's communication measured by bytes on one machine: what a transfer between
/// two of its devices costs when every collective stages through the host
/// (download → communicator → upload). Each [`Fit`] uses `per_segment` (seconds per call or
/// ring step) and `per_unit` (seconds per byte).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Links {
    /// The communicator measured and its group sizes, in words.
    pub transport: String,
    /// A device's download plus upload of a buffer while the other ranks of its group stage
    /// theirs: the host's staging bandwidth is shared by the devices staging at once.
    pub staging: Fit,
    /// The ring all-reduce on host buffers: α per ring step, seconds per byte on the wire.
    pub ring: Fit,
    /// One point-to-point message.
    pub message: Fit,
}

impl Links {
    /// The terms of a message of `bytes`.
    pub fn bytes_terms(bytes: f64) -> Terms {
        [1.0, 0.0, 0.0, bytes, 0.0]
    }

    /// The terms of staging `bytes` on each of `d` devices at once.
    pub fn staging_terms(bytes: f64, d: usize) -> Terms {
        [1.0, 0.0, 0.0, bytes * d.max(1) as f64, 0.0]
    }

    /// The terms of a ring all-reduce of `bytes` over `d` ranks: 2(d−1) steps and
    /// 2(d−1)/d · bytes on the wire.
    pub fn ring_terms(bytes: f64, d: usize) -> Terms {
        let steps = 2.0 * d.saturating_sub(1) as f64;
        [steps, 0.0, 0.0, steps / d.max(1) as f64 * bytes, 0.0]
    }

    /// Seconds to stage `bytes` out of a device and into one (itself or another) while `d`
    /// devices in all stage theirs.
    pub fn staging(&self, bytes: f64, d: usize) -> f64 {
        self.staging.seconds(Links::staging_terms(bytes, d))
    }

    /// The ring as a link: α per step, β from the seconds per byte (the cost model's ring
    /// formulas then price every collective).
    pub fn ring_link(&self) -> crate::link::Link {
        crate::link::Link::measured(1.0 / self.ring.per_unit, self.ring.per_segment)
    }

    /// A point-to-point message as a link.
    pub fn message_link(&self) -> crate::link::Link {
        crate::link::Link::measured(1.0 / self.message.per_unit, self.message.per_segment)
    }

    /// A staged ring all-reduce of `bytes` over `d` ranks, as the runtime runs one: download,
    /// the communicator's all-reduce, upload.
    pub fn staged_all_reduce(&self, bytes: f64, d: usize) -> f64 {
        self.staging(bytes, d) + self.ring.seconds(Links::ring_terms(bytes, d))
    }

    fn is_valid(&self) -> bool {
        [&self.staging, &self.ring, &self.message]
            .iter()
            .all(|f| f.is_valid() && f.per_block == 0.0 && f.per_end == 0.0)
    }
}

impl Calibration {
    /// A calibration from a rate alone: every pass at `flops` FLOP/s and no fixed cost, the
    /// optimizer free (what the planner assumes).
    pub fn from_rate(flops: f64) -> Calibration {
        let pass = Fit {
            per_unit: 1.0 / flops,
            ..Fit::default()
        };
        Calibration {
            adapter: format!("{:.1} TFLOP/s achieved (given)", flops / 1e12),
            driver: String::new(),
            model: String::new(),
            precision: String::new(),
            date: String::new(),
            passes: [pass; 4],
            optimizer: Fit::default(),
            links: None,
        }
    }

    /// The class index of pass `kind` of a split or whole backward.
    pub fn class(kind: crate::pipeline::schedule::Kind, split: bool) -> usize {
        use crate::pipeline::schedule::Kind;
        match (kind, split) {
            (Kind::F, _) => 0,
            (Kind::B, true) => 1,
            (Kind::W, _) => 2,
            (Kind::B, false) => 3,
        }
    }

    /// Reads a calibration file; the error names the file and what is wrong with it.
    pub fn load(path: &std::path::Path) -> Result<Calibration> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!(
                "cannot read the calibration {}: {e}",
                path.display()
            ))
        })?;
        let c: Calibration = serde_json::from_str(&text).map_err(|e| {
            Error::Config(format!(
                "{} is no calibration file ({e}); make one with `--calibrate FILE`",
                path.display()
            ))
        })?;
        if c.passes.iter().chain([&c.optimizer]).any(|f| !f.is_valid())
            || c.passes.iter().all(|f| f.per_unit == 0.0)
            || c.links.as_ref().is_some_and(|l| !l.is_valid())
        {
            return Err(Error::Config(format!(
                "{}: every fitted cost must be finite and ≥ 0, and some pass must cost per FLOP",
                path.display()
            )));
        }
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}
