//! The engine of one MPI rank's device (feature `mpi`): world rank r runs global device r of
//! the layout; its pipeline, tensor- and data-parallel groups, its world group and a control
//! group are MPI sub-communicators of `world`.

use triaxis::comm::mpi::{self, Reduction, SimpleCommunicator};
use triaxis::comm::{Communicator, GroupOptions};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::Gpu;
use triaxis::mesh::Mesh;
use triaxis::runtime::{group_members, Comms};
use triaxis::step::TrainConfig;

/// Rank `rank`'s engine of `mesh` on `gpu`; every rank of `world` calls it alike.
pub fn mpi_engine(
    world: &SimpleCommunicator,
    rank: usize,
    reduction: Reduction,
    gpu: Gpu,
    cfg: TrainConfig,
    mesh: Mesh,
    opts: RuntimeOptions,
) -> anyhow::Result<Engine> {
    let group = |families: &[Vec<usize>], link| -> anyhow::Result<Box<dyn Communicator>> {
        let o = GroupOptions {
            link,
            timeout: opts.recv_timeout,
            ..GroupOptions::default()
        };
        let c = mpi::mpi_groups(world, families, &o, reduction)?
            .ok_or_else(|| anyhow::anyhow!("rank {rank} is in no group"))?;
        Ok(Box::new(c))
    };
    let [pp, tp, dp, all] = group_members(&mesh);
    let comms = Comms {
        pp: group(&pp, opts.link)?,
        tp: group(&tp, opts.tp_link)?,
        dp: group(&dp, opts.link)?,
        world: group(&all, opts.link)?,
    };
    let control = group(&all, opts.link)?;
    Ok(Engine::distributed(
        &[(rank, gpu)],
        cfg,
        mesh,
        opts,
        vec![comms],
        control,
    )?)
}
