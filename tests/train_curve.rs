//! The loss and evaluation curve the train example writes beside its run record: run.json
//! gets run.svg, a valid SVG document with the training loss per step, the validation loss and
//! exact match per evaluation (one marker per point); a record named `.svg` keeps its name and
//! the curve goes to `<stem>.curve.svg`; a curve that would overwrite `--data` is refused
//! before the run starts, the input left as it was.

mod common;

use std::path::Path;

use common::example::{run_example, scratch_dir, TINY_TRAIN};

/// The tiny model for `steps` steps with an evaluation every `eval_every`, no checkpoint.
fn args<'a>(steps: &'a str, eval_every: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a: Vec<&str> = TINY_TRAIN
        .chunks(2)
        .filter(|kv| kv[0] != "--eval-every")
        .flatten()
        .copied()
        .collect();
    a.extend([
        "--steps",
        steps,
        "--eval-every",
        eval_every,
        "--no-checkpoint",
    ]);
    a.extend(extra);
    a
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The SVG's `<circle` markers: one per point of every series, at least.
fn markers(svg: &str) -> usize {
    svg.matches("<circle").count()
}

#[test]
fn the_curve_beside_the_record_has_every_step_and_evaluation() {
    let dir = scratch_dir("curve");
    let Some(out) = run_example("train", &dir, &args("4", "2", &["--record", "run.json"])) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let rec: serde_json::Value = serde_json::from_str(&read(&dir, "run.json")).unwrap();
    let steps = rec["steps"].as_array().unwrap().len();
    let evals = rec["evals"].as_array().unwrap();
    assert_eq!(
        (steps, evals.len()),
        (4, 2),
        "steps 0..4, evaluations at 2 and 4"
    );
    assert!(evals.iter().all(|e| e["accuracy"].is_number()), "{evals:?}");

    let svg = read(&dir, "run.svg");
    let start = svg.find("<svg").expect("an <svg> element");
    assert!(svg[..start].trim().is_empty() || svg[..start].trim().starts_with("<?xml"));
    assert!(
        svg.trim_end().ends_with("</svg>"),
        "the document is complete"
    );
    assert!(svg[start..].contains("xmlns=\"http://www.w3.org/2000/svg\""));
    for name in ["training loss", "validation loss", "exact match"] {
        assert!(svg.contains(name), "series {name:?} in the legend");
    }
    assert!(
        markers(&svg) >= steps + 2 * evals.len(),
        "a marker per point: {} markers",
        markers(&svg)
    );
    assert!(!stderr.contains("no loss curve"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_record_named_svg_keeps_its_name_and_the_curve_goes_beside_it() {
    let dir = scratch_dir("curve-svg-record");
    let Some(out) = run_example("train", &dir, &args("2", "1000", &["--record", "run.svg"])) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let rec: serde_json::Value = serde_json::from_str(&read(&dir, "run.svg")).expect("JSON");
    assert_eq!(rec["steps"].as_array().unwrap().len(), 2);
    let svg = read(&dir, "run.curve.svg");
    assert!(svg.contains("<svg") && svg.contains("training loss"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_curve_that_would_overwrite_the_data_is_refused() {
    let dir = scratch_dir("curve-data");
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(400);
    std::fs::write(dir.join("run.svg"), &text).unwrap();
    let flags = ["--record", "run.json", "--data", "run.svg"];
    let Some(out) = run_example("train", &dir, &args("2", "1000", &flags)) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the loss curve")
            && stderr.contains("--data")
            && stderr.contains("--record"),
        "{stderr}"
    );
    assert_eq!(read(&dir, "run.svg"), text, "the input is left as it was");
    assert!(
        !dir.join("run.json").exists(),
        "a refused run writes no record"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
