//! The train example as one rank of an MPI job (feature `mpi`): world rank r runs global
//! device r of the layout, on one device of its own; its pipeline, tensor- and data-parallel
//! groups and a control group are MPI sub-communicators. Every check that can fail on one
//! rank is made on every rank before any device work: the world size against dp · tp · pp, a
//! hash of the command line (ranks that disagree stop); `--devices N` must be the world size
//! (checked with the layout before this starts).

use crate::interrupt::Signal;
use triaxis::comm::mpi::{self, MpiComm, Reduction, SimpleCommunicator, Universe};
use triaxis::comm::{Communicator, GroupOptions};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::step::TrainConfig;

/// This process's place in the MPI job.
pub struct MpiRun {
    world: SimpleCommunicator,
    pub rank: usize,
    pub size: usize,
    pub reduction: Reduction,
    /// Every rank's host, in rank order.
    pub hosts: Vec<String>,
    pub library: String,
    /// Every rank's adapter (name, backend, device type, driver, driver info), in rank order,
    /// once [`MpiRun::check_adapters`] has gathered them.
    pub adapters: Vec<[String; 5]>,
    /// Agreement between steps (a stop request on any rank stops every rank).
    flags: MpiComm,
    /// Finalises MPI when dropped: the last field, so after the communicators above (the
    /// engine's are dropped before this whole struct: it is created first).
    _universe: Universe,
}

fn world_opts(timeout: std::time::Duration) -> GroupOptions {
    GroupOptions {
        timeout,
        ..GroupOptions::default()
    }
}

impl MpiRun {
    /// Initialises MPI and checks the job against the layout and the command line.
    pub fn start(mesh: &Mesh, reduction: &str, args: &str) -> anyhow::Result<MpiRun> {
        let universe = mpi::init()?;
        let world = universe.world();
        let (rank, size) = (mpi::world_rank(&world), mpi::world_size(&world));
        let reduction = Reduction::by_name(reduction.trim())?;
        let all: Vec<usize> = (0..size).collect();
        let opts = world_opts(std::time::Duration::from_secs(60));
        let mut flags = mpi::mpi_group(&world, &all, &opts, Reduction::Ordered)?
            .ok_or_else(|| anyhow::anyhow!("rank {rank} is not in the world"))?;
        let host = mpi::processor_name()?;
        // every rank's host and command-line hash, on every rank
        let mine = format!("{host}\n{}", triaxis::step::checksum_bytes(args.as_bytes()));
        let got = flags.all_gather_bytes(mine.into_bytes())?;
        let (mut hosts, mut hashes) = (Vec::new(), Vec::new());
        for b in got {
            let s = String::from_utf8_lossy(&b).to_string();
            let (h, x) = s.split_once('\n').unwrap_or((&s, ""));
            hosts.push(h.to_string());
            hashes.push(x.to_string());
        }
        if size != mesh.devices() {
            anyhow::bail!(
                "the MPI world has {size} ranks but {} needs dp · tp · pp = {} (one rank per \
                 device); launch with mpirun -n {}",
                mesh.describe(),
                mesh.devices(),
                mesh.devices()
            );
        }
        let differ: Vec<usize> = (0..size).filter(|&r| hashes[r] != hashes[0]).collect();
        if !differ.is_empty() {
            anyhow::bail!(
                "ranks {differ:?} were started with a different command line from rank 0's: \
                 every rank must run the same configuration"
            );
        }
        Ok(MpiRun {
            world,
            rank,
            size,
            reduction,
            hosts,
            library: mpi::library_version()?.trim().to_string(),
            adapters: Vec::new(),
            flags,
            _universe: universe,
        })
    }

    /// This rank's device and an evaluation device: one virtual device each on the chosen
    /// adapter, or with `--devices all` the adapter of this rank's index on its host.
    pub fn open_devices(
        &self,
        devices: &str,
        choice: &AdapterChoice,
    ) -> anyhow::Result<(Gpu, Gpu)> {
        if devices == "all" {
            let local = self.hosts[..self.rank]
                .iter()
                .filter(|h| **h == self.hosts[self.rank])
                .count();
            let n = triaxis::gpu::list_adapters(choice.backends).len().max(1);
            let g = Gpu::open(&AdapterChoice {
                index: Some(local % n),
                software: false,
                ..choice.clone()
            })?;
            return Ok((g.clone(), g));
        }
        let mut v = Gpu::open_virtual(choice, 2)?;
        let eval = v.pop().expect("two devices");
        Ok((v.pop().expect("two devices"), eval))
    }

    /// Gathers every rank's adapter on every rank (for the record), then refuses a job whose
    /// ranks run on different backends or drivers (their kernels round differently, so the
    /// ranks' results would disagree); adapters that differ only by name get a warning. Every
    /// rank reads the same list, so every rank refuses alike.
    pub fn check_adapters(&mut self, gpu: &Gpu) -> anyhow::Result<()> {
        let i = &gpu.info;
        let mine = [
            i.name.clone(),
            format!("{:?}", i.backend),
            format!("{:?}", i.device_type),
            i.driver.clone(),
            i.driver_info.clone(),
        ];
        let all = self.flags.all_gather_bytes(mine.join("\n").into_bytes())?;
        self.adapters = all
            .iter()
            .map(|b| {
                let s = String::from_utf8_lossy(b);
                let mut f = s.split('\n').map(str::to_string);
                std::array::from_fn(|_| f.next().unwrap_or_default())
            })
            .collect();
        let first = &self.adapters[0];
        let show = |r: usize| {
            let a = &self.adapters[r];
            format!(
                "rank {r} on {}: {} / {} (driver {} {})",
                self.hosts[r], a[0], a[1], a[3], a[4]
            )
        };
        let differ: Vec<usize> = (1..self.size)
            .filter(|&r| self.adapters[r][1..] != first[1..])
            .collect();
        if !differ.is_empty() {
            let lines: Vec<String> = std::iter::once(0).chain(differ).map(show).collect();
            anyhow::bail!(
                "the ranks run on different backends or drivers, so their results would \
                 disagree:\n  {}\nrun every rank on the same backend and driver (--backend, \
                 WGPU_BACKEND)",
                lines.join("\n  ")
            );
        }
        let named: Vec<usize> = (1..self.size)
            .filter(|&r| self.adapters[r][0] != first[0])
            .collect();
        if !named.is_empty() && self.rank == 0 {
            let lines: Vec<String> = std::iter::once(0).chain(named).map(show).collect();
            eprintln!(
                "warning: the ranks run on different adapters (same backend and driver):\n  {}",
                lines.join("\n  ")
            );
        }
        Ok(())
    }

    /// The engine of this rank's device.
    pub fn engine(
        &self,
        gpu: Gpu,
        cfg: TrainConfig,
        mesh: Mesh,
        opts: RuntimeOptions,
    ) -> anyhow::Result<Engine> {
        crate::mpi_engine::mpi_engine(&self.world, self.rank, self.reduction, gpu, cfg, mesh, opts)
    }

    /// The stop request every rank follows at this step boundary: the signal of the lowest
    /// rank that has one, or `None` (every rank gets the same answer at the same step).
    pub fn agree(&mut self, mine: Option<Signal>) -> anyhow::Result<Option<Signal>> {
        let all = self
            .flags
            .all_gather_bytes(vec![mine.map_or(0, Signal::code)])?;
        // the lowest rank's signal: every rank reads the same list, so all stop alike (same
        // record, same exit code), whichever of them saw a signal first
        Ok(all
            .iter()
            .find_map(|b| b.first().copied().and_then(Signal::from_code)))
    }

    /// What the run record says about the job.
    pub fn record(&self, mesh: &Mesh) -> serde_json::Value {
        let ranks: Vec<serde_json::Value> = (0..self.size)
            .map(|r| {
                let c = mesh.coords(r);
                let a = self.adapters.get(r);
                let adapter = a.map(|a| {
                    serde_json::json!({
                        "name": a[0], "backend": a[1], "device_type": a[2],
                        "driver": a[3], "driver_info": a[4],
                    })
                });
                serde_json::json!({
                    "rank": r, "host": self.hosts[r], "replica": c.replica,
                    "stage": c.stage, "tp_rank": c.tp_rank, "adapter": adapter,
                })
            })
            .collect();
        serde_json::json!({
            "world_size": self.size,
            "library": self.library,
            "reduction": self.reduction.name(),
            "summation_order": match self.reduction {
                Reduction::Ordered => "fixed: the project's ring and trees on MPI messages (the in-process bits)",
                Reduction::Native => "left to the MPI library (MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather)",
            },
            "ranks": ranks,
        })
    }
}
