//! The train example's schedule flags: --warmup, --min-lr-frac and --weight-decay reach the
//! run (the learning rate of every step in the record, the config it records); the refusals of
//! out-of-range values are in tests/flag_refusals.rs.

mod common;

use common::example::{run_example, scratch_dir, TINY_TRAIN};

#[test]
fn warmup_floor_and_weight_decay_shape_the_run() {
    let dir = scratch_dir("schedule");
    // the tiny model with its own evaluation cadence
    let mut a: Vec<&str> = TINY_TRAIN.to_vec();
    a.extend([
        "--steps",
        "8",
        "--no-checkpoint",
        "--record",
        "run.json",
        "--lr",
        "0.01",
        "--warmup",
        "4",
        "--min-lr-frac",
        "0.5",
        "--weight-decay",
        "0",
    ]);
    let Some(out) = run_example("train", &dir, &a) else {
        return;
    };
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("run.json")).expect("the run record");
    let rec: serde_json::Value = serde_json::from_str(&text).expect("a JSON record");
    let _ = std::fs::remove_dir_all(&dir);
    let lr: Vec<f64> = rec["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["lr"].as_f64().expect("a learning rate"))
        .collect();
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1e-3);
    // linear warm-up over 4 steps to the peak, then cosine decay towards half of it
    assert!(near(lr[0], 0.01 / 4.0) && near(lr[3], 0.01), "{lr:?}");
    assert!(lr[4..].windows(2).all(|w| w[1] < w[0]), "{lr:?}");
    assert!(lr[7] > 0.005 && lr[7] < 0.01, "{lr:?}");
    let cfg = &rec["config"];
    assert_eq!(cfg["warmup"], 4);
    assert!(near(cfg["min_lr_frac"].as_f64().unwrap(), 0.5), "{cfg}");
    assert_eq!(cfg["adam"]["weight_decay"].as_f64(), Some(0.0), "{cfg}");
}
