//! What the simulator scales by FLOPs and parameters: seconds per FLOP and per block of each
//! pass class, and seconds per parameter of the optimizer, fitted to per-op times measured on
//! one adapter and saved as a small JSON file that names where they came from.
//!
//! ```text
//! pass seconds   = blocks · overhead[class] + FLOPs · seconds_per_flop[class]
//!                  class: F, B (input gradients of a split backward), W, BW (whole backward)
//! optimizer      = overhead + parameters · seconds_per_param
//! fit            least squares over the measured passes (one point per chunk and microbatch
//!                size), overhead clamped at ≥ 0 (then seconds per FLOP alone)
//! ```
//!
//! Communication is not in the file: the simulator costs it from the cluster's links, as the
//! device clock costs the virtual devices' transfers from the link model.

use crate::error::{Error, Result};

/// The pass classes the calibration fits apart.
pub const CLASSES: [&str; 4] = ["F", "B", "W", "BW"];

/// A linear cost: `overhead · units + per_unit_seconds · amount`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fit {
    /// Seconds per block (passes) or per call (the optimizer).
    pub overhead: f64,
    /// Seconds per FLOP (passes) or per parameter (the optimizer).
    pub per_unit: f64,
    /// Points the fit was made from, and the largest relative miss among them.
    pub points: usize,
    pub max_miss: f64,
}

impl Fit {
    pub fn seconds(&self, units: f64, amount: f64) -> f64 {
        self.overhead * units + self.per_unit * amount
    }

    /// Least squares of `seconds ≈ overhead · units + per_unit · amount` over
    /// `(units, amount, seconds)`; the overhead clamped at ≥ 0.
    pub fn of(points: &[(f64, f64, f64)]) -> Result<Fit> {
        let ok = points
            .iter()
            .all(|p| p.0.is_finite() && p.1.is_finite() && p.2.is_finite() && p.2 >= 0.0);
        if points.is_empty() || !ok || points.iter().all(|p| p.1 <= 0.0) {
            return Err(Error::Config(format!(
                "a calibration fit needs measured points with work in them, got {points:?}"
            )));
        }
        let (mut suu, mut sua, mut saa, mut sut, mut sat) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(u, a, t) in points {
            suu += u * u;
            sua += u * a;
            saa += a * a;
            sut += u * t;
            sat += a * t;
        }
        let det = suu * saa - sua * sua;
        let (mut o, mut r) = if det.abs() > 1e-12 * suu * saa {
            ((sut * saa - sat * sua) / det, (suu * sat - sua * sut) / det)
        } else {
            (-1.0, 0.0)
        };
        if o < 0.0 || r < 0.0 {
            // one free constant: the one the points carry
            o = 0.0;
            r = sat / saa;
            if r <= 0.0 && suu > 0.0 {
                (o, r) = (sut / suu, 0.0);
            }
        }
        let mut fit = Fit {
            overhead: o,
            per_unit: r,
            points: points.len(),
            max_miss: 0.0,
        };
        fit.max_miss = points
            .iter()
            .map(|&(u, a, t)| (fit.seconds(u, a) - t).abs() / t.max(1e-12))
            .fold(0.0, f64::max);
        Ok(fit)
    }
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
        let good = |f: &Fit| {
            f.overhead >= 0.0
                && f.per_unit >= 0.0
                && f.overhead.is_finite()
                && f.per_unit.is_finite()
        };
        if c.passes.iter().chain([&c.optimizer]).any(|f| !good(f))
            || c.passes.iter().all(|f| f.per_unit == 0.0)
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
