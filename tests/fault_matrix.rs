//! The fault and signal matrix of the train example (run as a child process): every layout
//! family — one device, dp 2, tp 2, pp 2, ZeRO-1, ZeRO-2 and ZeRO-3 (dp 2), bf16 — is ended
//! once by an injected fault (`--fault kind:device:action:step`; error, panic, lost device and
//! NaN spread over the families) and once by a signal (SIGINT or SIGTERM). Each ending must
//! give its exit status (1, 130, 143), name the failing device, stage, action and step on
//! stderr and in the run record, say in `stopped` where it stopped and which checkpoint it
//! left, and that checkpoint must resume (`--resume`) to the model checksum of the run that
//! was never stopped (one uninterrupted run per family, shared by its two cases). The MPI
//! family (dp 2 × pp 2 on 4 ranks) is in `mpi_train.rs`.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::example::{example, scratch_dir, Running, TINY_TRAIN};
use triaxis::checkpoint::Checkpoint;

const LIMIT: Duration = Duration::from_secs(180);

/// One layout family and how each of its two runs is ended.
struct Family {
    name: &'static str,
    layout: &'static [&'static str],
    steps: usize,
    /// `--fault` (kind:device:action:step) and `--checkpoint-every` of the faulted run.
    fault: &'static str,
    every: usize,
    /// The record's `stopped.reason` ("fault" or "non-finite").
    reason: &'static str,
    /// How stderr and the record name the failure, and part of its cause.
    named: &'static str,
    cause: &'static str,
    /// The signal (kill's name), its exit status, and the step after which it is sent.
    signal: &'static str,
    code: i32,
    at: usize,
}

impl Family {
    fn fault_step(&self) -> usize {
        let step = self
            .fault
            .rsplit(':')
            .next()
            .expect("kind:device:action:step");
        step.parse().expect("a step")
    }
}

const ONE: Family = Family {
    name: "one-device",
    layout: &[],
    steps: 8,
    fault: "panic:0:1:4",
    every: 3,
    reason: "fault",
    named: "device 0 (stage 0) failed at action 0B0 of step 4",
    cause: "worker panicked: injected panic",
    signal: "INT",
    code: 130,
    at: 3,
};

const DP: Family = Family {
    name: "dp2",
    layout: &["--dp", "2"],
    steps: 8,
    fault: "error:1:1:5",
    every: 2,
    reason: "fault",
    named: "device 1 (stage 0) failed at action 0B0 of step 5",
    cause: "injected fault",
    signal: "TERM",
    code: 143,
    at: 2,
};

const TP: Family = Family {
    name: "tp2",
    layout: &["--tp", "2"],
    steps: 8,
    fault: "lost:1:0:3",
    every: 2,
    reason: "fault",
    named: "device 1 (stage 0) failed at action 0F0 of step 3",
    cause: "device lost",
    signal: "INT",
    code: 130,
    at: 4,
};

const PP: Family = Family {
    name: "pp2",
    layout: &["--pp", "2", "--microbatches", "2"],
    steps: 8,
    // 1F1B, m = 2: the last stage runs F0 B0 F1 B1
    fault: "panic:1:3:5",
    every: 2,
    reason: "fault",
    named: "device 1 (stage 1) failed at action 1B1 of step 5",
    cause: "worker panicked: injected panic",
    signal: "TERM",
    code: 143,
    at: 3,
};

const ZERO1: Family = Family {
    name: "zero1",
    layout: &["--dp", "2", "--zero", "1"],
    steps: 8,
    fault: "nan:0:1:4",
    every: 3,
    reason: "non-finite",
    named: "device 0 (stage 0) failed at action gradient check of step 4",
    cause: "not finite",
    signal: "INT",
    code: 130,
    at: 2,
};

const ZERO2: Family = Family {
    name: "zero2",
    layout: &["--dp", "2", "--zero", "2"],
    steps: 8,
    fault: "error:1:0:3",
    every: 2,
    reason: "fault",
    named: "device 1 (stage 0) failed at action 0F0 of step 3",
    cause: "injected fault",
    signal: "TERM",
    code: 143,
    at: 4,
};

const ZERO3: Family = Family {
    name: "zero3",
    layout: &["--dp", "2", "--zero", "3"],
    steps: 8,
    fault: "lost:1:1:5",
    every: 2,
    reason: "fault",
    named: "device 1 (stage 0) failed at action 0B0 of step 5",
    cause: "device lost",
    signal: "INT",
    code: 130,
    at: 3,
};

/// bf16 on one device (its steps are the slow ones on a CPU adapter: few of them).
const BF16: Family = Family {
    name: "bf16",
    layout: &["--precision", "bf16"],
    steps: 5,
    fault: "nan:0:0:3",
    every: 2,
    reason: "non-finite",
    named: "device 0 (stage 0) failed at action loss of step 3",
    cause: "the loss is NaN",
    signal: "TERM",
    code: 143,
    at: 2,
};

/// The train example with the tiny model, `f`'s layout and steps, then `extra` (a flag of the
/// tiny model's in `extra` replaces its value), in `dir`.
fn train(dir: &Path, f: &Family, extra: &[&str]) -> Option<std::process::Command> {
    let steps = f.steps.to_string();
    let mut args: Vec<&str> = TINY_TRAIN
        .chunks(2)
        .filter(|kv| !extra.contains(&kv[0]))
        .flatten()
        .copied()
        .collect();
    args.extend(["--log-every", "1", "--steps", &steps]);
    args.extend(f.layout);
    args.extend(extra);
    example("train", dir, &args)
}

fn record(dir: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("no record {name} in {}: {e}", dir.display()));
    serde_json::from_str(&text).expect("the record is JSON")
}

/// Runs to the end: (exit code, stderr).
fn run(cmd: std::process::Command) -> (Option<i32>, String) {
    let (status, _, err) = Running::start(cmd).finish(LIMIT);
    (status.code(), err)
}

/// The model checksum of `f`'s uninterrupted run: run once per family, whichever of its
/// cases asks first (`None`: the example is not built, skipped).
fn reference(f: &Family) -> Option<String> {
    type Cell = Arc<OnceLock<Option<String>>>;
    static CELLS: Mutex<Vec<(&str, Cell)>> = Mutex::new(Vec::new());
    let cell = {
        let mut cells = CELLS.lock().unwrap_or_else(|e| e.into_inner());
        match cells.iter().find(|(n, _)| *n == f.name) {
            Some((_, c)) => c.clone(),
            None => {
                let c = Cell::default();
                cells.push((f.name, c.clone()));
                c
            }
        }
    };
    cell.get_or_init(|| {
        let dir = scratch_dir(&format!("matrix-{}-straight", f.name));
        let cmd = train(&dir, f, &["--no-checkpoint", "--record", "straight.json"])?;
        let (code, err) = run(cmd);
        assert_eq!(code, Some(0), "{}: the uninterrupted run: {err}", f.name);
        let rec = record(&dir, "straight.json");
        assert_eq!(rec["stopped"]["reason"], "finished", "{}", f.name);
        let sum = rec["model_checksum"]
            .as_str()
            .expect("a checksum")
            .to_string();
        let _ = std::fs::remove_dir_all(&dir);
        Some(sum)
    })
    .clone()
}

/// Resumes `dir`'s checkpoint (at step `from`) to the family's last step and compares the
/// model checksum with the uninterrupted run's.
fn resumes_to_the_same_bits(dir: &Path, f: &Family, from: usize, want: &str, what: &str) {
    let cmd = train(
        dir,
        f,
        &[
            "--resume",
            "ck.safetensors",
            "--no-checkpoint",
            "--record",
            "resumed.json",
        ],
    )
    .expect("built above");
    let (code, err) = run(cmd);
    assert_eq!(code, Some(0), "{what}: the resumed run: {err}");
    let rec = record(dir, "resumed.json");
    assert_eq!(rec["stopped"]["reason"], "finished", "{what}");
    assert_eq!(
        rec["parallel"]["resumed_from_step"].as_u64(),
        Some(from as u64),
        "{what}: resumed from the checkpoint left behind"
    );
    assert_eq!(
        rec["model_checksum"].as_str(),
        Some(want),
        "{what}: resumed from step {from} vs the uninterrupted run"
    );
    println!("{what}: resumed from step {from} to {}: {want}", f.steps);
}

/// The family's fault: exit status 1, the failure named on stderr and in the record, the last
/// periodic checkpoint intact and resuming to the uninterrupted bits.
fn fault_case(f: &Family) {
    let Some(want) = reference(f) else {
        return;
    };
    let what = format!("{} --fault {}", f.name, f.fault);
    let dir = scratch_dir(&format!("matrix-{}-fault", f.name));
    let every = f.every.to_string();
    let cmd = train(
        &dir,
        f,
        &[
            "--fault",
            f.fault,
            "--checkpoint-every",
            &every,
            "--checkpoint",
            "ck.safetensors",
            "--record",
            "run.json",
        ],
    )
    .expect("built above");
    let (code, err) = run(cmd);
    println!("{what}: exit {code:?}; stderr:\n{err}");
    let step = f.fault_step();
    let kept = step / f.every * f.every;
    assert!(
        kept > 0,
        "{what}: the table must leave a checkpoint before the fault"
    );
    assert_eq!(code, Some(1), "{what}: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{what}: no error line: {err}"));
    assert!(
        line.starts_with(&format!("error: {}: ", f.named)) && line.contains(f.cause),
        "{what}: {line:?} does not name {:?} ({:?})",
        f.named,
        f.cause
    );
    assert!(
        err.contains(&format!("stopped at step {step}")),
        "{what}: {err}"
    );
    assert!(
        err.contains(&format!(
            "the last good checkpoint (ck.safetensors, step {kept}) is intact"
        )),
        "{what}: {err}"
    );
    let rec = record(&dir, "run.json");
    let st = &rec["stopped"];
    println!("{what}: stopped = {st}");
    assert_eq!(st["reason"], f.reason, "{what}");
    assert_eq!(st["step"].as_u64(), Some(step as u64), "{what}");
    assert_eq!(st["last_checkpoint"].as_u64(), Some(kept as u64), "{what}");
    assert_eq!(st["checkpoint"], "ck.safetensors", "{what}");
    assert_eq!(st["signal"], serde_json::Value::Null, "{what}");
    assert_eq!(st["abandoned_step"], false, "{what}");
    assert!(
        st["error"]
            .as_str()
            .is_some_and(|e| e.starts_with(f.named) && e.contains(f.cause)),
        "{what}: {st}"
    );
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(step), "{what}");
    let ck = Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
    assert_eq!(ck.step, kept, "{what}: the last good checkpoint");
    resumes_to_the_same_bits(&dir, f, kept, &want, &what);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The family's signal, sent once step `at` is logged: the step finishes, a checkpoint is
/// written, the exit status is the signal's, the record says where, and the checkpoint resumes
/// to the uninterrupted bits. The run evaluates after step `at` (the evaluation, hundreds of
/// milliseconds, is under way when the signal lands), so the signal always finds it running.
fn signal_case(f: &Family) {
    let Some(want) = reference(f) else {
        return;
    };
    let what = format!("{} SIG{}", f.name, f.signal);
    let dir = scratch_dir(&format!("matrix-{}-sig{}", f.name, f.signal));
    let at = f.at.to_string();
    let cmd = train(
        &dir,
        f,
        &[
            "--eval-every",
            &at,
            "--checkpoint",
            "ck.safetensors",
            "--record",
            "run.json",
            // the step in progress finishes however loaded the machine (the default 5 s grace
            // and an abandoned step are run_end.rs's case)
            "--stop-grace",
            "120",
        ],
    )
    .expect("built above");
    let mut running = Running::start(cmd);
    assert!(
        running.wait_for_step(f.at, LIMIT),
        "{what}: no progress line for step {}",
        f.at
    );
    running.signal(f.signal);
    let (status, _, err) = running.finish(LIMIT);
    println!("{what}: exit {status}; stderr:\n{err}");
    assert_eq!(status.code(), Some(f.code), "{what}: {err}");
    let rec = record(&dir, "run.json");
    let st = &rec["stopped"];
    println!("{what}: stopped = {st}");
    assert_eq!(st["reason"], "interrupted", "{what}");
    assert_eq!(st["signal"], format!("SIG{}", f.signal), "{what}");
    assert_eq!(st["abandoned_step"], false, "{what}");
    assert_eq!(st["error"], serde_json::Value::Null, "{what}");
    let step = st["step"].as_u64().expect("a step") as usize;
    assert!(
        (f.at..f.steps).contains(&step),
        "{what}: stopped at step {step}"
    );
    assert_eq!(st["last_checkpoint"].as_u64(), Some(step as u64), "{what}");
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(step), "{what}");
    assert!(
        err.contains(&format!("interrupted by SIG{} at step {step}", f.signal)),
        "{what}: {err}"
    );
    assert!(
        err.contains("--resume ck.safetensors"),
        "{what}: no resume command: {err}"
    );
    let ck = Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
    assert_eq!(ck.step, step, "{what}: the checkpoint written at the stop");
    resumes_to_the_same_bits(&dir, f, step, &want, &what);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_device_panic_is_named_and_its_checkpoint_resumes() {
    fault_case(&ONE);
}

#[test]
fn one_device_sigint_stops_saves_and_resumes() {
    signal_case(&ONE);
}

#[test]
fn dp_error_is_named_and_its_checkpoint_resumes() {
    fault_case(&DP);
}

#[test]
fn dp_sigterm_stops_saves_and_resumes() {
    signal_case(&DP);
}

#[test]
fn tp_lost_device_is_named_and_its_checkpoint_resumes() {
    fault_case(&TP);
}

#[test]
fn tp_sigint_stops_saves_and_resumes() {
    signal_case(&TP);
}

#[test]
fn pp_panic_is_named_and_its_checkpoint_resumes() {
    fault_case(&PP);
}

#[test]
fn pp_sigterm_stops_saves_and_resumes() {
    signal_case(&PP);
}

#[test]
fn zero1_nan_gradient_is_named_and_its_checkpoint_resumes() {
    fault_case(&ZERO1);
}

#[test]
fn zero1_sigint_stops_saves_and_resumes() {
    signal_case(&ZERO1);
}

#[test]
fn zero2_error_is_named_and_its_checkpoint_resumes() {
    fault_case(&ZERO2);
}

#[test]
fn zero2_sigterm_stops_saves_and_resumes() {
    signal_case(&ZERO2);
}

#[test]
fn zero3_lost_device_is_named_and_its_checkpoint_resumes() {
    fault_case(&ZERO3);
}

#[test]
fn zero3_sigint_stops_saves_and_resumes() {
    signal_case(&ZERO3);
}

#[test]
fn bf16_nan_loss_is_named_and_its_checkpoint_resumes() {
    fault_case(&BF16);
}

#[test]
fn bf16_sigterm_stops_saves_and_resumes() {
    signal_case(&BF16);
}
