//! Pass timing without a host wait per pass: every timed pass writes GPU timestamps at its start
//! and end into the next pair of one query set per device, and the pairs are resolved and read
//! back together when the caller asks for them ([`Gpu::pass_times`]) — once per training step.
//! Where the adapter has no timestamp queries, the device clock falls back to the host's wall
//! time from submit to completion, on an otherwise idle device (a wait before and after each
//! timed pass, as the pass must run alone to be timed).
//!
//! Host round trips are counted ([`Gpu::counts`]): every queue submit, and every wait for the
//! device (a download's, a [`Gpu::sync`], the timestamps' readback).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Gpu, Record, View};
use crate::error::{Error, Result};
use crate::memory::{Allocation, Category};

/// Timestamp pairs one query set holds; a device that times more passes before reading them
/// back reads the first `PAIRS` early (one extra wait) and reuses the set.
const PAIRS: u32 = 256;

/// Submits, waits and dispatches of one device (all its clones), since it was opened.
#[derive(Default, Debug)]
pub struct Counts {
    submits: AtomicU64,
    waits: AtomicU64,
    dispatches: AtomicU64,
}

/// What a device did, counted: queue submits, host waits for the device, compute dispatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    pub submits: u64,
    pub waits: u64,
    pub dispatches: u64,
}

impl std::ops::Sub for Tally {
    type Output = Tally;
    /// The counts between two readings (`later - earlier`).
    fn sub(self, earlier: Tally) -> Tally {
        Tally {
            submits: self.submits - earlier.submits,
            waits: self.waits - earlier.waits,
            dispatches: self.dispatches - earlier.dispatches,
        }
    }
}

impl Counts {
    /// One queue submit holding `dispatches` compute dispatches.
    pub(super) fn submit(&self, dispatches: usize) {
        self.submits.fetch_add(1, Ordering::Relaxed);
        self.dispatches
            .fetch_add(dispatches as u64, Ordering::Relaxed);
    }
    pub(super) fn wait(&self) {
        self.waits.fetch_add(1, Ordering::Relaxed);
    }
    /// The counts so far.
    pub fn read(&self) -> Tally {
        Tally {
            submits: self.submits.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            dispatches: self.dispatches.load(Ordering::Relaxed),
        }
    }
}

/// The query set, the buffer it resolves into, a mapped readback, and the pass times taken so
/// far in this round (read back early, or measured on the wall where there are no timestamps).
#[derive(Default)]
pub(super) struct Timer {
    set: Option<QuerySet>,
    /// Pairs written into the query set and not yet read back.
    pending: u32,
    /// Pass times of this round that are already known, in the order the passes were timed.
    done: Vec<Duration>,
}

struct QuerySet {
    queries: wgpu::QuerySet,
    resolve: View,
    readback: wgpu::Buffer,
    /// The readback's bytes in the memory ledger.
    _counted: Allocation,
}

impl Gpu {
    /// Records `ops` into one compute pass and submits it without waiting; returns the index
    /// of its duration in what [`Gpu::pass_times`] returns next. Without timestamp queries
    /// the pass runs alone and is timed on the host's wall clock (see the module's doc).
    pub fn run_stamped(&self, ops: &[impl Record]) -> Result<usize> {
        let mut timer = self.timer()?;
        if !self.has_timestamps() {
            self.sync()?;
            let t0 = Instant::now();
            self.run(ops)?;
            self.sync()?;
            timer.done.push(t0.elapsed());
            return Ok(timer.done.len() - 1);
        }
        if timer.pending == PAIRS {
            self.read_back(&mut timer)?;
        }
        let t = &mut *timer;
        let set = t.set.get_or_insert_with(|| self.query_set());
        let pair = t.pending;
        self.submit_pass(
            ops,
            Some(wgpu::ComputePassTimestampWrites {
                query_set: &set.queries,
                beginning_of_pass_write_index: Some(2 * pair),
                end_of_pass_write_index: Some(2 * pair + 1),
            }),
        )?;
        t.pending += 1;
        Ok(t.done.len() + pair as usize)
    }

    /// Records `ops` into one pass: timed as [`Gpu::run_stamped`] (the index of its duration
    /// returned) when `stamped`, else as [`Gpu::run`].
    pub fn run_pass(&self, ops: &[impl Record], stamped: bool) -> Result<Option<usize>> {
        match stamped {
            true => self.run_stamped(ops).map(Some),
            false => self.run(ops).map(|()| None),
        }
    }

    /// The durations of every pass timed since the last call, in order; one wait for the
    /// device (none if nothing is pending on the query set).
    pub fn pass_times(&self) -> Result<Vec<Duration>> {
        let mut timer = self.timer()?;
        self.read_back(&mut timer)?;
        Ok(std::mem::take(&mut timer.done))
    }

    /// Forgets every pass timed and not yet read (a step that failed part-way), without a wait.
    pub fn discard_pass_times(&self) -> Result<()> {
        let mut timer = self.timer()?;
        timer.pending = 0;
        timer.done.clear();
        Ok(())
    }

    /// Runs `ops` alone and returns their device duration (reads back every pass timed
    /// before it too, so it is for callers that time one pass at a time).
    pub fn run_timed(&self, ops: &[impl Record]) -> Result<Duration> {
        let i = self.run_stamped(ops)?;
        self.pass_times()?
            .get(i)
            .copied()
            .ok_or_else(|| Error::Device(format!("{}: pass time {i} missing", self.label)))
    }

    fn timer(&self) -> Result<std::sync::MutexGuard<'_, Timer>> {
        self.timer
            .lock()
            .map_err(|_| Error::Device("timer poisoned".into()))
    }

    fn query_set(&self) -> QuerySet {
        let bytes = 16 * PAIRS as u64;
        QuerySet {
            queries: self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("pass times"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * PAIRS,
            }),
            resolve: self.buffer_with_usage("timestamps", bytes, wgpu::BufferUsages::QUERY_RESOLVE),
            readback: self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            _counted: Allocation::new(&self.memory, Category::Staging, bytes),
        }
    }

    /// Resolves the pending pairs, waits for them, appends their durations to `done`.
    fn read_back(&self, t: &mut Timer) -> Result<()> {
        let (n, Some(set)) = (t.pending, &t.set) else {
            return Ok(());
        };
        if n == 0 {
            return Ok(());
        }
        let bytes = 16 * n as u64;
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.resolve_query_set(&set.queries, 0..2 * n, &set.resolve.buf, 0);
        enc.copy_buffer_to_buffer(
            &set.resolve.buf,
            set.resolve.byte_offset(),
            &set.readback,
            0,
            bytes,
        );
        let ticks: Vec<u64> = self.read_after(enc, &set.readback, bytes, "timestamps readback")?;
        let period = self.queue.get_timestamp_period() as f64;
        t.done.extend(
            ticks
                .chunks(2)
                .map(|p| Duration::from_nanos((p[1].saturating_sub(p[0]) as f64 * period) as u64)),
        );
        t.pending = 0;
        Ok(())
    }
}
