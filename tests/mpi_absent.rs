//! A binary built without the `mpi` feature and started by an MPI launcher refuses to run
//! one copy of the whole job per rank: it says to rebuild with the feature (exit 2).
#![cfg(not(feature = "mpi"))]
mod common;

use std::process::Command;

use common::example::{example_bin, scratch_dir};

#[test]
fn a_binary_without_mpi_started_by_mpirun_says_to_rebuild() {
    let dir = scratch_dir("no-mpi");
    let Some(bin) = example_bin("train") else {
        return;
    };
    let o = Command::new(bin)
        .args(["--steps", "2", "--dp", "2", "--microbatches", "2"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .current_dir(&dir)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("rebuild with --features mpi"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
