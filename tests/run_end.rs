//! Every way a training run ends, as a user meets it through the train example (run as a child
//! process): SIGINT / SIGTERM stop gracefully with a checkpoint that resumes to the same bits
//! as an uninterrupted run; every ending writes a run record whose `stopped` says how it ended;
//! a finished run leaves its final checkpoint unless told not to.

mod common;

use std::path::Path;
use std::time::Duration;

use common::example::{example, scratch_dir, Running};

/// A tiny model, so each step takes milliseconds; a progress line after every step.
const TINY: &[&str] = &[
    "--channels",
    "16",
    "--heads",
    "2",
    "--layers",
    "1",
    "--batch",
    "2",
    "--seq",
    "8",
    "--eval-every",
    "1000",
    "--eval-batches",
    "1",
    "--log-every",
    "1",
];

const LIMIT: Duration = Duration::from_secs(120);

/// The train example in `dir` with the tiny model (a flag in `extra` replaces its value),
/// `extra` flags and its files in `dir`.
fn train(dir: &Path, extra: &[&str]) -> Option<std::process::Command> {
    let mut args: Vec<&str> = TINY
        .chunks(2)
        .filter(|kv| !extra.contains(&kv[0]))
        .flatten()
        .copied()
        .collect();
    args.extend(["--checkpoint", "ck.safetensors", "--record", "run.json"]);
    args.extend(extra);
    example("train", dir, &args)
}

fn record(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("run.json")).expect("a run record");
    serde_json::from_str(&text).expect("the record is JSON")
}

/// Runs to the end; returns (exit code, stderr, record).
fn run_to_end(dir: &Path, extra: &[&str]) -> Option<(Option<i32>, String, serde_json::Value)> {
    let (status, _, err) = Running::start(train(dir, extra)?).finish(LIMIT);
    Some((status.code(), err, record(dir)))
}

/// Starts a run of `steps`, sends `signal` once step `at` is logged, checks the graceful stop,
/// resumes to the end, and compares the model checksum with an uninterrupted run.
fn interrupted_run_resumes_to_the_same_bits(tag: &str, layout: &[&str], signal: &str, code: i32) {
    let (steps, at) = (60, 10);
    let n = steps.to_string();
    let mut flags = vec!["--steps", n.as_str()];
    flags.extend(layout);
    let straight = scratch_dir(&format!("{tag}-straight"));
    let Some((c, err, rec)) = run_to_end(&straight, &flags) else {
        return;
    };
    assert_eq!(c, Some(0), "{err}");
    let want = rec["model_checksum"]
        .as_str()
        .expect("checksum")
        .to_string();

    let dir = scratch_dir(tag);
    let mut run = Running::start(train(&dir, &flags).expect("built above"));
    assert!(
        run.wait_for_step(at, LIMIT),
        "no progress line for step {at}"
    );
    run.signal(signal);
    let (status, _, err) = run.finish(LIMIT);
    println!("{signal}: exit {status}; stderr:\n{err}");
    assert_eq!(status.code(), Some(code), "{err}");
    let rec = record(&dir);
    let stopped = &rec["stopped"];
    println!("record: stopped = {stopped}");
    assert_eq!(stopped["reason"], "interrupted");
    assert_eq!(stopped["signal"], format!("SIG{signal}"));
    assert_eq!(stopped["abandoned_step"], false);
    let step = stopped["step"].as_u64().expect("step") as usize;
    assert!((at..steps).contains(&step), "stopped at step {step}");
    assert_eq!(stopped["last_checkpoint"].as_u64(), Some(step as u64));
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(step));
    assert!(
        err.contains("--resume ck.safetensors"),
        "no resume command: {err}"
    );

    let Some((c, err, rec)) = run_to_end(
        &dir,
        &[&flags[..], &["--resume", "ck.safetensors"]].concat(),
    ) else {
        return;
    };
    assert_eq!(c, Some(0), "{err}");
    assert_eq!(rec["stopped"]["reason"], "finished");
    assert_eq!(
        rec["model_checksum"].as_str(),
        Some(want.as_str()),
        "interrupted at {step} and resumed vs straight"
    );
    println!("resumed from step {step}: checksum {want} as the uninterrupted run");
}

#[test]
fn sigint_stops_after_the_step_saves_and_resumes_to_the_same_bits() {
    interrupted_run_resumes_to_the_same_bits("sigint", &[], "INT", 130);
}

#[test]
fn sigterm_under_dp_and_pp_stops_saves_and_resumes_to_the_same_bits() {
    let layout = ["--dp", "2", "--pp", "2", "--microbatches", "2"];
    interrupted_run_resumes_to_the_same_bits("sigterm", &layout, "TERM", 143);
}

#[test]
fn every_ending_writes_a_record_that_says_how_it_ended() {
    // finished: the final checkpoint is written without --checkpoint-every
    let dir = scratch_dir("end-finished");
    let Some((c, err, rec)) = run_to_end(&dir, &["--steps", "5"]) else {
        return;
    };
    assert_eq!(c, Some(0), "{err}");
    let st = &rec["stopped"];
    println!("finished: {st}");
    assert_eq!(st["reason"], "finished");
    assert_eq!(
        (st["step"].as_u64(), st["last_checkpoint"].as_u64()),
        (Some(5), Some(5))
    );
    let ck = triaxis::checkpoint::Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
    assert_eq!(ck.step, 5);
    assert!(rec["model_checksum"]
        .as_str()
        .is_some_and(|s| s.starts_with("sha256:")));

    // --no-checkpoint: none written
    let dir = scratch_dir("end-nockpt");
    let (c, err, rec) = run_to_end(&dir, &["--steps", "3", "--no-checkpoint"]).unwrap();
    assert_eq!(c, Some(0), "{err}");
    assert_eq!(rec["stopped"]["last_checkpoint"], serde_json::Value::Null);
    assert!(!dir.join("ck.safetensors").exists());

    // a failed step and a NaN: named, the last periodic checkpoint intact
    let pp = [
        "--pp",
        "2",
        "--microbatches",
        "2",
        "--checkpoint-every",
        "2",
    ];
    for (fault, reason, want) in [
        ("error:1:1:3", "fault", "injected fault"),
        ("panic:0:2:3", "fault", "panicked"),
        ("nan:1:1:3", "non-finite", "not finite"),
        ("nan:1:0:3", "non-finite", "the loss is NaN"),
    ] {
        let dir = scratch_dir("end-fault");
        let flags = [&pp[..], &["--steps", "6", "--fault", fault]].concat();
        let (c, err, rec) = run_to_end(&dir, &flags).unwrap();
        let st = &rec["stopped"];
        println!("--fault {fault}: exit {c:?}, stopped = {st}");
        assert_eq!(c, Some(1), "{err}");
        assert_eq!(st["reason"], reason, "{fault}");
        assert_eq!(st["step"].as_u64(), Some(3), "{fault}");
        assert!(
            st["error"].as_str().is_some_and(|e| e.contains(want)),
            "{fault}: {st}"
        );
        assert_eq!(st["last_checkpoint"].as_u64(), Some(2), "{fault}");
        let ck = triaxis::checkpoint::Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
        assert_eq!(ck.step, 2, "{fault}: the last good checkpoint");
    }

    // bad input found after the start: a damaged checkpoint to resume from
    let dir = scratch_dir("end-badresume");
    std::fs::write(dir.join("old.safetensors"), b"not a checkpoint at all").unwrap();
    let (c, err, rec) = run_to_end(&dir, &["--steps", "3", "--resume", "old.safetensors"]).unwrap();
    let st = &rec["stopped"];
    println!("damaged --resume: exit {c:?}, stopped = {st}");
    assert_eq!(c, Some(1), "{err}");
    assert_eq!(st["reason"], "error");
    assert_eq!(st["step"].as_u64(), Some(0));
    assert!(
        st["error"]
            .as_str()
            .is_some_and(|e| e.contains("old.safetensors")),
        "{st}"
    );
}

#[test]
fn small_batches_sample_and_unusual_sizes_train() {
    // batch 1 (sampling goes a row at a time), one layer, one head
    for flags in [
        &["--steps", "2", "--batch", "1"][..],
        &["--steps", "2", "--heads", "1"][..],
        &["--steps", "2", "--seq", "1", "--batch", "3"][..],
    ] {
        let dir = scratch_dir("unusual");
        let Some((c, err, rec)) = run_to_end(&dir, flags) else {
            return;
        };
        println!("{flags:?}: exit {c:?}");
        assert_eq!(c, Some(0), "{flags:?}: {err}");
        assert_eq!(rec["stopped"]["reason"], "finished");
        assert!(
            !rec["sample"].as_str().unwrap_or("").is_empty(),
            "{flags:?}: no sample"
        );
    }
}

/// Starts a run whose step 3 hangs (`--fault stall`), signals it during the hang (twice when
/// `second`), and returns (exit code, seconds from the first signal to the exit, record).
fn signal_a_stalled_step(
    tag: &str,
    extra: &[&str],
    second: bool,
) -> Option<(Option<i32>, f64, serde_json::Value)> {
    let dir = scratch_dir(tag);
    let flags = [
        &[
            "--steps",
            "20",
            "--checkpoint-every",
            "1",
            "--fault",
            "stall:0:0:3",
        ][..],
        extra,
    ]
    .concat();
    let mut run = Running::start(train(&dir, &flags)?);
    assert!(run.wait_for_step(3, LIMIT), "no progress line for step 3");
    std::thread::sleep(Duration::from_millis(150)); // step index 3 is hanging now
    let t = std::time::Instant::now();
    run.signal("INT");
    if second {
        std::thread::sleep(Duration::from_millis(150));
        run.signal("INT");
    }
    let (status, _, err) = run.finish(LIMIT);
    let took = t.elapsed().as_secs_f64();
    println!("{tag}: exit {status} after {took:.2} s; stderr:\n{err}");
    let ck = triaxis::checkpoint::Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
    assert_eq!(ck.step, 3, "{tag}: the last checkpoint is intact");
    Some((status.code(), took, record(&dir)))
}

#[test]
fn a_step_that_cannot_finish_is_abandoned_after_the_grace_period() {
    let Some((code, took, rec)) = signal_a_stalled_step("grace", &["--stop-grace", "1"], false)
    else {
        return;
    };
    let st = &rec["stopped"];
    println!("stopped = {st}");
    assert_eq!(code, Some(130));
    // at least the 1 s asked for, and well short of the 5 s default: a run that ignores
    // --stop-grace fails here
    assert!(
        (1.0..4.5).contains(&took),
        "{took} s from the signal to the exit with --stop-grace 1 (the default is 5 s)"
    );
    assert_eq!(st["reason"], "interrupted");
    assert_eq!(st["abandoned_step"], true);
    assert_eq!(
        (st["step"].as_u64(), st["last_checkpoint"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_second_signal_exits_at_once_and_keeps_the_last_checkpoint() {
    let Some((code, took, rec)) = signal_a_stalled_step("second", &[], true) else {
        return;
    };
    let st = &rec["stopped"];
    println!("stopped = {st}");
    assert_eq!(code, Some(130));
    assert!(
        took < 3.0,
        "{took} s: the default grace is 5 s, the second signal must not wait"
    );
    assert_eq!(st["reason"], "interrupted");
    assert_eq!(st["abandoned_step"], true);
    assert_eq!(st["last_checkpoint"].as_u64(), Some(3));
}
