//! What a user compares: the train example's model checksum for the same data and seed under
//! layouts that must give the same bits — ZeRO stages 1–3 and plain data parallelism, with and
//! without pipeline stages — run as child processes.

mod common;

use common::example::{example, scratch_dir, Running, TINY_TRAIN};

/// The run's model checksum, or `None` when the example cannot be built here.
fn checksum(tag: &str, layout: &[&str]) -> Option<String> {
    let dir = scratch_dir(tag);
    let mut args = TINY_TRAIN.to_vec();
    args.extend(["--steps", "12", "--no-checkpoint", "--record", "run.json"]);
    args.extend(layout);
    let (status, _, err) =
        Running::start(example("train", &dir, &args)?).finish(std::time::Duration::from_secs(300));
    assert!(status.success(), "{layout:?}: {err}");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).expect("a record"))
            .expect("JSON");
    let _ = std::fs::remove_dir_all(&dir);
    Some(
        rec["model_checksum"]
            .as_str()
            .expect("a checksum")
            .to_string(),
    )
}

#[test]
fn zero_stages_give_plain_data_parallel_bits_through_the_train_example() {
    let plain = ["--dp", "2", "--microbatches", "2"];
    let Some(want) = checksum("plain", &plain) else {
        return;
    };
    println!("dp 2, m 2: {want}");
    for (tag, layout) in [
        (
            "zero1",
            vec!["--dp", "2", "--microbatches", "2", "--zero", "1"],
        ),
        (
            "zero2",
            vec!["--dp", "2", "--microbatches", "2", "--zero", "2"],
        ),
        (
            "zero3",
            vec!["--dp", "2", "--microbatches", "2", "--zero", "3"],
        ),
        (
            "dp-pp",
            vec!["--dp", "2", "--pp", "2", "--microbatches", "2"],
        ),
        (
            "dp-pp-zero1",
            vec![
                "--dp",
                "2",
                "--pp",
                "2",
                "--microbatches",
                "2",
                "--zero",
                "1",
            ],
        ),
    ] {
        let got = checksum(tag, &layout).expect("the example ran once already");
        println!("{}: {got}", layout.join(" "));
        assert_eq!(got, want, "{}: differs from plain dp 2", layout.join(" "));
    }
}

#[test]
fn zero_3_over_four_replicas_gives_plain_data_parallel_bits() {
    let Some(want) = checksum("dp4", &["--dp", "4", "--microbatches", "1"]) else {
        return;
    };
    for zero in ["1", "3"] {
        let got = checksum(
            "dp4-zero",
            &["--dp", "4", "--microbatches", "1", "--zero", zero],
        )
        .expect("the example ran once already");
        println!("dp 4 zero {zero}: {got} (plain {want})");
        assert_eq!(got, want, "dp 4 --zero {zero}: differs from plain dp 4");
    }
}
