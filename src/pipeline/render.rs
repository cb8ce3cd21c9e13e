//! Schedules as pictures: rows are devices, columns are steps, cells are action labels or `.`
//! for idle. `render` places each action at its start step in the unit-cost simulation, so
//! tests can assert the picture (torchgpipe's `test_clock_cycles`):
//!
//! ```text
//! one_f_one_b(3, 4):  0F0 0F1 0F2 .   .   0B0 0F3 0B1 .   0B2 .   0B3
//!                     .   1F0 1F1 .   1B0 1F2 1B1 1F3 1B2 .   1B3 .
//!                     .   .   2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 .   .
//! ```
//!
//! The validator's error grids use list positions as columns instead (what the executor walks),
//! with the offending actions in brackets (`[2B1]`) and missing ones appended as `[2B1?]`.

use super::grid::{draw, list_grid, Cell};
use super::schedule::Schedule;
use super::simulate::simulate_unit;

/// The unit-cost timeline of `s` (column = step); a schedule that cannot run to completion is
/// drawn in list order instead (column = position in the device's list).
pub fn render(s: &Schedule) -> String {
    let Ok(sim) = simulate_unit(s) else {
        return list_grid(s, &[], &[]);
    };
    let rows = s
        .actions
        .iter()
        .enumerate()
        .map(|(d, list)| {
            let mut row: Vec<Cell> = vec![None; sim.makespan];
            for (a, &t) in list.iter().zip(&sim.start[d]) {
                row[t] = Some((s.label(d, a), false));
            }
            row
        })
        .collect();
    draw(rows)
}
