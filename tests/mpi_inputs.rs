//! The adapters of an MPI job (the train example under `mpirun`, two ranks oversubscribed on
//! this host): every rank's adapter and driver are in the run record, and a job whose ranks
//! run on different backends is refused with every rank's adapter named (see docs/inputs.md).

#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::Output;

use common::example::{example_bin, mpirun, scratch_dir, TINY_TRAIN};

/// Two ranks of `--dp 2`, rank r with `WGPU_BACKEND=backends[r]`, in `dir`.
fn two_ranks(dir: &Path, backends: [&str; 2]) -> Option<Output> {
    let bin = example_bin("train")?;
    let mut c = mpirun()?;
    let mut args: Vec<&str> = TINY_TRAIN.to_vec();
    args.extend(["--dp", "2", "--steps", "2", "--record", "run.json"]);
    args.extend(["--checkpoint", "ck.safetensors"]);
    for (i, b) in backends.iter().enumerate() {
        if i > 0 {
            c.arg(":");
        }
        c.args(["-n", "1", "-x", &format!("WGPU_BACKEND={b}")])
            .arg(&bin)
            .args(&args);
    }
    Some(c.current_dir(dir).output().expect("mpirun starts"))
}

fn ranks(dir: &Path) -> (serde_json::Value, Vec<serde_json::Value>) {
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).expect("a record"))
            .expect("JSON");
    let ranks = rec["parallel"]["mpi"]["ranks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (rec, ranks)
}

fn has_backend(name: &str) -> bool {
    triaxis::gpu::list_adapters(None)
        .iter()
        .any(|a| a.backend == name)
}

#[test]
fn every_rank_s_adapter_and_driver_are_in_the_record() {
    let dir = scratch_dir("mpi-adapters");
    let Some(out) = two_ranks(&dir, ["vulkan", "vulkan"]) else {
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let (_, ranks) = ranks(&dir);
    assert_eq!(ranks.len(), 2, "{err}");
    for r in &ranks {
        let a = &r["adapter"];
        assert_eq!(a["backend"], "Vulkan", "{r}");
        assert!(a["name"].as_str().is_some_and(|n| !n.is_empty()), "{r}");
        assert!(
            a["driver"].is_string() && a["driver_info"].is_string(),
            "{r}"
        );
    }
}

#[test]
fn ranks_on_different_backends_are_refused_naming_each_adapter() {
    if !has_backend("Vulkan") || !has_backend("Gl") {
        eprintln!("SKIP: this host lacks a Vulkan or a GL adapter");
        return;
    }
    let dir = scratch_dir("mpi-backends");
    let Some(out) = two_ranks(&dir, ["vulkan", "gl"]) else {
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("the ranks run on different backends or drivers"),
        "{err}"
    );
    let (rec, ranks) = ranks(&dir);
    assert_eq!(rec["stopped"]["reason"], "error", "{err}");
    assert_eq!(rec["stopped"]["step"], 0, "{err}");
    let backends: Vec<&str> = ranks
        .iter()
        .filter_map(|r| r["adapter"]["backend"].as_str())
        .collect();
    assert_eq!(backends, ["Vulkan", "Gl"], "{err}");
    assert!(!dir.join("ck.safetensors").exists());
}
