//! Start-up: MPI's initialisation, the world (rank, size, host, library), and the split of the
//! world into groups, one [`MpiComm`] per group this rank is in.

use std::cell::RefCell;

use ::mpi::environment::Threading;
use ::mpi::topology::{Color, Communicator as _};

use super::wire::Handles;
use super::{count, MpiComm, MpiWire, Reduction, SimpleCommunicator, Universe};
use crate::comm::{GroupOptions, WireComm};
use crate::error::{Error, Result};

/// Initialises MPI for this process with `MPI_THREAD_MULTIPLE` (communicators move into
/// worker threads). Call once, first; keep the [`Universe`] until every communicator is
/// dropped (dropping it finalises MPI).
pub fn init() -> Result<Universe> {
    let Some((universe, level)) = ::mpi::initialize_with_threading(Threading::Multiple) else {
        return Err(Error::Config(
            "MPI is already initialised in this process: call comm::mpi::init once, at start-up"
                .into(),
        ));
    };
    if level < Threading::Multiple {
        return Err(Error::Config(format!(
            "the MPI library grants thread level {level:?}, but communicators move between \
             worker threads and need Multiple: use an MPI built with MPI_THREAD_MULTIPLE \
             (Open MPI: `ompi_info | grep -i thread`)"
        )));
    }
    Ok(universe)
}

/// This process's rank in `world` (= its global device id).
pub fn world_rank(world: &SimpleCommunicator) -> usize {
    world.rank() as usize
}

/// Processes in `world` (= devices of the run).
pub fn world_size(world: &SimpleCommunicator) -> usize {
    world.size() as usize
}

/// The name of the machine this process runs on (`MPI_Get_processor_name`: the hostname).
pub fn processor_name() -> Result<String> {
    ::mpi::environment::processor_name()
        .map_err(|e| Error::Config(format!("MPI's processor name is not UTF-8: {e}")))
}

/// The MPI library's version string (`MPI_Get_library_version`), for run records.
pub fn library_version() -> Result<String> {
    ::mpi::environment::library_version()
        .map(|v| v.trim_end_matches(['\0', '\n', ' ']).to_string())
        .map_err(|e| Error::Config(format!("MPI's library version is not UTF-8: {e}")))
}

/// This rank's communicator of the group `members` (world ranks in group-rank order), or
/// `None` when this rank is not a member. Collective over `world`: every world rank calls it,
/// for every group, in the same order.
pub fn mpi_group(
    world: &SimpleCommunicator,
    members: &[usize],
    opts: &GroupOptions,
    reduction: Reduction,
) -> Result<Option<MpiComm>> {
    mpi_groups(world, &[members.to_vec()], opts, reduction)
}

/// This rank's communicator of a family of disjoint groups made at once (one split of
/// `world`): e.g. every pipeline group, `groups[g]` listing group g's world ranks in
/// group-rank order. `None` when this rank is in none. Collective over `world` like
/// [`mpi_group`]; every rank checks the same arguments, so a bad family fails on all of them
/// before any waits.
pub fn mpi_groups(
    world: &SimpleCommunicator,
    groups: &[Vec<usize>],
    opts: &GroupOptions,
    reduction: Reduction,
) -> Result<Option<MpiComm>> {
    let n = world_size(world);
    // (group, position) of every world rank
    let mut place: Vec<Option<(usize, usize)>> = vec![None; n];
    for (g, members) in groups.iter().enumerate() {
        if members.is_empty() {
            return Err(Error::Config(format!("MPI group {g} has no ranks")));
        }
        for (pos, &m) in members.iter().enumerate() {
            let Some(slot) = place.get_mut(m) else {
                return Err(Error::Config(format!(
                    "MPI group {g} names world rank {m}, but the world has {n} ranks \
                     (start as many processes as devices: mpirun -n)"
                )));
            };
            if let Some((h, _)) = slot.replace((g, pos)) {
                return Err(Error::Config(format!(
                    "world rank {m} is in MPI groups {h} and {g}: groups made together must be \
                     disjoint"
                )));
            }
        }
    }
    let mine = place[world_rank(world)];
    let color = match mine {
        Some((g, _)) => Color::with_value(count(g, "group index")?),
        None => Color::undefined(),
    };
    let key = count(mine.map_or(0, |(_, pos)| pos), "group rank")?;
    let split = world.split_by_color_with_key(color, key);
    let (Some((g, pos)), Some(comm)) = (mine, split) else {
        return Ok(None);
    };
    let members = groups[g].clone();
    if comm.size() as usize != members.len() || comm.rank() as usize != pos {
        return Err(Error::Config(format!(
            "MPI split gave rank {} of {} for group {g} {members:?}, expected rank {pos}",
            comm.rank(),
            comm.size()
        )));
    }
    let wire = MpiWire {
        mpi: Handles {
            comm,
            sending: RefCell::new(Vec::new()),
            spare: RefCell::new(Vec::new()),
        },
        rank: pos,
        size: members.len(),
        timeout: opts.timeout,
        reduction,
        stopped: RefCell::new(None),
    };
    Ok(Some(WireComm::new(pos, members, opts.link, wire)))
}
