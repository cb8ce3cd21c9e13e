//! Pipeline schedules: pictures (torchgpipe `test_clock_cycles` style), the validator's rules
//! and its messages (the marked grid), and bad inputs. Pure logic: no GPU. The simulators are
//! tested in `simulate.rs`.

mod common;
use common::all_schedules;
use triaxis::pipeline::*;
use triaxis::Error;

/// A picture written indented in the test, as `render` prints it.
fn picture(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A schedule (v = 1) from its device lists written as labels: `["0F0 0F1 0B0 0B1", ...]`.
fn from_lists(kind: ScheduleKind, m: usize, rows: &[&str]) -> Schedule {
    let actions = rows
        .iter()
        .map(|row| {
            row.split_whitespace()
                .map(|l| {
                    let micro = l[2..].parse().unwrap();
                    match &l[1..2] {
                        "F" => Action::f(micro, 0),
                        "B" => Action::b(micro, 0),
                        _ => Action::w(micro, 0),
                    }
                })
                .collect()
        })
        .collect();
    Schedule::of(kind, rows.len(), m, 1, actions)
}

fn err(r: triaxis::Result<impl std::fmt::Debug>) -> String {
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    e.to_string()
}

#[test]
fn gpipe_picture() {
    assert_eq!(
        render(&gpipe(2, 2).unwrap()),
        picture(
            "0F0 0F1 .   .   0B0 0B1
             .   1F0 1F1 1B0 1B1 ."
        )
    );
}

#[test]
fn one_f_one_b_picture() {
    assert_eq!(
        render(&one_f_one_b(3, 4).unwrap()),
        picture(
            "0F0 0F1 0F2 .   .   0B0 0F3 0B1 .   0B2 .   0B3
             .   1F0 1F1 .   1B0 1F2 1B1 1F3 1B2 .   1B3 .
             .   .   2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 .   ."
        )
    );
}

#[test]
fn interleaved_picture() {
    // Device 0 holds stages 0 and 2 (chunks c0, c1), device 1 stages 1 and 3.
    assert_eq!(
        render(&interleaved(2, 2, 2).unwrap()),
        picture(
            "0F0c0 0F1c0 0F0c1 0F1c1 .     0B0c1 .     0B1c1 0B0c0 0B1c0
             .     1F0c0 1F1c0 1F0c1 1B0c1 1F1c1 1B1c1 1B0c0 1B1c0 ."
        )
    );
}

#[test]
fn zero_bubble_h1_pictures() {
    assert_eq!(
        render(&zero_bubble_h1(2, 3).unwrap()),
        picture(
            "0F0 0F1 .   0B0 0W0 0F2 0B1 0W1 0B2 0W2
             .   1F0 1B0 1F1 1B1 1W0 1F2 1B2 1W1 1W2"
        )
    );
    // Device d runs W(j) after B(j+d); the W's left over fill the cool-down.
    assert_eq!(
        render(&zero_bubble_h1(3, 4).unwrap()),
        picture(
            "0F0 0F1 0F2 .   .   0B0 0W0 0F3 0B1 0W1 0B2 0W2 0B3 0W3
             .   1F0 1F1 .   1B0 1F2 1B1 1W0 1F3 1B2 1W1 1B3 1W2 1W3
             .   .   2F0 2B0 2F1 2B1 2F2 2B2 2W0 2F3 2B3 2W1 2W2 2W3"
        )
    );
}

#[test]
fn zero_bubble_v_picture() {
    // Device 0 holds stages 0 and 3 (chunks c0, c1), device 1 stages 1 and 2: the turn of the V
    // (1F0c0 → 1F0c1) stays on device 1, and the loss is computed on device 0.
    assert_eq!(
        render(&zero_bubble_v(2, 3).unwrap()),
        picture(
            "0F0c0 0F1c0 0F2c0 0F0c1 0B0c1 0W0c1 0F1c1 0B1c1 0W1c1 0B0c0 0W0c0 0F2c1 0B2c1 0W2c1 0B1c0 0W1c0 0B2c0 0W2c0 .
             .     1F0c0 1F0c1 1F1c0 1F1c1 1B0c1 1W0c1 1F2c0 1B0c0 1W0c0 1F2c1 1B1c1 1W1c1 1B1c0 1B2c1 1B2c0 1W1c0 1W2c1 1W2c0"
        )
    );
    let s = zero_bubble_v(4, 8).unwrap();
    let stages: Vec<_> = (0..4).map(|d| (s.stage(d, 0), s.stage(d, 1))).collect();
    assert_eq!(stages, [(0, 7), (1, 6), (2, 5), (3, 4)]);
    assert!((0..8).all(|st| {
        let (d, c) = s.place(st);
        s.stage(d, c) == st
    }));
}

#[test]
fn dual_pipe_v_picture() {
    // The V of ZB-V; in the steady state each F on one chunk is followed by a full backward (B
    // and its W) on the other ("F&B"), and the last backwards defer their W's to the drain.
    assert_eq!(
        render(&dual_pipe_v(2, 4).unwrap()),
        picture(
            "0F0c0 0F1c0 0F2c0 0F0c1 0B0c1 0W0c1 0F1c1 0F3c0 0B1c1 0W1c1 0F2c1 0B0c0 0W0c0 0B2c1 0W2c1 0F3c1 0B1c0 0W1c0 0B3c1 0W3c1 0B2c0 0W2c0 .     0B3c0 0W3c0
             .     1F0c0 1F0c1 1F1c0 1F1c1 1F2c0 1B0c1 1W0c1 1F2c1 1B0c0 1W0c0 1F3c0 1B1c1 1W1c1 1F3c1 1B1c0 1W1c0 1B2c1 1W2c1 1B2c0 1W2c0 1B3c1 1B3c0 1W3c1 1W3c0"
        )
    );
}

#[test]
fn display_is_list_order() {
    assert_eq!(
        one_f_one_b(2, 2).unwrap().to_string(),
        "0: 0F0 0F1 0B0 0B1\n1: 1F0 1B0 1F1 1B1\n"
    );
}

#[test]
fn every_constructor_is_valid_with_channel_bound_1() {
    for s in all_schedules() {
        validate(&s, 1).unwrap_or_else(|e| panic!("{} p={} m={} v={}: {e}", s.kind, s.p, s.m, s.v));
    }
}

#[test]
fn rendezvous_channels_only_suit_gpipe() {
    // With bound 0 a send waits for the receiver: GPipe still runs, 1F1B deadlocks (device 1
    // sends its first gradient while device 0 is still sending an activation).
    validate(&gpipe(4, 8).unwrap(), 0).unwrap();
    let e = err(validate(&one_f_one_b(2, 2).unwrap(), 0));
    assert!(
        e.contains("\"no deadlock\"") && e.contains("channel bound 0"),
        "{e}"
    );
    assert!(e.contains("[0F1]") && e.contains("[1B0]"), "{e}");
}

#[test]
fn validator_rejects_b_before_f_on_a_stage() {
    let s = from_lists(
        ScheduleKind::OneFOneB,
        2,
        &["0F0 0F1 0B0 0B1", "1B0 1F0 1F1 1B1"],
    );
    let e = err(validate(&s, 1));
    assert!(e.contains("\"F before B before W on a stage\""), "{e}");
    assert!(
        e.contains("1B0 (position 0) comes before 1F0 (position 1)"),
        "{e}"
    );
    assert!(e.contains("[1B0]  1F0   1F1   1B1"), "{e}");
}

#[test]
fn validator_rejects_a_missing_microbatch() {
    let s = from_lists(ScheduleKind::GPipe, 2, &["0F0 0F1 0B0 0B1", "1F0 1B0 1B1"]);
    let e = err(validate(&s, 1));
    assert!(
        e.contains("\"exactly once\"") && e.contains("missing 1F1"),
        "{e}"
    );
    assert!(e.contains(" 1F0    1B0    1B1   [1F1?]"), "{e}");
    let s = from_lists(
        ScheduleKind::GPipe,
        2,
        &["0F0 0F1 0B0 0B1 0B1", "1F0 1F1 1B0 1B1"],
    );
    let e = err(validate(&s, 1));
    assert!(
        e.contains("0B1 appears twice on device 0 (positions 3 and 4)"),
        "{e}"
    );
    assert!(e.contains("[0B1] [0B1]"), "{e}");
}

#[test]
fn validator_rejects_bad_shapes() {
    let s = from_lists(ScheduleKind::OneFOneB, 1, &["0F0 0B0 0W0"]);
    assert!(err(validate(&s, 1)).contains("zero-bubble schedules only"));
    let s = from_lists(ScheduleKind::ZeroBubbleH1, 1, &["0F0 0B0"]);
    assert!(err(validate(&s, 1)).contains("missing 0W0"));
    let s = from_lists(ScheduleKind::GPipe, 1, &["0F0 0F1 0B0 0B1"]);
    assert!(err(validate(&s, 1)).contains("microbatch 1 out of range (m = 1)"));
    let mut s = gpipe(2, 1).unwrap();
    s.p = 3;
    assert!(err(validate(&s, 1)).contains("2 device lists for p = 3 devices"));
}

#[test]
fn validator_rejects_out_of_order_receives() {
    let s = from_lists(
        ScheduleKind::GPipe,
        2,
        &["0F0 0F1 0B0 0B1", "1F1 1F0 1B0 1B1"],
    );
    let e = err(validate(&s, 4));
    assert!(
        e.contains("\"channel order\"")
            && e.contains("1F1 (device 1, position 0) takes 0F1's activation"),
        "{e}"
    );
    assert!(e.contains("[1F1]"), "{e}");
}

#[test]
fn validator_finds_a_deadlock_at_channel_bound_1() {
    // Device 0 runs GPipe order, device 1 runs 1F1B order. With room for one message per
    // channel, device 0 blocks sending 0F3 (0F2 still queued) while device 1 blocks sending
    // 1B1's gradient (1B0's not yet taken): each waits for the other. Bound 2 is enough.
    let s = from_lists(
        ScheduleKind::OneFOneB,
        4,
        &[
            "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3",
            "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3",
        ],
    );
    validate(&s, 2).unwrap();
    let e = err(validate(&s, 1));
    assert!(
        e.contains("\"no deadlock\"") && e.contains("deadlock with channel bound 1"),
        "{e}"
    );
    assert!(
        e.contains("device 0 is blocked sending 0F3's activation to device 1 (channel full)"),
        "{e}"
    );
    assert!(
        e.contains("device 1 is blocked sending 1B1's gradient to device 0 (channel full)"),
        "{e}"
    );
    let grid = " 0F0   0F1   0F2  [0F3]  0B0   0B1   0B2   0B3\n 1F0   1B0   1F1  [1B1]  1F2   1B2   1F3   1B3\n";
    assert!(e.ends_with(grid), "{e}");
}

#[test]
fn validator_finds_a_dependency_cycle() {
    // Device 0 wants 1B0's gradient before sending 0F1; device 1 wants 0F1 before 1B0.
    let s = from_lists(
        ScheduleKind::OneFOneB,
        2,
        &["0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"],
    );
    let e = err(validate(&s, 8));
    assert!(
        e.contains("\"cross-stage dependencies\"") && e.contains("any channel bound"),
        "{e}"
    );
    assert!(
        e.contains("0B0 on device 0 waits for 1B0's gradient"),
        "{e}"
    );
    assert!(
        e.contains("1F1 on device 1 waits for 0F1's activation"),
        "{e}"
    );
    assert!(e.contains("[0B0]") && e.contains("[1F1]"), "{e}");
    // The simulators refuse it too; the picture falls back to list order.
    assert!(simulate_unit(&s).is_err());
    assert_eq!(render(&s), picture("0F0 0B0 0F1 0B1\n1F0 1F1 1B0 1B1"));
}

#[test]
fn bad_inputs_are_config_errors() {
    assert!(err(gpipe(0, 4)).contains("devices p"));
    assert!(err(one_f_one_b(2, 0)).contains("microbatches m"));
    assert!(err(zero_bubble_h1(2, 0)).contains("microbatches m"));
    assert!(err(interleaved(2, 4, 0)).contains("chunks per device v"));
    assert!(err(interleaved(4, 6, 2)).contains("m % p == 0"));
    assert!(err(dual_pipe_v(4, 7)).contains("m ≥ 2p = 8"));
    assert!(err(Schedule::new(ScheduleKind::ZeroBubbleV, 2, 4, 1)).contains("use v = 2"));
    let e = err("zb".parse::<ScheduleKind>());
    assert!(
        e.contains("gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev"),
        "{e}"
    );
    assert_eq!(
        "ZB-H1".parse::<ScheduleKind>().unwrap(),
        ScheduleKind::ZeroBubbleH1
    );
    for name in ScheduleKind::NAMES {
        assert_eq!(name.parse::<ScheduleKind>().unwrap().to_string(), name);
    }
    assert!(
        err(Schedule::new(ScheduleKind::GPipe, 2, 2, 2)).contains("only interleaved uses v > 1")
    );
    assert_eq!(
        Schedule::new(ScheduleKind::Interleaved, 2, 4, 2).unwrap(),
        interleaved(2, 4, 2).unwrap()
    );
}
