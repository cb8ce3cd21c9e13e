//! The loss and evaluation curve beside the run record: `<record stem>.svg` (runs/train.svg
//! for runs/train.json), drawn from the record's own steps and evaluations.
//!
//! ```text
//! training loss     (step, loss)            one point per step that ran (after `step` updates)
//! validation loss   (step, val_loss)        one point per evaluation (after `step` updates)
//! exact match       (step, accuracy)        per evaluation, where the corpus has answers
//! ```
//!
//! Non-finite values (a run stopped on a NaN loss) are left out of the curve; a run that
//! stopped before its first step has no curve.

use std::path::{Path, PathBuf};

use triaxis::record::RunRecord;

use crate::plot::{write_svg, Chart, Series};

/// Where the curve of the record at `record` goes: its stem with `.svg`, or `<stem>.curve.svg`
/// when the record itself ends in `.svg` (so the curve never replaces the record).
pub fn path_beside(record: &Path) -> PathBuf {
    let svg = record.with_extension("svg");
    match svg == record {
        true => record.with_extension("curve.svg"),
        false => svg,
    }
}

/// The curve's series: training loss per step, validation loss and exact match per
/// evaluation (empty series are left out).
pub fn series(rec: &RunRecord) -> Vec<Series> {
    let finite = |pts: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        pts.into_iter().filter(|(_, y)| y.is_finite()).collect()
    };
    let train = finite(
        rec.steps
            .iter()
            .map(|s| (s.step as f64, s.loss as f64))
            .collect(),
    );
    let val = finite(
        rec.evals
            .iter()
            .map(|e| (e.step as f64, e.val_loss as f64))
            .collect(),
    );
    let exact = finite(
        rec.evals
            .iter()
            .filter_map(|e| e.accuracy.map(|a| (e.step as f64, a as f64)))
            .collect(),
    );
    [
        Series::measured("training loss", train),
        Series::measured("validation loss", val),
        Series::measured("exact match (fraction)", exact),
    ]
    .into_iter()
    .filter(|s| !s.points.is_empty())
    .collect()
}

/// Writes the curve of `rec` to `path`; `Ok(false)` when there is nothing to draw.
pub fn write(rec: &RunRecord, path: &Path) -> triaxis::Result<bool> {
    let series = series(rec);
    if series.is_empty() {
        return Ok(false);
    }
    let title = format!(
        "Training of {} ({} parameters)",
        rec.dataset.name, rec.parameters
    );
    let chart = Chart {
        title: &title,
        x_label: "step",
        y_label: "loss (nats per token); exact match (fraction)",
        log_x: false,
        y_percent: false,
        series: &series,
    };
    write_svg(path, &chart)?;
    Ok(true)
}
