//! The throughput example runs a tiny model end to end without PyTorch and says so, with a
//! Python that cannot start too, and records what a step did on the device (one host wait a
//! step without the device clock).
mod common;

use common::example::{run_example, scratch_dir};
use triaxis::gpu;

#[test]
fn throughput_runs_and_says_pytorch_did_not() {
    let Some(_g) = gpu::test_gpu() else { return };
    let dir = scratch_dir("throughput");
    let tiny = "--layers 1 --channels 16 --heads 2 --seq 8 --batch 2 --steps 2 --rounds 1";
    let mut args: Vec<&str> = tiny.split(' ').collect();
    args.extend(["--torch", "--python", "no-such-python", "--out", "out"]);
    let Some(o) = run_example("throughput", &dir, &args) else {
        return;
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("PyTorch  not run: no-such-python could not start"),
        "{all}"
    );
    let json = std::fs::read_to_string(dir.join("out/throughput.json")).expect("the record");
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert!(v["pytorch"].is_null(), "{v}");
    let rows = v["triaxis"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "f32 and bf16");
    for r in rows {
        assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0, "{r}");
        // zero-gradient passes, the forward, backward and optimizer: dozens of dispatches
        assert!(r["dispatches_per_step"].as_f64().unwrap() >= 20.0, "{r}");
        // without --device-clock no pass is timed: the norm's read is the step's one wait
        assert_eq!(r["host_waits_per_step"].as_f64(), Some(1.0), "{r}");
        assert!(r["device_step_s"].is_null(), "{r}");
        assert!(r["vs_pytorch"].is_null(), "{r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
