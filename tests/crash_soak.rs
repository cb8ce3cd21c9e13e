//! Crash-resume soak: a 400-step run of the train example is killed with SIGKILL at several
//! random moments (between steps or in the middle of a checkpoint write) and resumed from its
//! checkpoint each time; it ends with the checksum of the run that was never killed, and no
//! kill ever leaves a half-written checkpoint — only a complete file, or the previous one.

mod common;

use std::path::Path;
use std::time::Duration;

use common::example::{example, scratch_dir, Running};
use triaxis::checkpoint::Checkpoint;
use triaxis::rng::Rng;

const STEPS: usize = 400;
const KILLS: usize = 5;
const LIMIT: Duration = Duration::from_secs(300);

fn train(dir: &Path, resume: bool) -> Option<std::process::Command> {
    let steps = STEPS.to_string();
    let mut args = vec![
        "--steps",
        &steps,
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
        "0",
        "--eval-batches",
        "1",
        "--log-every",
        "1",
        "--checkpoint-every",
        "1",
        "--checkpoint",
        "ck.safetensors",
        "--record",
        "run.json",
    ];
    if resume {
        args.extend(["--resume", "ck.safetensors"]);
    }
    example("train", dir, &args)
}

fn checksum_of(dir: &Path) -> String {
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["stopped"]["reason"], "finished");
    rec["model_checksum"].as_str().unwrap().to_string()
}

#[test]
fn killed_runs_resume_to_the_uninterrupted_checksum_and_never_leave_half_a_checkpoint() {
    let straight = scratch_dir("soak-straight");
    let Some(cmd) = train(&straight, false) else {
        return;
    };
    let (status, _, err) = Running::start(cmd).finish(LIMIT);
    assert!(status.success(), "{err}");
    let want = checksum_of(&straight);

    let dir = scratch_dir("soak");
    let ck = dir.join("ck.safetensors");
    let mut rng = Rng::new(2024);
    let mut saved = 0usize; // step of the checkpoint on disk
    let mut kills = Vec::new();
    for k in 0..KILLS {
        // a target step in this life of the run, then 0–20 ms more: kills land between steps
        // and inside checkpoint writes (one is written after every step)
        let target = saved + 20 + rng.below(60) as usize;
        let extra = Duration::from_micros(rng.below(20_000));
        let mut run = Running::start(train(&dir, saved > 0).unwrap());
        assert!(
            run.wait_for_step(target, LIMIT),
            "kill {k}: no step {target}"
        );
        std::thread::sleep(extra);
        run.signal("KILL");
        let (status, _, _) = run.finish(LIMIT);
        assert!(
            !status.success(),
            "kill {k}: the run finished before it was killed"
        );
        // the checkpoint on disk is complete: it verifies, and it is at or after the last one
        let loaded = Checkpoint::load(&ck).unwrap_or_else(|e| panic!("kill {k}: {e}"));
        assert!(
            loaded.step >= saved && loaded.step <= STEPS,
            "kill {k}: checkpoint step {} after {saved}",
            loaded.step
        );
        for f in std::fs::read_dir(&dir).unwrap().map_while(Result::ok) {
            let name = f.file_name().to_string_lossy().into_owned();
            // a killed run leaves its lock files (the next run takes them over: their pid is
            // gone) and may leave a temporary file; nothing else
            let known = [
                "ck.safetensors",
                "run.json",
                "ck.safetensors.lock",
                "run.json.lock",
            ]
            .contains(&name.as_str())
                || name.starts_with("ck.safetensors.tmp-")
                || name.starts_with("run.json.tmp-");
            assert!(known, "kill {k}: unexpected file {name}");
        }
        println!(
            "kill {k}: at step ≥ {target} (+{extra:?}), checkpoint at step {} verifies",
            loaded.step
        );
        kills.push(loaded.step);
        saved = loaded.step;
    }
    let (status, _, err) = Running::start(train(&dir, true).unwrap()).finish(LIMIT);
    assert!(status.success(), "{err}");
    let got = checksum_of(&dir);
    println!("killed at steps {kills:?}; resumed to {STEPS}: {got}; uninterrupted: {want}");
    assert_eq!(got, want);
}
