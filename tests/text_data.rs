//! The train example on a text file, end to end as a user runs it (`--data FILE`): a small text
//! generated here, so the positive path is tested on every machine, whatever else is present.

mod common;

use common::example::{run_example, scratch_dir, TINY_TRAIN};

/// Sentences from a few words, deterministic: text with structure to learn and nothing copied.
fn generated_text() -> String {
    let words = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
    ];
    let mut out = String::new();
    let mut x = 7u32;
    for line in 0..400 {
        for w in 0..6 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            out.push_str(words[((x >> 16) as usize + w) % words.len()]);
            out.push(if w == 5 { '.' } else { ' ' });
        }
        out.push(if line % 5 == 4 { '\n' } else { ' ' });
    }
    out
}

#[test]
fn the_train_example_trains_on_a_text_file_and_samples_from_it() {
    let dir = scratch_dir("text-data");
    std::fs::write(dir.join("words.txt"), generated_text()).unwrap();
    let mut args = TINY_TRAIN.to_vec();
    args.extend([
        "--data",
        "words.txt",
        "--steps",
        "20",
        "--no-checkpoint",
        "--record",
        "run.json",
    ]);
    let Some(out) = run_example("train", &dir, &args) else {
        return;
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        rec["dataset"]["name"]
            .as_str()
            .map(|n| n.contains("words.txt")),
        Some(true),
        "{}",
        rec["dataset"]
    );
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(20));
    let last = &rec["evals"]
        .as_array()
        .and_then(|e| e.last().cloned())
        .expect("an evaluation");
    let (val, unigram) = (
        last["val_loss"].as_f64().unwrap(),
        rec["dataset"]["unigram_loss"].as_f64().unwrap(),
    );
    println!(
        "val loss {val:.3} after 20 steps (unigram {unigram:.3}); no exact match on text: {}",
        last["accuracy"]
    );
    assert!(val.is_finite() && last["accuracy"].is_null());
    // the sample continues the text: printable bytes only
    let sample = rec["sample"].as_str().expect("a sample");
    assert!(!sample.is_empty());
    assert!(
        sample.chars().all(|c| !c.is_control() || c == '\n'),
        "the sample holds control characters: {sample:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
