//! One runtime for every layout: a [`crate::mesh::Mesh`] is lowered to one list of ops per
//! device ([`ir`], [`lower()`]), the lists are checked ([`check()`]), and one worker per device runs
//! its list, owning only its device and talking to other devices only through communicators
//! ([`crate::comm`]).
//!
//! ```text
//! Mesh + Schedule + chunk shapes ─lower─▶ Plan { Program per device } ─check─▶ workers
//! ```

pub mod check;
mod chunk;
mod crew;
mod exchange;
mod exec;
pub mod fault;
mod groups;
pub mod ir;
pub mod lower;
mod norm;
mod options;
mod pass_times;
mod precision;
pub mod replay;
mod report;
mod state;
mod timeline;
mod turn;
mod worker;

pub use check::check;
pub use chunk::ChunkInfo;
pub use exec::{CommKind, Runtime, RuntimeOptions, RuntimeStep};
pub use fault::{Fault, FaultKind, GradScale};
pub use groups::{group_members, groups};
pub use ir::{ChunkShape, Mark, Op, Plan, Program};
pub use lower::lower;
pub use pass_times::PassTimes;
pub use timeline::Summary;
pub use worker::{Comms, OpRecord, Worker, WorkerRun};
