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

use super::schedule::Schedule;
use super::simulate::simulate_unit;

/// One cell of a grid: a label, whether it is marked, or idle.
type Cell = Option<(String, bool)>;

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

/// The list-order grid of `s` with the actions at `marks` (device, position) in brackets and
/// `ghosts` (device, label) appended to their rows as `[label?]`.
pub(crate) fn list_grid(
    s: &Schedule,
    marks: &[(usize, usize)],
    ghosts: &[(usize, String)],
) -> String {
    let rows = s
        .actions
        .iter()
        .enumerate()
        .map(|(d, list)| {
            let mut row: Vec<Cell> = list
                .iter()
                .enumerate()
                .map(|(i, a)| Some((s.label(d, a), marks.contains(&(d, i)))))
                .collect();
            row.extend(
                ghosts
                    .iter()
                    .filter(|g| g.0 == d)
                    .map(|g| Some((format!("{}?", g.1), true))),
            );
            row
        })
        .collect();
    draw(rows)
}

/// Cells left-aligned to a common width, one space apart, trailing spaces trimmed. When any cell
/// is marked, every cell gets a one-character frame: ` 0F0 ` or `[0F0]`.
fn draw(rows: Vec<Vec<Cell>>) -> String {
    let width = rows
        .iter()
        .flatten()
        .flatten()
        .map(|c| c.0.len())
        .max()
        .unwrap_or(1);
    let framed = rows.iter().flatten().flatten().any(|c| c.1);
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .into_iter()
            .map(|c| {
                let (text, mark) = c.unwrap_or_else(|| (".".to_string(), false));
                let text = format!("{text:<width$}");
                match (framed, mark) {
                    (false, _) => text,
                    (true, false) => format!(" {text} "),
                    (true, true) => {
                        format!("[{}]", text.trim_end())
                            + &" ".repeat(width - text.trim_end().len())
                    }
                }
            })
            .collect();
        out.push_str(cells.join(" ").trim_end());
        out.push('\n');
    }
    out
}
