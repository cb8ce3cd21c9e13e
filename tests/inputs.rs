//! What a user gives the train example is never lost, and bad input is named: an output that
//! would overwrite an input, a path that can never be a file, a second run on the same
//! outputs, data that is not text, a fault that can never fire and a negative number are
//! refused before any device work (exit status 2, `error: …` naming the flag); a stop before
//! the first step leaves an existing checkpoint alone; a non-UTF-8 output path works.
//! (Child processes of the train example with the tiny model; see docs/inputs.md.)

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::example::{absent_backend, example, scratch_dir, Running, TINY_TRAIN};

const LIMIT: Duration = Duration::from_secs(120);

/// The train example in `dir` with the tiny model, `extra`, and `--checkpoint ck.safetensors`
/// and `--record run.json` unless `extra` names them.
fn train(dir: &Path, extra: &[&str]) -> Option<Command> {
    let mut args: Vec<&str> = TINY_TRAIN.to_vec();
    for (flag, path) in [("--checkpoint", "ck.safetensors"), ("--record", "run.json")] {
        if !extra.contains(&flag) {
            args.extend([flag, path]);
        }
    }
    args.extend(extra);
    example("train", dir, &args)
}

/// Runs `cmd` to its end.
fn output(mut cmd: Command) -> Output {
    cmd.output().expect("the example starts")
}

/// Checks a refusal: exit status 2, `error: ` and every part of `want` on stderr, no panic,
/// nothing on stdout (the header comes after every check). Returns stderr.
fn refused(out: &Output, want: &[&str]) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.is_empty(), "printed {stdout:?} before refusing");
    for w in want {
        assert!(stderr.contains(w), "lacks {w:?}: {stderr}");
    }
    stderr
}

/// Runs the train example with `args` where no adapter exists (a refusal must come before
/// any device work) and checks the refusal.
fn refuses(dir: &Path, args: &[&str], want: &[&str]) -> Option<String> {
    let mut cmd = train(dir, args)?;
    cmd.env("WGPU_BACKEND", absent_backend());
    Some(refused(&output(cmd), want))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("a test file");
    p
}

/// A text file of a few hundred bytes, enough for `--seq 8`.
fn text(dir: &Path) -> PathBuf {
    write(
        dir,
        "data.txt",
        "to be or not to be, that is the question\n"
            .repeat(20)
            .as_bytes(),
    )
}

#[test]
fn a_checkpoint_naming_the_data_file_is_refused() {
    let dir = scratch_dir("ck-data");
    let data = text(&dir);
    let before = std::fs::read(&data).unwrap();
    let args = ["--data", "data.txt", "--checkpoint", "./data.txt"];
    if refuses(
        &dir,
        &args,
        &["--checkpoint ./data.txt names the same file as --data data.txt"],
    )
    .is_none()
    {
        return;
    }
    assert_eq!(std::fs::read(&data).unwrap(), before);
}

#[test]
fn a_record_naming_the_data_file_is_refused() {
    let dir = scratch_dir("record-data");
    text(&dir);
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let args = ["--data", "data.txt", "--record", "sub/../data.txt"];
    refuses(
        &dir,
        &args,
        &["--record sub/../data.txt names the same file as --data"],
    );
}

#[test]
fn a_record_naming_the_resumed_checkpoint_is_refused() {
    let dir = scratch_dir("record-resume");
    write(&dir, "old.safetensors", b"a checkpoint");
    let args = ["--resume", "old.safetensors", "--record", "old.safetensors"];
    refuses(
        &dir,
        &args,
        &["--record old.safetensors names the same file as --resume"],
    );
}

#[test]
fn an_output_path_ending_in_a_separator_is_refused() {
    let dir = scratch_dir("trailing-slash");
    for (flag, path) in [("--checkpoint", "ck/"), ("--record", "records/")] {
        let want = format!("{flag} {path} ends in a path separator");
        if refuses(&dir, &[flag, path], &[&want]).is_none() {
            return;
        }
        assert!(!dir.join(path).exists(), "{path} was created");
    }
}

#[test]
fn negative_numbers_name_the_flag_and_its_constraint() {
    let dir = scratch_dir("negative");
    let float = |f: &str, i: &str| format!("{f} must be a finite number in {i} (got -1)");
    let int = |f: &str| format!("invalid value '-1' for '{f} <");
    let rows: Vec<(&str, Vec<&str>, String)> = vec![
        ("train", vec!["--lr", "-1"], float("--lr", "(0, 1]")),
        ("train", vec!["--zero", "-1"], int("--zero")),
        ("train", vec!["--steps", "-1"], int("--steps")),
        ("train", vec!["--seed", "-1"], int("--seed")),
        ("pipeline", vec!["--stages", "-1"], int("--stages")),
        (
            "data_parallel",
            vec!["--bucket-mb", "-1"],
            float("--bucket-mb", "(0, 1000000]"),
        ),
        ("tensor_parallel", vec!["--seq", "-1"], int("--seq")),
        ("zero", vec!["--layers", "-1"], int("--layers")),
        ("recompute", vec!["--dp", "-1"], int("--dp")),
        ("plan", vec!["--layers", "-1"], int("--layers")),
        (
            "data_parallel",
            vec!["--degrees", "-1,2"],
            "--degrees: \"-1\" is not a valid value".into(),
        ),
        (
            "zero",
            vec!["--stages", "-1"],
            "--stages: \"-1\" is not a valid value".into(),
        ),
    ];
    for (ex, args, want) in rows {
        let Some(mut cmd) = example(ex, &dir, &args) else {
            return;
        };
        cmd.env("WGPU_BACKEND", absent_backend());
        let err = refused(&output(cmd), &[&want]);
        if want.starts_with("invalid value") {
            assert!(err.contains("not negative"), "{ex} {args:?}: {err}");
        }
    }
}

#[test]
fn steps_in_scientific_notation_are_accepted_up_to_the_cap() {
    let dir = scratch_dir("steps-1e9");
    // 1e9 parses (the next check refused is --lr's), 2e9 is past the cap the help states
    refuses(&dir, &["--steps", "1e9", "--lr", "2"], &["--lr must be"]);
    refuses(
        &dir,
        &["--steps", "2e9"],
        &["--steps must be between 1 and 1000000000 (got 2000000000)"],
    );
    refuses(
        &dir,
        &["--steps", "1.5e0"],
        &["--steps <STEPS>': must be a whole number"],
    );
}

#[test]
fn non_utf8_output_paths_work() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch_dir("non-utf8");
    let ck = OsStr::from_bytes(b"ck-\xff.safetensors");
    let rec = OsStr::from_bytes(b"run-\xfe.json");
    let Some(mut cmd) = example("train", &dir, TINY_TRAIN) else {
        return;
    };
    cmd.args(["--steps", "2", "--checkpoint"])
        .arg(ck)
        .arg("--record")
        .arg(rec);
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(dir.join(ck).is_file() && dir.join(rec).is_file());
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(rec)).unwrap()).unwrap();
    assert_eq!(record["stopped"]["reason"], "finished");
}

/// Starts `cmd` and sends SIGINT as soon as its signal listener runs (before the devices are
/// open, so before its first step); returns the exit code, stderr and the record.
#[cfg(target_os = "linux")]
fn stopped_during_start_up(cmd: Command, dir: &Path) -> (Option<i32>, String, serde_json::Value) {
    let run = Running::start(cmd);
    let pid = run.child.id();
    let listening = || {
        std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|ts| {
            ts.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "signals")
            })
        })
    };
    let t0 = std::time::Instant::now();
    while !listening() {
        assert!(t0.elapsed() < LIMIT, "no signal listener");
        std::thread::sleep(Duration::from_micros(200));
    }
    run.signal("INT");
    let (status, _, err) = run.finish(LIMIT);
    let record = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    (status.code(), err, record)
}

/// A trained checkpoint at `ck.safetensors`: its bytes and inode (an atomic save replaces it).
fn trained_checkpoint(dir: &Path) -> Option<(Vec<u8>, u64)> {
    use std::os::unix::fs::MetadataExt;
    let out = output(train(dir, &["--steps", "2"])?);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = dir.join("ck.safetensors");
    Some((
        std::fs::read(&p).unwrap(),
        std::fs::metadata(&p).unwrap().ino(),
    ))
}

#[cfg(target_os = "linux")]
fn checkpoint_left_alone(dir: &Path, before: &(Vec<u8>, u64)) {
    use std::os::unix::fs::MetadataExt;
    let p = dir.join("ck.safetensors");
    assert_eq!(
        std::fs::metadata(&p).unwrap().ino(),
        before.1,
        "the checkpoint was rewritten"
    );
    assert!(
        std::fs::read(&p).unwrap() == before.0,
        "the checkpoint changed"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_stop_before_the_first_step_leaves_an_existing_checkpoint_alone() {
    let dir = scratch_dir("stop-at-start");
    let Some(before) = trained_checkpoint(&dir) else {
        return;
    };
    let (code, err, rec) = stopped_during_start_up(train(&dir, &["--steps", "50"]).unwrap(), &dir);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(rec["stopped"]["step"], 0, "{err}");
    assert!(err.contains("no checkpoint written"), "{err}");
    checkpoint_left_alone(&dir, &before);
}

#[cfg(target_os = "linux")]
#[test]
fn a_resumed_run_stopped_before_its_first_new_step_leaves_the_checkpoint_alone() {
    let dir = scratch_dir("stop-resumed");
    let Some(before) = trained_checkpoint(&dir) else {
        return;
    };
    let args = ["--steps", "50", "--resume", "ck.safetensors"];
    let (code, err, rec) = stopped_during_start_up(train(&dir, &args).unwrap(), &dir);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(0), "{err}");
    checkpoint_left_alone(&dir, &before);
}

fn locks_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock"))
        .collect()
}

#[test]
fn a_second_run_on_the_same_outputs_is_refused_naming_the_first() {
    let dir = scratch_dir("second-run");
    let Some(cmd) = train(&dir, &["--steps", "100000", "--log-every", "1"]) else {
        return;
    };
    let mut first = Running::start(cmd);
    assert!(first.wait_for_step(1, LIMIT), "the first run took no step");
    let pid = first.child.id().to_string();
    let second =
        output(train(&dir, &["--steps", "2", "--checkpoint", "other.safetensors"]).unwrap());
    refused(
        &second,
        &[
            "--record run.json is in use by another run",
            &format!("(pid {pid}"),
        ],
    );
    first.signal("INT");
    let (status, _, err) = first.finish(LIMIT);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(!dir.join("other.safetensors").exists());
    assert_eq!(
        locks_in(&dir),
        Vec::<String>::new(),
        "after the interrupted run"
    );
}

#[test]
fn a_stale_lock_is_taken_over_with_a_warning() {
    let dir = scratch_dir("stale-lock");
    // the pid of a process that has ended
    let mut gone = Command::new("true").spawn().expect("true runs");
    let pid = gone.id();
    gone.wait().unwrap();
    write(&dir, "run.json.lock", format!("{pid}\n").as_bytes());
    let Some(cmd) = train(&dir, &["--steps", "1"]) else {
        return;
    };
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "taking over the lock file run.json.lock of pid {pid}"
        )),
        "{err}"
    );
    assert_eq!(
        locks_in(&dir),
        Vec::<String>::new(),
        "after the finished run"
    );
}

#[test]
fn a_failed_run_removes_its_locks() {
    let dir = scratch_dir("failed-locks");
    let Some(cmd) = train(&dir, &["--steps", "3", "--fault", "error:0:0:1"]) else {
        return;
    };
    let out = output(cmd);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(locks_in(&dir), Vec::<String>::new());
}

#[test]
fn an_abandoned_step_removes_the_locks() {
    let dir = scratch_dir("abandoned-locks");
    let args = [
        "--steps",
        "5",
        "--fault",
        "stall:0:0:1",
        "--stop-grace",
        "0.2",
        "--log-every",
        "1",
    ];
    let Some(cmd) = train(&dir, &args) else {
        return;
    };
    let mut run = Running::start(cmd);
    assert!(run.wait_for_step(1, LIMIT), "no first step");
    run.signal("INT");
    let (status, _, err) = run.finish(LIMIT);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("abandoning it"), "{err}");
    assert_eq!(locks_in(&dir), Vec::<String>::new());
}

#[test]
fn data_with_nul_bytes_is_refused_naming_the_offset() {
    let dir = scratch_dir("nul-data");
    let utf16: Vec<u8> = "to be or not to be\n"
        .repeat(10)
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    write(&dir, "utf16.txt", &utf16);
    refuses(
        &dir,
        &["--data", "utf16.txt"],
        &["utf16.txt is not text: a NUL byte at offset 1"],
    );
}

#[test]
fn data_that_is_not_utf8_is_refused_naming_the_offset() {
    let dir = scratch_dir("latin1-data");
    let mut bytes = b"caf".to_vec();
    bytes.push(0xe9);
    bytes.extend("! to be or not to be\n".repeat(10).bytes());
    write(&dir, "latin1.txt", &bytes);
    refuses(
        &dir,
        &["--data", "latin1.txt"],
        &["latin1.txt is not UTF-8 text: invalid byte 0xe9 at offset 3"],
    );
}

#[test]
fn data_that_is_a_pipe_or_a_device_is_refused_as_not_a_regular_file() {
    let dir = scratch_dir("fifo-data");
    let made = Command::new("mkfifo")
        .arg(dir.join("fifo"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo");
    for p in ["fifo", "/dev/zero"] {
        let want = format!("--data {p} is not a regular file");
        if refuses(&dir, &["--data", p], &[&want]).is_none() {
            return;
        }
    }
}

#[test]
fn data_past_the_size_cap_is_refused_naming_the_cap() {
    let dir = scratch_dir("huge-data");
    let cap = triaxis::data::MAX_TEXT_BYTES as u64;
    // sparse: no bytes are written, and the size is refused before any is read
    let f = std::fs::File::create(dir.join("huge.txt")).unwrap();
    f.set_len(cap + 1).unwrap();
    let want = format!(
        "huge.txt holds {} bytes, more than the {cap} bytes ({} MiB)",
        cap + 1,
        cap >> 20
    );
    refuses(&dir, &["--data", "huge.txt"], &[&want]);
}

#[test]
fn a_fault_on_a_device_outside_the_layout_is_refused() {
    let dir = scratch_dir("fault-device");
    let args = ["--pp", "2", "--fault", "error:2:0:0"];
    refuses(
        &dir,
        &args,
        &["--fault: device 2 does not exist", "has devices 0 to 1"],
    );
}

#[test]
fn a_fault_past_the_device_s_last_action_is_refused() {
    let dir = scratch_dir("fault-action");
    // two stages, two microbatches: each device runs 2 forwards and 2 backwards a step
    let args = ["--pp", "2", "--microbatches", "2", "--fault", "error:1:4:0"];
    refuses(
        &dir,
        &args,
        &["--fault: device 1 runs 4 passes per step (actions 0 to 3)"],
    );
}

#[test]
fn a_fault_at_the_device_s_last_action_fires() {
    let dir = scratch_dir("fault-last-action");
    let args = [
        "--pp",
        "2",
        "--microbatches",
        "2",
        "--steps",
        "2",
        "--fault",
        "error:1:3:0",
    ];
    let Some(cmd) = train(&dir, &args) else {
        return;
    };
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["stopped"]["reason"], "fault", "{err}");
    assert_eq!(rec["stopped"]["step"], 0, "{err}");
}

#[test]
fn a_fault_after_the_last_step_is_refused() {
    let dir = scratch_dir("fault-step");
    refuses(
        &dir,
        &["--steps", "3", "--fault", "error:0:0:3"],
        &["--fault: step 3 is not in the run (--steps 3"],
    );
}

#[test]
fn a_layout_past_the_memory_budget_is_refused_naming_both() {
    let dir = scratch_dir("memory-budget");
    let args = ["--dp", "8", "--max-memory", "0.001"];
    refuses(
        &dir,
        &args,
        &[
            "dp=8 tp=1 pp=1",
            "needs at least",
            "on 8 device(s)",
            "more than the --max-memory 0.001 GB budget",
        ],
    );
}

#[test]
fn the_memory_a_layout_needs_is_printed_before_the_devices_open() {
    let dir = scratch_dir("memory-line");
    let Some(cmd) = train(&dir, &["--steps", "1", "--dp", "2"]) else {
        return;
    };
    let out = output(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("memory    at least ") && first.contains("on 2 device(s)"),
        "{stdout}"
    );
}

#[test]
fn an_output_path_that_is_a_device_is_refused() {
    let dir = scratch_dir("device-output");
    // renaming the record over /dev/null would replace the device node (as root)
    refuses(
        &dir,
        &["--record", "/dev/null"],
        &["--record /dev/null exists and is not a regular file"],
    );
}

#[test]
fn the_measuring_examples_refuse_a_checked_flag_with_status_2() {
    let dir = scratch_dir("measuring-status");
    for (ex, args, want) in [
        (
            "pipeline",
            ["--stages", "0"],
            "--stages must be between 1 and 1024 (got 0)",
        ),
        (
            "data_parallel",
            ["--heads", "3"],
            "heads (3) must divide channels (128)",
        ),
        (
            "tensor_parallel",
            ["--degrees", "3"],
            "must divide the heads (8)",
        ),
        ("zero", ["--stages", "4"], "ZeRO stage 4 does not exist"),
        (
            "recompute",
            ["--dp", "0"],
            "--dp must be between 1 and 1024 (got 0)",
        ),
    ] {
        let Some(mut cmd) = example(ex, &dir, &args) else {
            return;
        };
        cmd.env("WGPU_BACKEND", absent_backend());
        refused(&output(cmd), &[want]);
    }
}
