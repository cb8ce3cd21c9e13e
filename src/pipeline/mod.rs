//! Pipeline parallelism as data. A schedule is `Vec<Vec<Action>>`, one ordered list per device,
//! built by pure functions; the same value feeds the validator (`validate`), the unit-cost
//! simulator (`simulate`), the grid printer (`render`) and the runtime, whose one replay is
//! the device clock (`runtime::replay`).
//!
//! ```text
//! schedule  Action {F|B|W, micro, chunk}; gpipe, one_f_one_b, interleaved, zero_bubble_h1,
//!           zero_bubble_v
//! validate  exactly-once, order on a device, FIFO channels, deadlock under a channel bound
//! render    rows = devices, columns = unit-cost steps: "0F0 0F1 .   .   0B0 0B1"
//! simulate  simulate_unit (bubble, peak activations), simulate_costed (bubble at F, B, W costs)
//! ```

pub mod event;
mod grid;
pub mod partition;
pub mod render;
pub mod schedule;
pub mod simulate;
pub mod theory;
pub mod validate;

pub use render::render;
pub use schedule::{
    gpipe, interleaved, one_f_one_b, zero_bubble_h1, Action, Flow, Kind, Msg, Schedule,
    ScheduleKind,
};
pub use simulate::{peak_activations, simulate_costed, simulate_unit, SimResult};
// the link model lives in `crate::link`; re-exported for the pipeline's users
pub use crate::link::Link;
pub use schedule::vshape::{dual_pipe_v, zero_bubble_v};
pub use validate::validate;
