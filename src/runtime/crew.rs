//! One persistent thread per local worker, started with the runtime: a step hands each thread
//! its worker and that worker's inputs and takes both back with the result, so a step starts
//! no thread. Dropping the crew closes every thread's queue; the threads end and are joined.
//!
//! ```text
//! step: worker d + StepIn ─jobs─▶ thread d: run_step ─done─▶ (worker d, its result)
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::worker::{Failure, StepIn, Worker, WorkerRun};
use crate::error::Error;

/// A worker back from its thread, with what its step did.
pub(super) type Done = (Worker, std::result::Result<WorkerRun, Failure>);

/// One worker's thread and its two queues (one job in flight at a time).
struct Lane {
    /// The global device whose worker this thread runs.
    device: usize,
    jobs: Sender<(Worker, StepIn)>,
    done: Receiver<Done>,
    thread: JoinHandle<()>,
}

/// The persistent threads of a runtime's local workers, in worker order.
pub(super) struct Crew {
    lanes: Vec<Lane>,
}

impl Crew {
    /// One thread for each of `devices` (global device numbers, in worker order), named
    /// `triaxis-dev-{d}`; each is running when this returns.
    pub fn new(devices: &[usize]) -> crate::error::Result<Crew> {
        let lanes = devices
            .iter()
            .map(|&device| {
                let (jobs, take) = bounded::<(Worker, StepIn)>(1);
                let (give, done) = bounded::<Done>(1);
                let (up, started) = bounded::<()>(1);
                let thread = std::thread::Builder::new()
                    .name(format!("triaxis-dev-{device}"))
                    .spawn(move || {
                        // running (and named): the crew is whole when `new` returns
                        let _ = up.send(());
                        serve(take, give)
                    })
                    .map_err(|e| {
                        Error::Device(format!("cannot start device {device}'s worker thread: {e}"))
                    })?;
                started.recv().map_err(|_| {
                    Error::Device(format!(
                        "device {device}'s worker thread ended as it started"
                    ))
                })?;
                Ok(Lane {
                    device,
                    jobs,
                    done,
                    thread,
                })
            })
            .collect::<crate::error::Result<Vec<_>>>()?;
        Ok(Crew { lanes })
    }

    /// How many worker threads the crew has (one per local worker).
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Runs every worker's step on its own thread at once (`jobs` in worker order) and
    /// returns each worker with its result, in the same order. A worker whose thread is gone
    /// comes back unrun, with a failure naming its device; only a thread that vanished while
    /// holding its worker (it cannot unwind: every step runs under `catch_unwind`) loses it,
    /// and then the error says so.
    pub fn step(&self, jobs: Vec<(Worker, StepIn)>) -> std::result::Result<Vec<Done>, Error> {
        assert_eq!(jobs.len(), self.lanes.len(), "one job per worker thread");
        let mut back: Vec<Option<Done>> = Vec::with_capacity(jobs.len());
        for (lane, (w, input)) in self.lanes.iter().zip(jobs) {
            let step = input.step;
            let sent = lane.jobs.send((w, input)).map_err(|e| e.into_inner().0);
            back.push(sent.err().map(|w| {
                let error = gone(lane.device, step);
                (
                    w,
                    Err(Failure {
                        primary: true,
                        error,
                    }),
                )
            }));
        }
        let mut lost = None;
        for (lane, slot) in self.lanes.iter().zip(back.iter_mut()) {
            if slot.is_none() {
                match lane.done.recv() {
                    Ok(done) => *slot = Some(done),
                    Err(_) => lost = Some(lane.device),
                }
            }
        }
        if let Some(d) = lost {
            return Err(Error::Device(format!(
                "device {d}'s worker thread ended while it held the worker; the runtime \
                 cannot run another step: rebuild it from the last checkpoint"
            )));
        }
        Ok(back.into_iter().flatten().collect())
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        // every queue closes first (each thread's `recv` ends), then the threads are joined
        let threads: Vec<JoinHandle<()>> = self.lanes.drain(..).map(|l| l.thread).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// A worker thread: runs each job it is handed until its queue closes.
fn serve(jobs: Receiver<(Worker, StepIn)>, done: Sender<Done>) {
    for (mut w, input) in jobs.iter() {
        // run_step catches a panicking op itself; this catches one outside any op
        let r = catch_unwind(AssertUnwindSafe(|| w.run_step(&input))).unwrap_or_else(|_| {
            Err(Failure {
                primary: true,
                error: Error::Worker {
                    device: w.device,
                    stage: 0,
                    action: "?".into(),
                    step: input.step,
                    msg: "worker thread panicked".into(),
                },
            })
        });
        if done.send((w, r)).is_err() {
            return;
        }
    }
}

fn gone(device: usize, step: usize) -> Error {
    Error::Worker {
        device,
        stage: 0,
        action: "?".into(),
        step,
        msg: "its worker thread has ended".into(),
    }
}
