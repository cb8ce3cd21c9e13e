//! The ring schedule as data: which chunk each rank sends and receives in which round.

/// Which halves of the all-reduce a ring runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phases {
    ReduceScatter,
    AllGather,
    Both,
}

/// One round of one rank: send chunk `send` right, receive chunk `recv` from the left and add
/// it into the own copy (`add`, reduce-scatter) or copy it (all-gather).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    pub round: usize,
    pub send: usize,
    pub recv: usize,
    pub add: bool,
}

/// The rounds rank `r` of `d` runs. Reduce-scatter round s: send `(r−s−1) mod d`, receive and
/// add `(r−s−2) mod d`; all-gather round s: send `(r−s) mod d`, receive `(r−s−1) mod d`.
pub fn rounds(r: usize, d: usize, phases: Phases) -> Vec<Round> {
    let m = |x: isize| x.rem_euclid(d as isize) as usize;
    let r = r as isize;
    let steps = d.saturating_sub(1);
    let mut out = Vec::with_capacity(2 * steps);
    if phases != Phases::AllGather {
        for s in 0..steps {
            let si = s as isize;
            out.push(Round {
                round: s,
                send: m(r - si - 1),
                recv: m(r - si - 2),
                add: true,
            });
        }
    }
    if phases != Phases::ReduceScatter {
        let base = if phases == Phases::Both { steps } else { 0 };
        for s in 0..steps {
            let si = s as isize;
            out.push(Round {
                round: base + s,
                send: m(r - si),
                recv: m(r - si - 1),
                add: false,
            });
        }
    }
    out
}
