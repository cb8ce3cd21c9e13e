//! The knobs of a runtime that do not change its result, and the one check of a run's
//! configuration, layout and options before any device work.

use std::time::Duration;

use crate::collective::Algo;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::mesh::Mesh;
use crate::model::{Precision, Recompute};
use crate::parallel::accumulate::Accumulation;
use crate::parallel::bucket::BUCKET_BYTES;
use crate::pipeline::partition::Balance;
use crate::step::TrainConfig;

use super::fault::{Fault, GradScale};

/// Which communicator the workers talk through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommKind {
    /// Threads of this process sharing host buffers ([`crate::comm::local`]).
    #[default]
    Local,
    /// Every message serialised, collectives on point-to-point messages ([`crate::comm::loopback`]).
    Loopback,
}

/// Knobs of a runtime that do not change its result.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Link model of pipeline sends and data-parallel reductions.
    pub link: Link,
    /// Link model of the tensor-parallel all-reduces.
    pub tp_link: Link,
    /// One device's compute at a time (clean device-clock times on virtual devices).
    pub serial: bool,
    /// Serial timing across processes: every process of the run takes an advisory lock on
    /// this file for each device's turn (MPI ranks sharing one host's cores).
    pub serial_lock: Option<std::path::PathBuf>,
    /// Test hook: a fault in the `action`-th pass of global device `device`'s schedule.
    pub fault: Option<Fault>,
    /// Test hook: a fault in the `action`-th gradient reduction of `device`.
    pub reduce_fault: Option<Fault>,
    /// Test hook: one device's gradient of one tensor scaled before the norm, every step.
    pub grad_scale: Option<GradScale>,
    /// Longest any communicator call waits for a peer.
    pub recv_timeout: Duration,
    /// Messages a pipeline link holds.
    pub channel_bound: usize,
    /// Largest gradient bucket in bytes.
    pub bucket_bytes: usize,
    pub comm: CommKind,
    /// How the model's blocks are split into pipeline stages.
    pub balance: Balance,
    /// ZeRO-3: gather each block one block ahead of its compute.
    pub prefetch: bool,
    /// The data-parallel all-reduce of unsharded gradients (ZeRO reduce-scatters with the
    /// ring).
    pub dp_algo: Algo,
    /// How each chunk accumulates its microbatch gradients. The pairwise tree (with the tree
    /// all-reduce and power-of-two dp and m) gives the same bits for dp = 1, 2, 4, … at the
    /// same global batch.
    pub accumulation: Accumulation,
    /// What each layer's backward recomputes (the bits stay those of `none`).
    pub recompute: Recompute,
    /// f32, or bf16 mixed precision (f32 master weights and moments).
    pub precision: Precision,
    /// Time every pass on the device for the device clock (bubble, exposed communication,
    /// device-clock step). Off, no pass is timed and a step waits for each device once (the
    /// gradient norm's read of its parts and the step's losses) instead of twice (that, then
    /// the pass times); the step's costs then carry no device-clock figures and
    /// [`crate::runtime::Runtime::clock`] refuses. The bits are the same either way.
    pub device_clock: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            link: Link::nvlink(),
            tp_link: Link::nvlink(),
            serial: false,
            device_clock: true,
            serial_lock: None,
            fault: None,
            reduce_fault: None,
            grad_scale: None,
            recv_timeout: Duration::from_secs(60),
            channel_bound: 2,
            bucket_bytes: BUCKET_BYTES,
            comm: CommKind::Local,
            balance: Balance::Params,
            prefetch: true,
            dp_algo: Algo::Ring,
            accumulation: Accumulation::Sequential,
            recompute: Recompute::None,
            precision: Precision::F32,
        }
    }
}

/// Every check of a run's configuration, layout and options that needs no device, made once
/// where a run starts ([`super::Runtime::new`], [`super::Runtime::distributed`]; the engine and
/// the session build on them): the training configuration, the layout on `devices` devices
/// (with the suggestion of a valid one), the microbatch count both name, and the options the
/// layout admits.
pub(super) fn validate(
    cfg: &TrainConfig,
    mesh: &Mesh,
    opts: &RuntimeOptions,
    devices: usize,
) -> Result<()> {
    cfg.validate()?;
    mesh.validate(&cfg.model, cfg.micro.b, cfg.micro.t, devices)?;
    prices("link", &opts.link)?;
    prices("tensor-parallel link", &opts.tp_link)?;
    if cfg.grad_accum != mesh.microbatches {
        return Err(Error::Config(format!(
            "the configuration accumulates {} microbatches but the layout runs {} per replica; \
             set both to the same value",
            cfg.grad_accum, mesh.microbatches
        )));
    }
    if mesh.zero > 0 && mesh.dp > 1 && opts.dp_algo != Algo::Ring {
        return Err(Error::Config(format!(
            "ZeRO-{} reduce-scatters with the ring; the {} all-reduce applies to unsharded \
             gradients (--zero 0)",
            mesh.zero,
            opts.dp_algo.name()
        )));
    }
    if opts.accumulation == Accumulation::PairwiseTree {
        tree_fits(mesh, opts.dp_algo)?;
    }
    Ok(())
}

/// Whether link model `l` prices every message of the device clock: a bandwidth > 0 (infinite:
/// the ideal link) and a finite latency ≥ 0.
fn prices(what: &str, l: &Link) -> Result<()> {
    let bandwidth_ok = l.bandwidth_bytes_per_s > 0.0; // false for NaN
    let latency_ok = l.latency_s >= 0.0 && l.latency_s.is_finite();
    if bandwidth_ok && latency_ok {
        return Ok(());
    }
    Err(Error::Config(format!(
        "the {what} model {:?} needs a positive bandwidth and a finite latency ≥ 0, got {} B/s \
         and {} s",
        l.name, l.bandwidth_bytes_per_s, l.latency_s
    )))
}

/// Whether pairwise-tree accumulation can give layout-invariant bits on `mesh`: unsharded
/// gradients, power-of-two replicas and microbatches, the tree all-reduce between replicas.
fn tree_fits(mesh: &Mesh, algo: Algo) -> Result<()> {
    if mesh.zero > 0 && mesh.dp > 1 {
        return Err(Error::Config(format!(
            "pairwise-tree accumulation applies to unsharded gradients, not ZeRO-{}",
            mesh.zero
        )));
    }
    for (what, n) in [
        ("replicas", mesh.dp),
        ("microbatches per replica", mesh.microbatches),
    ] {
        if !n.is_power_of_two() {
            return Err(Error::Config(format!(
                "pairwise-tree accumulation needs a power-of-two number of {what}, not {n}"
            )));
        }
    }
    if mesh.dp > 1 && algo != Algo::Tree {
        return Err(Error::Config(format!(
            "pairwise-tree accumulation needs the tree all-reduce between replicas (--algo tree), \
             not the {} all-reduce",
            algo.name()
        )));
    }
    Ok(())
}
