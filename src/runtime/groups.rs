//! The communicator groups of a layout: which devices form each pipeline, tensor- and
//! data-parallel group and the world ([`group_members`], the same lists an MPI job splits its
//! world by), and those groups built in this process ([`groups`]: local or loopback).
//!
//! ```text
//! dp 2 × tp 1 × pp 2:  pipeline [0 1] [2 3]   tensor [0] [1] [2] [3]   data [0 2] [1 3]   world [0 1 2 3]
//! ```

use super::options::{CommKind, RuntimeOptions};
use super::worker::Comms;
use crate::comm::{self, Communicator, GroupOptions};
use crate::link::Link;
use crate::mesh::{Coords, Mesh};

/// The groups of a layout, by kind — pipeline (one per replica and tensor rank, rank =
/// pipeline position), tensor-parallel (per replica and stage, rank = tensor rank),
/// data-parallel (per stage and tensor rank, rank = replica), and the world (rank = device) —
/// each a list of global devices in rank order. Every device is in exactly one group of each.
pub fn group_members(mesh: &Mesh) -> [Vec<Vec<usize>>; 4] {
    let dev = |replica, stage, tp_rank| {
        mesh.device(Coords {
            replica,
            stage,
            tp_rank,
        })
    };
    let (mut pp, mut tp, mut dp) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..mesh.dp {
        for k in 0..mesh.tp {
            pp.push((0..mesh.pp).map(|s| dev(r, s, k)).collect());
        }
        for s in 0..mesh.pp {
            tp.push((0..mesh.tp).map(|k| dev(r, s, k)).collect());
        }
    }
    for s in 0..mesh.pp {
        for k in 0..mesh.tp {
            dp.push((0..mesh.dp).map(|r| dev(r, s, k)).collect());
        }
    }
    [pp, tp, dp, vec![(0..mesh.devices()).collect()]]
}

/// Every device's communicators in this process (local or loopback, as `opts.comm` says):
/// its pipeline, tensor- and data-parallel groups and the world.
pub fn groups(mesh: &Mesh, opts: &RuntimeOptions) -> Vec<Comms> {
    let n = mesh.devices();
    let make = |devices: &[usize], link: &Link| -> Vec<Box<dyn Communicator>> {
        let o = GroupOptions {
            timeout: opts.recv_timeout,
            channel_bound: opts.channel_bound,
            link: *link,
        };
        match opts.comm {
            CommKind::Local => comm::local_group(devices, &o)
                .into_iter()
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .collect(),
            CommKind::Loopback => comm::loopback_group(devices, &o)
                .into_iter()
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .collect(),
        }
    };
    let mut slots: Vec<[Option<Box<dyn Communicator>>; 4]> =
        (0..n).map(|_| [None, None, None, None]).collect();
    for (which, family) in group_members(mesh).iter().enumerate() {
        let link = if which == 1 {
            &opts.tp_link
        } else {
            &opts.link
        };
        for devices in family {
            for (d, c) in devices.iter().zip(make(devices, link)) {
                slots[*d][which] = Some(c);
            }
        }
    }
    slots
        .into_iter()
        .map(|[pp, tp, dp, world]| Comms {
            pp: pp.expect("every device has a pipeline group"),
            tp: tp.expect("every device has a tensor-parallel group"),
            dp: dp.expect("every device has a data-parallel group"),
            world: world.expect("every device is in the world"),
        })
        .collect()
}
