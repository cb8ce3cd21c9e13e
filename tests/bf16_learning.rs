//! bf16 learns the addition task as f32 does: the train example's default run (one device,
//! 4 × 64 model, 2-digit sums) on the varying-width text (`--unpadded`, the harder task with a
//! late phase change) trained for 3000 steps in each precision, then from
//! step 2500 on (past the task's phase change, at every seed measured) bf16's exact match at
//! most 10 points below f32's and its validation loss at most 5 % above, and both ≥ 85 % exact
//! match at the end.
//!
//! About 15 minutes on two cores with lavapipe, so it is not part of the suite CI runs:
//! `cargo test --release --test bf16_learning -- --ignored`. During the phase change a single
//! pair of runs says little: when the change starts moves with any perturbation (two f32 runs
//! of the same data that differ only in summation order were 39 points apart at step 1500),
//! and bf16 is ahead at some seeds and behind at others (docs/precision.md); another
//! adapter's bits are another such perturbation.
mod common;

use common::example::{run_example, scratch_dir};

/// (step, validation loss, exact match) of every evaluation of a run record.
fn evals(dir: &std::path::Path, name: &str) -> Vec<(u64, f64, f64)> {
    let text = std::fs::read_to_string(dir.join(name)).expect("the run record");
    let rec: serde_json::Value = serde_json::from_str(&text).expect("a JSON record");
    common::example::evals(&rec)
}

#[test]
#[ignore = "about 15 minutes: cargo test --release --test bf16_learning -- --ignored"]
fn bf16_matches_f32_on_varying_width_sums_past_their_phase_change() {
    let dir = scratch_dir("bf16-learning");
    for p in ["f32", "bf16"] {
        let rec = format!("{p}.json");
        let args = [
            "--precision",
            p,
            "--unpadded",
            "--steps",
            "3000",
            "--no-checkpoint",
            "--record",
            &rec,
        ];
        let Some(o) = run_example("train", &dir, &args) else {
            return;
        };
        assert!(
            o.status.success(),
            "train --precision {p}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let (a, b) = (evals(&dir, "f32.json"), evals(&dir, "bf16.json"));
    assert_eq!(a.len(), b.len(), "the same evaluation steps");
    for ((step, va, ea), (s2, vb, eb)) in a.iter().zip(&b) {
        assert_eq!(step, s2);
        println!(
            "step {step:>5}: f32 {va:.4} / {:.1} %, bf16 {vb:.4} / {:.1} %",
            100.0 * ea,
            100.0 * eb
        );
        if *step >= 2500 {
            // bf16 reaches f32: at most 10 points behind, its loss at most 5 % above (ahead
            // is allowed: at some seeds bf16 changes phase first)
            assert!(
                eb >= &(ea - 0.10),
                "step {step}: exact match f32 {ea} vs bf16 {eb}"
            );
            assert!(
                vb <= &(va * 1.05),
                "step {step}: validation loss f32 {va} vs bf16 {vb}"
            );
        }
    }
    let (last_a, last_b) = (a.last().expect("evals"), b.last().expect("evals"));
    assert!(
        last_a.2 >= 0.85 && last_b.2 >= 0.85,
        "both learn the task: f32 {} bf16 {}",
        last_a.2,
        last_b.2
    );
}
