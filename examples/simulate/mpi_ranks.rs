//! `--validate` over `mpirun` ranks: model B's layouts with one MPI process per device, each
//! process's pass times on the device clock as the runtime exchanges them, beside the
//! simulation from the same calibration.
//!
//! ```text
//! parent   mpirun -n 2 --bind-to none <this program> --validate-rank --steps N --serial-lock FILE
//! rank r   device r of every layout (one virtual device of its own), all built first, then
//!          stepped in rounds; serial timing across the processes (an advisory lock on FILE:
//!          the ranks share this host's cores, so one device of any process computes at a
//!          time); rank 0 prints one JSON line per layout: its pooled device clock
//! parent   the simulation of each layout beside it
//! ```
//!
//! Without the `mpi` feature, or without `mpirun`, the parent says so and measures nothing.

use triaxis::mesh::Mesh;
use triaxis::pipeline::ScheduleKind;

/// The layouts run as MPI ranks: (mesh, microbatch sequences).
pub fn layouts() -> Vec<(Mesh, usize)> {
    let m = |dp, tp, pp, microbatches| Mesh {
        dp,
        tp,
        pp,
        schedule: ScheduleKind::OneFOneB,
        microbatches,
        ..Mesh::default()
    };
    vec![(m(2, 1, 1, 4), 2), (m(1, 1, 2, 8), 2), (m(1, 2, 1, 4), 4)]
}

/// Ranks the layouts need.
#[cfg(feature = "mpi")]
const RANKS: usize = 2;

/// One layout measured by the ranks: index into [`layouts`], the pooled device clock's step
/// and bubble, and the spread of its steps.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Row {
    pub layout: usize,
    pub step: f64,
    pub bubble: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Runs [`layouts`] as `mpirun -n RANKS` of this program; `Ok(None)` with the reason printed
/// when this build or host cannot.
#[cfg(feature = "mpi")]
pub fn measure(steps: usize, link: &str) -> anyhow::Result<Option<Vec<Row>>> {
    use anyhow::{bail, Context};
    use std::process::Stdio;
    if !crate::mpirun::found() {
        println!("mpirun ranks: not measured (mpirun is not on PATH)");
        return Ok(None);
    }
    let lock = std::env::temp_dir().join(format!("triaxis-serial-{}.lock", std::process::id()));
    let me = std::env::current_exe().context("this program's path")?;
    // unbound: mpirun binds each rank to one core by default, and a software adapter's
    // kernels then run on that core alone (a GPU rank would have its whole GPU)
    let out = crate::mpirun::mpirun(RANKS)
        .args(["--bind-to", "none"])
        .arg(me)
        .args([
            "--validate-rank",
            "--steps",
            &steps.to_string(),
            "--link",
            link,
        ])
        .arg("--serial-lock")
        .arg(&lock)
        .stderr(Stdio::inherit())
        .output()
        .context("starting mpirun");
    let _ = std::fs::remove_file(&lock);
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("mpirun -n {RANKS} failed ({}):\n{text}", out.status);
    }
    let rows: Vec<Row> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if rows.len() != layouts().len() {
        bail!(
            "mpirun -n {RANKS} printed {} rows, not {}:\n{text}",
            rows.len(),
            layouts().len()
        );
    }
    Ok(Some(rows))
}

#[cfg(not(feature = "mpi"))]
pub fn measure(_steps: usize, _link: &str) -> anyhow::Result<Option<Vec<Row>>> {
    println!(
        "mpirun ranks: not measured (build with --features mpi and Open MPI installed to include them)"
    );
    Ok(None)
}

/// `--validate-rank`: this process's rank of every layout; rank 0 prints the rows.
#[cfg(feature = "mpi")]
pub fn child(
    steps: usize,
    lock: &std::path::Path,
    link: triaxis::link::Link,
) -> anyhow::Result<()> {
    use crate::measure;
    use anyhow::Context;
    use triaxis::comm::mpi::{self, Reduction};
    use triaxis::data::Corpus;
    use triaxis::gpu::{AdapterChoice, Gpu};
    let universe = mpi::init()?; // first in, last dropped: it finalises MPI
    let world = universe.world();
    let rank = mpi::world_rank(&world);
    let gpu = Gpu::open_virtual(&AdapterChoice::from_flags(None, None, false)?, 1)?
        .pop()
        .context("one device")?;
    let corpus = Corpus::throughput()?;
    let model = measure::model(&corpus, 8);
    let mut runs = Vec::new();
    for (mesh, b) in layouts() {
        let (cfg, mut opts) = measure::setup(&model, mesh, b, link, steps);
        opts.serial_lock = Some(lock.to_path_buf());
        let engine = crate::mpi_engine::mpi_engine(
            &world,
            rank,
            Reduction::Ordered,
            gpu.clone(),
            cfg,
            mesh,
            opts,
        )?;
        runs.push(measure::warm(engine, &corpus, &model, mesh, b)?);
    }
    measure::rounds(&mut runs, &corpus, steps)?;
    for (i, run) in runs.iter().enumerate() {
        let m = measure::measured(run, measure::QUIET)?;
        let row = Row {
            layout: i,
            step: m.clock.makespan,
            bubble: m.clock.bubble(0..run.mesh.pp * run.mesh.tp),
            lo: m.spread.0,
            hi: m.spread.1,
        };
        if rank == 0 {
            println!("{}", serde_json::to_string(&row)?);
        }
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
pub fn child(
    _steps: usize,
    _lock: &std::path::Path,
    _link: triaxis::link::Link,
) -> anyhow::Result<()> {
    anyhow::bail!(
        "--validate-rank is --validate's own mode under mpirun (built with --features mpi)"
    )
}
