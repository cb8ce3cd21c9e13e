//! Collectives built from point-to-point messages between ranks: the ring (reduce-scatter,
//! all-gather, both), broadcast and the byte all-gather, for any transport that can move
//! bytes from one rank to another ([`Wire`]: the loopback double's channels, MPI's sends).
//! A wire has two lanes to every peer, one for collectives and one for tagged messages, each
//! in order, so the two never interleave.
//!
//! The ring follows `collective::rounds` exactly: in round s rank r sends its current chunk
//! `(r−s−1) mod d` to rank r+1 and adds chunk `(r−s−2) mod d` from rank r−1 into its own copy
//! (all-gather: copies), so chunk c is summed `x(c+1) + … + x(c)` — the host ring's order, the
//! same bits. With `average` the owner divides its chunk once, after the last addition.
//!
//! ```text
//!   rank r, each round:  put(right, own[send chunk])   take(left) ─▶ own[recv chunk] (+)=
//! ```

use std::time::Instant;

use crate::collective::{rounds, Entry, EntryKind, Phases, Stamp};
use crate::error::Result;

/// The two ordered streams from one rank to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The messages of collectives (this module's functions).
    Coll,
    /// Tagged point-to-point messages (`Communicator::send`).
    Msgs,
}

/// Moves bytes between the ranks of a group. `put` must not wait for the matching `take`
/// (the ring puts before it takes on every rank).
pub(crate) trait Wire {
    fn put(&mut self, lane: Lane, to: usize, bytes: Vec<u8>) -> Result<()>;
    fn take(&mut self, lane: Lane, from: usize) -> Result<Vec<u8>>;
    /// An empty buffer for a message of `len` bytes (a transport may hand back one a finished
    /// message used: large fresh allocations cost a page fault per page).
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        Vec::with_capacity(len)
    }
    /// A received message's bytes are no longer needed.
    fn recycle(&mut self, bytes: Vec<u8>) {
        drop(bytes);
    }
}

/// `x` as little-endian bytes in a buffer from `wire`.
fn wire_bytes(wire: &mut dyn Wire, x: &[f32]) -> Vec<u8> {
    let mut b = wire.buffer(4 * x.len());
    if cfg!(target_endian = "little") {
        b.extend_from_slice(bytemuck::cast_slice::<f32, u8>(x));
    } else {
        b.extend(x.iter().flat_map(|v| v.to_le_bytes()));
    }
    b
}

/// The floats as little-endian bytes: one copy (a memcpy on little-endian machines).
pub(crate) fn to_bytes(x: &[f32]) -> Vec<u8> {
    if cfg!(target_endian = "little") {
        bytemuck::cast_slice::<f32, u8>(x).to_vec()
    } else {
        x.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

/// The inverse of [`to_bytes`] (a trailing partial float is dropped).
pub(crate) fn from_bytes(b: &[u8]) -> Vec<f32> {
    let n = b.len() / 4;
    if cfg!(target_endian = "little") {
        let mut out = vec![0f32; n];
        bytemuck::cast_slice_mut::<f32, u8>(&mut out).copy_from_slice(&b[..4 * n]);
        out
    } else {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

/// The ring on rank `r` of `d` over `buf` with chunk k = `bounds[k]..bounds[k+1]`; returns
/// the hops this rank sent.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ring(
    wire: &mut dyn Wire,
    r: usize,
    d: usize,
    buf: &mut [f32],
    bounds: &[usize],
    phases: Phases,
    average: bool,
    stamp: &Stamp,
) -> Result<Vec<Entry>> {
    let (right, left) = ((r + 1) % d, (r + d - 1) % d);
    let rs_last = (phases != Phases::AllGather).then(|| d.saturating_sub(2));
    let mut entries = Vec::new();
    for round in rounds(r, d, phases) {
        let t = Instant::now();
        let send = &buf[bounds[round.send]..bounds[round.send + 1]];
        let bytes = 4 * send.len() as u64;
        let out = wire_bytes(wire, send);
        wire.put(Lane::Coll, right, out)?;
        let got = wire.take(Lane::Coll, left)?;
        let own = &mut buf[bounds[round.recv]..bounds[round.recv + 1]];
        if got.len() != 4 * own.len() {
            return Err(crate::Error::Config(format!(
                "{}: rank {r} expected {} elements of chunk {} from rank {left}, got {}",
                stamp.collective,
                own.len(),
                round.recv,
                got.len() / 4
            )));
        }
        // straight from the message's bytes (little-endian f32s), no copy in between
        let floats = got
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        if round.add {
            own.iter_mut().zip(floats).for_each(|(x, acc)| *x += acc);
            if average && Some(round.round) == rs_last {
                let dd = d as f32;
                own.iter_mut().for_each(|x| *x /= dd);
            }
        } else {
            own.iter_mut().zip(floats).for_each(|(x, v)| *x = v);
        }
        wire.recycle(got);
        let kind = EntryKind::Hop {
            to: right,
            round: round.round,
        };
        entries.push(stamp.entry(r, kind, bytes, t.elapsed().as_secs_f64()));
    }
    Ok(entries)
}

/// The hops rank `r` of `d` sends in the ring over `bounds` (what [`ring`] records), for a
/// collective that ran some other way in `wall` seconds (spread evenly over the hops): the
/// ledger's byte counts and link clock then read as for the ring.
pub(crate) fn ring_hops(
    r: usize,
    d: usize,
    bounds: &[usize],
    phases: Phases,
    stamp: &Stamp,
    wall: f64,
) -> Vec<Entry> {
    let rounds = rounds(r, d, phases);
    let each = wall / rounds.len().max(1) as f64;
    rounds
        .iter()
        .map(|x| {
            let bytes = 4 * (bounds[x.send + 1] - bounds[x.send]) as u64;
            let kind = EntryKind::Hop {
                to: (r + 1) % d,
                round: x.round,
            };
            stamp.entry(r, kind, bytes, each)
        })
        .collect()
}

/// `root` sends its buffer to every other rank; returns the hops this rank sent.
pub(crate) fn broadcast(
    wire: &mut dyn Wire,
    r: usize,
    d: usize,
    buf: &mut Vec<f32>,
    root: usize,
    stamp: &Stamp,
) -> Result<Vec<Entry>> {
    if r != root {
        *buf = from_bytes(&wire.take(Lane::Coll, root)?);
        return Ok(Vec::new());
    }
    let mut entries = Vec::with_capacity(d);
    let bytes = to_bytes(buf);
    for to in (0..d).filter(|&q| q != root) {
        let t = Instant::now();
        wire.put(Lane::Coll, to, bytes.clone())?;
        let kind = EntryKind::Hop { to, round: 0 };
        entries.push(stamp.entry(r, kind, bytes.len() as u64, t.elapsed().as_secs_f64()));
    }
    Ok(entries)
}

/// Every rank sends `mine` to every other; returns all ranks' bytes in rank order.
pub(crate) fn all_gather_bytes(
    wire: &mut dyn Wire,
    r: usize,
    d: usize,
    mine: Vec<u8>,
) -> Result<Vec<Vec<u8>>> {
    for to in (0..d).filter(|&q| q != r) {
        wire.put(Lane::Coll, to, mine.clone())?;
    }
    let mut out = Vec::with_capacity(d);
    for from in 0..d {
        if from == r {
            out.push(mine.clone());
        } else {
            out.push(wire.take(Lane::Coll, from)?);
        }
    }
    Ok(out)
}
