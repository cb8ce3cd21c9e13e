//! The communication ledger: every transfer a collective makes, and the exact byte counts the
//! ring is expected to move.
//!
//! A host-staged collective moves data three ways, each recorded as one [`Entry`]:
//!
//! ```text
//!   device r ──Download──▶ host r ──Hop{to: r+1}──▶ host r+1 ──Upload──▶ device r+1
//! ```
//!
//! `Hop`s are the transfers a real device-to-device link would carry; their `link_time` is the
//! [`Link`] model's cost (`link.transfer_time(bytes)`), and [`Ledger::link_clock`] turns them
//! into the collective's duration on the model's device clock. Downloads and uploads exist only
//! because this crate stages through the host; they carry measured wall time and `link_time = 0`.
//!
//! Exact ring volume. Chunk k of n elements over d ranks is `[k·n/d, (k+1)·n/d)` (floor
//! boundaries). In the ring reduce-scatter rank r sends every chunk but its own (`r`); in the
//! ring all-gather every chunk but `(r+1) % d`. So rank r sends
//! `4·(2n − |c_r| − |c_(r+1)|)` bytes in a ring all-reduce: exactly `2(d−1)/d·S` (S = 4n bytes)
//! when d divides n, within 8 bytes of it otherwise, and the group as a whole always sends
//! exactly `2(d−1)·S`.

use std::ops::Range;

use crate::link::Link;

/// What one ledger entry moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Device `rank` → host (staging in).
    Download,
    /// Host rank `from` → host rank `to` during `round` of the algorithm: the transfer a
    /// device-to-device link would carry. Rounds run one after another; hops of one round
    /// run concurrently.
    Hop { to: usize, round: usize },
    /// Host → device `rank` (staging out).
    Upload,
}

/// One recorded transfer.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// [`Ledger::step`] when the collective ran (the training step, set by the caller).
    pub step: usize,
    /// Index of the collective call in this ledger (0, 1, …).
    pub call: usize,
    /// The algorithm: "ring_all_reduce", "naive_all_reduce", "ring_reduce_scatter",
    /// "ring_all_gather", "broadcast".
    pub collective: &'static str,
    /// Device ids of ranks 0..d ([`Ledger::group`], or 0..d when that is empty).
    pub group: Vec<usize>,
    /// The sending rank for `Hop` and `Download`, the receiving rank for `Upload`.
    pub rank: usize,
    pub kind: EntryKind,
    pub bytes: u64,
    /// Measured seconds: staging copy time, or for a ring hop from the sender's send to the
    /// receiver taking the chunk (includes waiting for a slow peer).
    pub wall: f64,
    /// Seconds on the link model's device clock: `link.transfer_time(bytes)` for hops, 0 for
    /// host staging.
    pub link_time: f64,
}

impl Entry {
    pub fn is_hop(&self) -> bool {
        matches!(self.kind, EntryKind::Hop { .. })
    }
    /// Sort key that makes ledgers independent of thread timing:
    /// call, then downloads, hops by round, uploads, then rank (and receiver).
    pub(crate) fn order(&self) -> (usize, usize, usize, usize, usize) {
        let (k, round, to) = match self.kind {
            EntryKind::Download => (0, 0, 0),
            EntryKind::Hop { round, to } => (1, round, to),
            EntryKind::Upload => (2, 0, 0),
        };
        (self.call, k, round, self.rank, to)
    }
}

/// Every transfer of every collective run with it, in a deterministic order.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    pub entries: Vec<Entry>,
    /// Stamped on new entries; the caller sets it to the training step.
    pub step: usize,
    /// Device ids of ranks 0..d, stamped on new entries; empty means 0..d. A collective over a
    /// group whose size differs from a non-empty `group` is refused.
    pub group: Vec<usize>,
    /// Collective calls recorded so far.
    pub calls: usize,
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// The entries of training step `step`, as a ledger of their own.
    pub fn for_step(&self, step: usize) -> Ledger {
        Ledger {
            entries: self
                .entries
                .iter()
                .filter(|e| e.step == step)
                .cloned()
                .collect(),
            step,
            group: self.group.clone(),
            calls: self.calls,
        }
    }

    /// Bytes carried by hops (rank to rank), summed over all ranks.
    pub fn hop_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.is_hop())
            .map(|e| e.bytes)
            .sum()
    }

    /// Hop bytes sent by each rank 0..d.
    pub fn sent_by_rank(&self, d: usize) -> Vec<u64> {
        let mut out = vec![0u64; d];
        for e in self.entries.iter().filter(|e| e.is_hop()) {
            if let Some(b) = out.get_mut(e.rank) {
                *b += e.bytes;
            }
        }
        out
    }

    /// Bytes of host staging (downloads + uploads).
    pub fn staged_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| !e.is_hop())
            .map(|e| e.bytes)
            .sum()
    }

    /// Duration of all recorded collectives on the link model's device clock: calls and rounds
    /// run one after another, the hops of one round concurrently (each on its own link), so each
    /// round costs its slowest hop.
    pub fn link_clock(&self) -> f64 {
        let mut rounds: Vec<((usize, usize), f64)> = Vec::new();
        for e in &self.entries {
            if let EntryKind::Hop { round, .. } = e.kind {
                match rounds.iter_mut().find(|(k, _)| *k == (e.call, round)) {
                    Some((_, t)) => *t = t.max(e.link_time),
                    None => rounds.push(((e.call, round), e.link_time)),
                }
            }
        }
        rounds.iter().map(|(_, t)| t).sum()
    }
}

impl Ledger {
    /// An empty ledger of this one's group and step that numbers the group's next call: a
    /// call records into it, and its entries are then added here.
    pub(crate) fn next_call(&self) -> Ledger {
        Ledger {
            step: self.step,
            group: self.group.clone(),
            calls: self.calls,
            entries: Vec::new(),
        }
    }

    /// Records one point-to-point send of `bytes` from `rank` to `to` in a group of `d` ranks,
    /// which took `secs` on the host, as a call of its own.
    pub(crate) fn record_send(
        &mut self,
        rank: usize,
        to: usize,
        d: usize,
        bytes: u64,
        secs: f64,
        link: &Link,
    ) -> crate::Result<()> {
        let mut l = self.next_call();
        let stamp = l.begin("send", d, link)?;
        let e = stamp.entry(rank, EntryKind::Hop { to, round: 0 }, bytes, secs);
        self.calls += 1;
        self.entries.push(e);
        Ok(())
    }

    /// Starts a collective call over `d` ranks: checks the group and numbers the call.
    pub(crate) fn begin<'a>(
        &mut self,
        collective: &'static str,
        d: usize,
        link: &'a Link,
    ) -> crate::Result<Stamp<'a>> {
        let group = if self.group.is_empty() {
            (0..d).collect()
        } else if self.group.len() == d {
            self.group.clone()
        } else {
            return Err(crate::Error::Config(format!(
                "{collective}: ledger group {:?} has {} device ids but the collective has {d} ranks",
                self.group,
                self.group.len()
            )));
        };
        self.calls += 1;
        Ok(Stamp {
            collective,
            group,
            step: self.step,
            call: self.calls - 1,
            link,
        })
    }

    /// Appends one call's entries in timing-independent order.
    pub(crate) fn record(&mut self, mut entries: Vec<Entry>) {
        entries.sort_by_key(|e| e.order());
        self.entries.extend(entries);
    }
}

/// Chunk `k` of `n` elements split over `d` ranks: `[k·n/d, (k+1)·n/d)` with floor boundaries.
/// Lengths differ by at most one; some are empty when n < d. (`d ≥ 1`, `k < d`.)
pub fn chunk(n: usize, d: usize, k: usize) -> Range<usize> {
    let at = |k: usize| (k as u128 * n as u128 / d.max(1) as u128) as usize;
    at(k)..at(k + 1)
}

/// Bytes rank `r` sends in a ring reduce-scatter of `n` f32s over `d` ranks: every chunk but
/// its own, `4·(n − |c_r|)`.
pub fn ring_reduce_scatter_rank_bytes(n: usize, d: usize, r: usize) -> u64 {
    4 * (n - chunk(n, d, r).len()) as u64
}

/// Bytes rank `r` sends in a ring all-gather: every chunk but `(r+1) % d`'s,
/// `4·(n − |c_(r+1)|)`.
pub fn ring_all_gather_rank_bytes(n: usize, d: usize, r: usize) -> u64 {
    4 * (n - chunk(n, d, (r + 1) % d.max(1)).len()) as u64
}

/// Bytes rank `r` sends in a ring all-reduce (reduce-scatter + all-gather).
pub fn ring_all_reduce_rank_bytes(n: usize, d: usize, r: usize) -> u64 {
    ring_reduce_scatter_rank_bytes(n, d, r) + ring_all_gather_rank_bytes(n, d, r)
}

/// Bytes each rank sends in a ring all-reduce of `n` f32s over `d` ranks: exactly
/// `2(d−1)/d·S` with S = 4n when d divides n (0 for d = 1). For uneven chunks ranks differ by
/// a few bytes and this is the busiest rank's count, the one that sets the ring's time; see
/// [`ring_all_reduce_rank_bytes`] for each rank and [`ring_all_reduce_group_bytes`] for the sum.
pub fn ring_all_reduce_bytes(n: usize, d: usize) -> u64 {
    (0..d)
        .map(|r| ring_all_reduce_rank_bytes(n, d, r))
        .max()
        .unwrap_or(0)
}

/// Bytes the whole group sends in a ring all-reduce: always exactly `2(d−1)·S`, S = 4n.
pub fn ring_all_reduce_group_bytes(n: usize, d: usize) -> u64 {
    2 * d.saturating_sub(1) as u64 * 4 * n as u64
}

/// Builds entries for one collective call.
pub(crate) struct Stamp<'a> {
    pub collective: &'static str,
    pub group: Vec<usize>,
    pub step: usize,
    pub call: usize,
    pub link: &'a Link,
}

impl Stamp<'_> {
    pub fn entry(&self, rank: usize, kind: EntryKind, bytes: u64, wall: f64) -> Entry {
        let link_time = match kind {
            EntryKind::Hop { .. } => self.link.transfer_time(bytes),
            _ => 0.0,
        };
        Entry {
            step: self.step,
            call: self.call,
            collective: self.collective,
            group: self.group.clone(),
            rank,
            kind,
            bytes,
            wall,
            link_time,
        }
    }
}
