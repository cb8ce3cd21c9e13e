//! Text grids of a schedule: one row per device, one left-aligned cell per action (or `.` for
//! idle), marked cells framed in brackets. `render` fills the columns by unit-cost start step;
//! the validator's error grids by list position ([`list_grid`]), with the offending actions
//! marked and missing ones appended as `[2B1?]`.

use super::schedule::Schedule;

/// One cell of a grid: a label, whether it is marked, or idle.
pub(super) type Cell = Option<(String, bool)>;

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
pub(super) fn draw(rows: Vec<Vec<Cell>>) -> String {
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
