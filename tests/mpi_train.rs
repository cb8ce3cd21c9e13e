//! The train example as an MPI job (`cargo test --features mpi`; mpirun with 2, 4 and 8
//! ranks, oversubscribed on this host): in `ordered` mode every layout ends with the in-process run's
//! model checksum, in f32 and in bf16 (dp × tp, ZeRO-1, ZeRO-3); `native` mode stays within rounding of it; a checkpoint written under MPI
//! resumes in one process and back (the MPI run ended by a named fault in step 5); SIGTERM to
//! every rank (as Slurm sends it) or SIGUSR1 to mpirun (which forwards it) stops every rank
//! after the same step with a checkpoint that resumes; under dp 2 × pp 2 on 4 ranks (the MPI
//! row of the fault and signal matrix, `fault_matrix.rs`) a fault on rank 3 ends the job
//! with exit status 1, rank 3's failure named on stderr and in rank 0's record, and SIGINT to
//! rank 3 alone stops every rank at one step (exit status 130), both leaving a checkpoint
//! that resumes on 4 ranks to the uninterrupted checksum; a killed rank
//! ends the job within 10 s; a world that does not fit the layout, ranks started with
//! different command lines and a `--devices` that contradicts the world are refused on every
//! rank before device work.
#![cfg(feature = "mpi")]
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::example::{example_bin, mpirun, run_example, scratch_dir, TINY_TRAIN};

fn args<'a>(steps: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = TINY_TRAIN.to_vec();
    v.extend(["--log-every", "1"]);
    v.extend(["--steps", steps]);
    v.extend(rest);
    v
}

/// The record's model checksum and last loss.
fn record(dir: &Path, name: &str) -> (String, f64, serde_json::Value) {
    let text = std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("no record {name} in {}: {e}", dir.display()));
    let rec: serde_json::Value = serde_json::from_str(&text).expect("a JSON record");
    let sum = rec["model_checksum"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let loss = rec["steps"]
        .as_array()
        .and_then(|s| s.last())
        .and_then(|s| s["loss"].as_f64())
        .unwrap_or(f64::NAN);
    (sum, loss, rec)
}

/// Removes the record `a` names (`--record FILE`) from `dir`: a case reads only the record its
/// own run wrote, never a previous case's (a run that exits 0 without writing one fails).
fn fresh_record(dir: &Path, a: &[&str]) {
    if let Some(i) = a.iter().position(|x| *x == "--record") {
        match std::fs::remove_file(dir.join(a[i + 1])) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("cannot remove the old record {}: {e}", a[i + 1])
            }
            _ => {}
        }
    }
}

/// The train example in one process with `a`, in `dir` (its record removed first).
fn run_one(dir: &Path, a: &[&str]) -> Output {
    fresh_record(dir, a);
    run_example("train", dir, a).expect("the example runs")
}

/// The train example on `n` ranks with `a`, in `dir` (its record removed first).
fn launch(n: usize, dir: &Path, a: &[&str]) -> Option<Output> {
    fresh_record(dir, a);
    let bin = example_bin("train")?;
    let mut c = mpirun()?;
    c.args(["-n", &n.to_string()])
        .arg(bin)
        .args(a)
        .current_dir(dir);
    Some(c.output().expect("mpirun starts"))
}

fn ok(what: &str, o: &Output) {
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn ordered_mpi_gives_the_in_process_bits_and_native_stays_within_rounding() {
    let dir = scratch_dir("mpi-bits");
    let cases: &[(usize, &[&str], &[&str])] = &[
        (
            2,
            &["--dp", "2", "--microbatches", "2"],
            &["--dp", "2", "--microbatches", "2"],
        ),
        (
            2,
            &["--pp", "2", "--microbatches", "2"],
            &["--pp", "2", "--microbatches", "2"],
        ),
        (
            2,
            &["--tp", "2", "--microbatches", "2"],
            &["--tp", "2", "--microbatches", "2"],
        ),
        (
            4,
            &["--dp", "2", "--pp", "2", "--microbatches", "2"],
            &["--dp", "2", "--microbatches", "2"],
        ),
        (
            2,
            &["--dp", "2", "--zero", "1", "--microbatches", "2"],
            &["--dp", "2", "--microbatches", "2"],
        ),
        (
            2,
            &["--dp", "2", "--zero", "2", "--microbatches", "2"],
            &["--dp", "2", "--microbatches", "2"],
        ),
        (
            2,
            &["--dp", "2", "--zero", "3", "--microbatches", "2"],
            &["--dp", "2", "--microbatches", "2"],
        ),
        (
            4,
            &["--dp", "2", "--tp", "2", "--microbatches", "2"],
            &["--dp", "2", "--tp", "2", "--microbatches", "2"],
        ),
        (
            8,
            &["--dp", "2", "--tp", "2", "--pp", "2", "--microbatches", "2"],
            &["--dp", "2", "--tp", "2", "--pp", "2", "--microbatches", "2"],
        ),
        // bf16: the bf16 ring on MPI messages, data- and tensor-parallel, ZeRO-1 and ZeRO-3
        (
            4,
            &[
                "--dp",
                "2",
                "--tp",
                "2",
                "--microbatches",
                "2",
                "--precision",
                "bf16",
            ],
            &[
                "--dp",
                "2",
                "--tp",
                "2",
                "--microbatches",
                "2",
                "--precision",
                "bf16",
            ],
        ),
        (
            2,
            &[
                "--dp",
                "2",
                "--zero",
                "1",
                "--microbatches",
                "2",
                "--precision",
                "bf16",
            ],
            &["--dp", "2", "--microbatches", "2", "--precision", "bf16"],
        ),
        (
            2,
            &[
                "--dp",
                "2",
                "--zero",
                "3",
                "--microbatches",
                "2",
                "--precision",
                "bf16",
            ],
            &["--dp", "2", "--microbatches", "2", "--precision", "bf16"],
        ),
    ];
    for (n, layout, reference) in cases {
        let t = Instant::now();
        let mut a = args("6", layout);
        a.extend(["--no-checkpoint", "--record", "mpi.json"]);
        let Some(o) = launch(*n, &dir, &a) else {
            return;
        };
        ok(&format!("mpirun -n {n} {layout:?}"), &o);
        let mpi_wall = t.elapsed();
        let mut a = args("6", reference);
        a.extend(["--no-checkpoint", "--record", "one.json"]);
        let o = run_one(&dir, &a);
        ok(&format!("{reference:?}"), &o);
        let (got, _, rec) = record(&dir, "mpi.json");
        let (want, _, _) = record(&dir, "one.json");
        println!(
            "mpirun -n {n} {}: {got} ({mpi_wall:.1?}); in process {want}",
            layout.join(" ")
        );
        assert_eq!(got, want, "{layout:?}: MPI (ordered) vs one process");
        let m = &rec["parallel"]["mpi"];
        assert_eq!(m["world_size"].as_u64(), Some(*n as u64), "{rec}");
        assert_eq!(m["reduction"].as_str(), Some("ordered"));
        assert_eq!(m["ranks"].as_array().map(Vec::len), Some(*n));
    }
    // native: MPI's own summation order, equal to rounding
    for (n, layout) in [
        (2, &["--dp", "2", "--microbatches", "2"][..]),
        (4, &["--dp", "2", "--pp", "2", "--microbatches", "2"][..]),
    ] {
        let mut a = args("6", layout);
        a.extend([
            "--no-checkpoint",
            "--reduction",
            "native",
            "--record",
            "native.json",
        ]);
        let Some(o) = launch(n, &dir, &a) else {
            return;
        };
        ok("native", &o);
        let mut a = args("6", &["--dp", "2", "--microbatches", "2"]);
        a.extend(["--no-checkpoint", "--record", "one.json"]);
        ok("one", &run_one(&dir, &a));
        let (_, native, rec) = record(&dir, "native.json");
        let (_, one, _) = record(&dir, "one.json");
        let rel = (native - one).abs() / one.abs();
        println!("native -n {n}: last loss {native} vs {one} in process (rel {rel:.1e})");
        assert!(rel < 1e-4, "native loss {native} vs {one}");
        assert_eq!(rec["parallel"]["mpi"]["reduction"].as_str(), Some("native"));
        assert!(rec["parallel"]["mpi"]["summation_order"]
            .as_str()
            .is_some_and(|s| s.contains("MPI library")));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_resumes_across_mpi_and_one_process() {
    let dir = scratch_dir("mpi-resume");
    let layout = ["--dp", "2", "--microbatches", "2"];
    let mut a = args("8", &layout);
    a.extend(["--no-checkpoint", "--record", "straight.json"]);
    ok("straight", &run_one(&dir, &a));
    let (want, _, _) = record(&dir, "straight.json");
    // the first half: a checkpoint at step 4, then a fault in step 5 ends the run (the
    // learning-rate schedule is the 8-step run's)
    let half = |ck: &'static str, rec: &'static str| {
        let mut a = args("8", &layout);
        a.extend([
            "--checkpoint-every",
            "4",
            "--checkpoint",
            ck,
            "--record",
            rec,
        ]);
        a.extend(["--fault", "error:1:0:5"]);
        a
    };
    // MPI writes the checkpoint, one process resumes
    let Some(o) = launch(2, &dir, &half("a.safetensors", "a.json")) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the fault must end the MPI run");
    assert!(err.contains("device 1") && err.contains("step 5"), "{err}");
    let mut a = args("8", &layout);
    a.extend([
        "--resume",
        "a.safetensors",
        "--no-checkpoint",
        "--record",
        "a2.json",
    ]);
    ok("in-process resume", &run_one(&dir, &a));
    let (got, _, _) = record(&dir, "a2.json");
    assert_eq!(got, want, "MPI checkpoint resumed in one process");
    // one process writes it, MPI (under dp 2 × pp 2) resumes
    let o = run_one(&dir, &half("b.safetensors", "b.json"));
    assert!(!o.status.success(), "the fault must end the run");
    let mut a = args("8", &["--dp", "2", "--pp", "2", "--microbatches", "2"]);
    a.extend([
        "--resume",
        "b.safetensors",
        "--no-checkpoint",
        "--record",
        "b2.json",
    ]);
    let o = launch(4, &dir, &a).expect("mpirun ran above");
    ok("mpi resume", &o);
    let (got, _, _) = record(&dir, "b2.json");
    println!("straight {want}; resumed both ways {got}");
    assert_eq!(got, want, "one-process checkpoint resumed under MPI");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_rank_ends_the_job_within_ten_seconds() {
    let dir = scratch_dir("mpi-kill");
    let Some(bin) = example_bin("train") else {
        return;
    };
    let Some(mut c) = mpirun() else {
        return;
    };
    let mut a = args("100000", &["--dp", "2", "--microbatches", "2"]);
    a.extend(["--no-checkpoint", "--record", "kill.json"]);
    c.args(["-n", "2"])
        .arg(&bin)
        .args(&a)
        .current_dir(&dir)
        // to files: an unread pipe would fill and stall mpirun itself
        .stdout(std::fs::File::create(dir.join("kill.out")).expect("a file"))
        .stderr(std::fs::File::create(dir.join("kill.err")).expect("a file"));
    let mut child = c.spawn().expect("mpirun starts");
    // wait until both ranks run steps (their pids are the example's processes in this dir)
    let t0 = Instant::now();
    let ranks = loop {
        let out = Command::new("pgrep")
            .args(["-f", &format!("{} .*kill.json", bin.display())])
            .output()
            .expect("pgrep runs");
        let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        if pids.len() >= 2 && t0.elapsed() > Duration::from_secs(8) {
            break pids;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the ranks never started"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let victim = ranks.last().expect("two ranks").clone();
    Command::new("kill")
        .args(["-9", &victim])
        .status()
        .expect("kill runs");
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the job still runs 30 s after a rank was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = killed.elapsed();
    let err = std::fs::read_to_string(dir.join("kill.err")).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("kill.out")).unwrap_or_default();
    let named: Vec<&str> = err
        .lines()
        .filter(|l| {
            l.contains("signal 9") || l.contains("failed at action") || l.contains("stopped")
        })
        .collect();
    println!("killed rank {victim}: the job ended in {took:.2?} with {status}: {named:?}");
    assert!(!status.success());
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!named.is_empty(), "no line names the failure:\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jobs_that_do_not_fit_are_refused_on_every_rank() {
    let dir = scratch_dir("mpi-refuse");
    let mut a = args("2", &["--dp", "2", "--microbatches", "2"]);
    a.extend(["--no-checkpoint", "--record", "r.json"]);
    let Some(o) = launch(3, &dir, &a) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    // every rank refuses (mpirun may stop the others before they print)
    assert!(err.contains("the MPI world has 3 ranks"), "{err}");
    let mut b = a.clone();
    b.extend(["--devices", "5"]);
    let o = launch(2, &dir, &b).expect("mpirun");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("but 5 are given"), "{err}");
    // two ranks, two command lines (MPMD): refused by both
    let bin = example_bin("train").expect("built");
    let mut c = mpirun().expect("mpirun");
    c.args(["-n", "1"]).arg(&bin).args(&a).args(["--seed", "1"]);
    c.args([":", "-n", "1"])
        .arg(&bin)
        .args(&a)
        .args(["--seed", "2"]);
    let o = c.current_dir(&dir).output().expect("mpirun");
    let err = String::from_utf8_lossy(&o.stderr);
    println!(
        "{}",
        err.lines()
            .find(|l| l.contains("different"))
            .unwrap_or_default()
    );
    assert!(!o.status.success());
    assert!(err.contains("different command line"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stop_signal_stops_every_rank_at_one_step_and_resumes() {
    use common::example::Running;
    let dir = scratch_dir("mpi-term");
    let layout = ["--dp", "2", "--microbatches", "2"];
    let mut a = args("300", &layout);
    a.extend(["--no-checkpoint", "--record", "straight.json"]);
    ok("straight", &run_one(&dir, &a));
    let (want, _, _) = record(&dir, "straight.json");
    let Some(bin) = example_bin("train") else {
        return;
    };
    // SIGTERM to every rank, as Slurm sends it (scancel, a time limit); SIGUSR1 to mpirun,
    // which forwards it to every rank (its own SIGTERM starts its kill sequence instead)
    for (how, signal, code) in [
        ("SIGTERM to every rank", "TERM", 143),
        ("SIGUSR1 to mpirun", "USR1", 138),
    ] {
        let Some(mut c) = mpirun() else {
            return;
        };
        let mut a = args("300", &layout);
        a.extend(["--checkpoint", "t.safetensors", "--record", "t.json"]);
        // this case's record and checkpoint, never the previous case's
        fresh_record(&dir, &a);
        let _ = std::fs::remove_file(dir.join("t.safetensors"));
        c.args(["-n", "2"]).arg(&bin).args(&a).current_dir(&dir);
        let mut run = Running::start(c);
        assert!(
            run.wait_for_step(3, Duration::from_secs(120)),
            "the job never reached step 3"
        );
        if signal == "USR1" {
            run.signal(signal);
        } else {
            // the ranks only: mpirun's command line names the binary too, hence the anchor
            let pattern = format!("^{} .* --record t\\.json", bin.display());
            let signalled = Command::new("pkill")
                .args([&format!("-{signal}"), "-f", &pattern])
                .status()
                .is_ok_and(|s| s.success());
            assert!(signalled, "no rank to signal");
        }
        let t = Instant::now();
        let (status, _, err) = run.finish(Duration::from_secs(60));
        println!("{how}: mpirun ended in {:.2?} with {status}", t.elapsed());
        assert_eq!(status.code(), Some(code), "{how}: {err}");
        let (_, _, rec) = record(&dir, "t.json");
        let stopped = &rec["stopped"];
        println!("record: {stopped}");
        assert_eq!(
            stopped["reason"].as_str(),
            Some("interrupted"),
            "{how}: {rec}"
        );
        assert!(
            stopped["error"].is_null(),
            "{how}: one signal, one graceful stop: {stopped}"
        );
        let at = stopped["step"].as_u64().expect("a step");
        assert_eq!(
            stopped["last_checkpoint"].as_u64(),
            Some(at),
            "{how}: {stopped}"
        );
        let mut a = args("300", &layout);
        a.extend([
            "--resume",
            "t.safetensors",
            "--no-checkpoint",
            "--record",
            "r.json",
        ]);
        ok("resume", &run_one(&dir, &a));
        let (got, _, _) = record(&dir, "r.json");
        println!("{how}: stopped at step {at}; resumed {got}; straight {want}");
        assert_eq!(got, want, "{how}");
        let _ = std::fs::remove_file(dir.join("t.json"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// dp 2 × pp 2 on 4 ranks (one device each) for the fault and signal matrix: the layout, its
/// steps, and the model checksum of its uninterrupted run (in one process, whose bits ordered
/// MPI gives), run once for both cases. Their records have names of their own (`mref`, `mf`,
/// `msig`, `mres`): the signal cases find their ranks by the record on the command line, and
/// no pattern of another case matches them (`.*t.json` would match `straight.json`).
const DP_PP: &[&str] = &["--dp", "2", "--pp", "2", "--microbatches", "2"];
const DP_PP_STEPS: &str = "8";

fn dp_pp_reference() -> String {
    static SUM: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SUM.get_or_init(|| {
        let dir = scratch_dir("mpi-matrix-straight");
        let mut a = args(DP_PP_STEPS, DP_PP);
        a.extend(["--no-checkpoint", "--record", "mref.json"]);
        ok("dp 2 × pp 2 uninterrupted", &run_one(&dir, &a));
        let (sum, _, _) = record(&dir, "mref.json");
        let _ = std::fs::remove_dir_all(&dir);
        sum
    })
    .clone()
}

/// Resumes `dir`'s `ck.safetensors` (at step `from`) on 4 ranks to the last step: the
/// uninterrupted run's checksum.
fn dp_pp_resumes_to_the_same_bits(dir: &Path, from: u64, what: &str) {
    let mut a = args(DP_PP_STEPS, DP_PP);
    a.extend([
        "--resume",
        "ck.safetensors",
        "--no-checkpoint",
        "--record",
        "mres.json",
    ]);
    let o = launch(4, dir, &a).expect("mpirun ran above");
    ok(&format!("{what}: the resumed job"), &o);
    let (got, _, rec) = record(dir, "mres.json");
    assert_eq!(rec["stopped"]["reason"], "finished", "{what}");
    assert_eq!(
        rec["parallel"]["resumed_from_step"].as_u64(),
        Some(from),
        "{what}: resumed from the checkpoint left behind"
    );
    let want = dp_pp_reference();
    println!("{what}: resumed from step {from} on 4 ranks: {got}; uninterrupted {want}");
    assert_eq!(got, want, "{what}: resumed vs uninterrupted");
}

#[test]
fn a_fault_on_one_rank_of_dp_pp_is_named_and_its_checkpoint_resumes() {
    let dir = scratch_dir("mpi-matrix-fault");
    let what = "mpirun -n 4 dp 2 × pp 2 --fault error:3:1:5";
    // device 3 = rank 3: replica 1's last stage, whose 1F1B list is F0 B0 F1 B1
    let mut a = args(DP_PP_STEPS, DP_PP);
    a.extend([
        "--fault",
        "error:3:1:5",
        "--checkpoint-every",
        "2",
        "--checkpoint",
        "ck.safetensors",
        "--record",
        "mf.json",
    ]);
    let Some(o) = launch(4, &dir, &a) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    println!("{what}: {}; stderr:\n{err}", o.status);
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    let named = "device 3 (stage 1) failed at action 1B0 of step 5: device error: injected fault";
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: rank 3 on ") && l.ends_with(named)),
        "{what}: no line of rank 3 names {named:?}:\n{err}"
    );
    let (_, _, rec) = record(&dir, "mf.json");
    let st = &rec["stopped"];
    println!("{what}: stopped = {st}");
    assert_eq!(st["reason"], "fault", "{what}");
    // rank 0 writes the record: its own failure, with the failing rank's named in its cause
    assert!(
        st["error"].as_str().is_some_and(|e| e.contains(named)),
        "{what}: the record does not name {named:?}: {st}"
    );
    assert_eq!(st["step"].as_u64(), Some(5), "{what}");
    assert_eq!(st["last_checkpoint"].as_u64(), Some(4), "{what}");
    assert_eq!(st["signal"], serde_json::Value::Null, "{what}");
    assert_eq!(rec["steps"].as_array().map(Vec::len), Some(5), "{what}");
    let ck = triaxis::checkpoint::Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
    assert_eq!(ck.step, 4, "{what}: the last good checkpoint");
    dp_pp_resumes_to_the_same_bits(&dir, 4, what);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pid of world rank `rank` among the processes of `bin` whose command line names
/// `record` (its MPI environment says which rank it is).
fn rank_pid(bin: &Path, record: &str, rank: usize) -> Option<String> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("^{} .*{record}", bin.display())])
        .output()
        .expect("pgrep runs");
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
        })
        .map(String::from)
}

#[test]
fn sigint_to_one_rank_of_dp_pp_stops_every_rank_at_one_step_and_resumes() {
    use common::example::Running;
    let dir = scratch_dir("mpi-matrix-sigint");
    let what = "mpirun -n 4 dp 2 × pp 2, SIGINT to rank 3";
    let Some(bin) = example_bin("train") else {
        return;
    };
    let Some(mut c) = mpirun() else {
        return;
    };
    let at = 3;
    // an evaluation after step 3 (hundreds of milliseconds): the signal finds the job running
    let mut a: Vec<&str> = TINY_TRAIN
        .chunks(2)
        .filter(|kv| kv[0] != "--eval-every")
        .flatten()
        .copied()
        .collect();
    a.extend(["--log-every", "1", "--steps", DP_PP_STEPS]);
    a.extend(DP_PP);
    // a grace long enough for a loaded host: this test is about every rank stopping at one
    // step, not about the grace timer (tests/run_end.rs holds that)
    a.extend([
        "--eval-every",
        "3",
        "--stop-grace",
        "60",
        "--checkpoint",
        "ck.safetensors",
        "--record",
        "msig.json",
    ]);
    c.args(["-n", "4"]).arg(&bin).args(&a).current_dir(&dir);
    let mut run = Running::start(c);
    assert!(
        run.wait_for_step(at, Duration::from_secs(120)),
        "{what}: the job never reached step {at}"
    );
    let pid = rank_pid(&bin, "msig.json", 3).expect("rank 3 runs");
    let sent = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(sent, "{what}: kill -INT {pid}");
    let (status, _, err) = run.finish(Duration::from_secs(60));
    println!("{what}: {status}; stderr:\n{err}");
    assert_eq!(status.code(), Some(130), "{what}: {err}");
    let (_, _, rec) = record(&dir, "msig.json");
    let st = &rec["stopped"];
    println!("{what}: stopped = {st}");
    assert_eq!(st["reason"], "interrupted", "{what}");
    assert_eq!(st["signal"], "SIGINT", "{what}");
    assert_eq!(st["abandoned_step"], false, "{what}");
    assert!(
        st["error"].is_null(),
        "{what}: one signal, one graceful stop"
    );
    let step = st["step"].as_u64().expect("a step");
    assert!((at as u64..8).contains(&step), "{what}: stopped at {step}");
    assert_eq!(st["last_checkpoint"].as_u64(), Some(step), "{what}");
    assert_eq!(
        rec["steps"].as_array().map(Vec::len),
        Some(step as usize),
        "{what}"
    );
    let ck = triaxis::checkpoint::Checkpoint::load(&dir.join("ck.safetensors")).unwrap();
    assert_eq!(
        ck.step as u64, step,
        "{what}: the checkpoint written at the stop"
    );
    dp_pp_resumes_to_the_same_bits(&dir, step, what);
    let _ = std::fs::remove_dir_all(&dir);
}
