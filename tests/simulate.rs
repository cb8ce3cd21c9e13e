//! The pipeline simulators: the unit-cost simulation against the textbook bubble formulas,
//! peak activations, zero-bubble against 1F1B, and the device clock (the runtime's replay of the
//! lowered programs) against them and by hand.
//! Pure logic: no GPU.

mod common;
use common::all_schedules;
use triaxis::mesh::Mesh;
use triaxis::pipeline::theory::theory;
use triaxis::pipeline::*;
use triaxis::runtime::replay::{replay, Clock};
use triaxis::runtime::{lower, ChunkShape, Op, Plan};
use triaxis::Error;

fn err(r: triaxis::Result<impl std::fmt::Debug>) -> String {
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    e.to_string()
}

#[test]
fn unit_simulation_reproduces_the_bubble_formulas_exactly() {
    for s in all_schedules() {
        let r = simulate_unit(&s).unwrap();
        let (p, m, v) = (s.p, s.m, s.v);
        let tag = format!("{} p={p} m={m} v={v}", s.kind);
        assert_eq!(
            r.idle,
            p * r.makespan - r.busy.iter().sum::<usize>(),
            "{tag}"
        );
        match s.kind {
            // Makespan 2(vm+p−1) steps and idle/(p·makespan) = (p−1)/(vm+p−1), as integers.
            ScheduleKind::GPipe | ScheduleKind::OneFOneB | ScheduleKind::Interleaved => {
                assert_eq!(r.makespan, 2 * (v * m + p - 1), "{tag}");
                assert_eq!(r.idle * (v * m + p - 1), (p - 1) * p * r.makespan, "{tag}");
                let want = (p - 1) as f64 / (v * m + p - 1) as f64;
                assert!(
                    (r.bubble - want).abs() < 1e-12,
                    "{tag}: {} vs {want}",
                    r.bubble
                );
            }
            // ZB-H1 (F = B = W = 1): 3m+p−1 steps once m ≥ p, i.e. (p−1)/(3m+p−1).
            ScheduleKind::ZeroBubbleH1 if m >= p => {
                assert_eq!(r.makespan, 3 * m + p - 1, "{tag}");
                assert_eq!(r.idle, p * (p - 1), "{tag}");
            }
            ScheduleKind::ZeroBubbleH1 => {}
            // ZB-V (F = B = W = 1 per chunk): 6m+p−1 steps once m ≥ ⌊3p/2⌋, the least any
            // order can take (device p−1 starts at p−1 with 6m units of work).
            ScheduleKind::ZeroBubbleV => {
                assert!(r.makespan >= 6 * m + p - 1, "{tag}");
                if m >= 3 * p / 2 {
                    assert_eq!(r.makespan, 6 * m + p - 1, "{tag}");
                    assert_eq!(r.idle, p * (p - 1), "{tag}");
                    assert!((r.bubble - theory(&s)).abs() < 1e-12, "{tag}");
                }
            }
            // DualPipeV (F&B run as F, B, W back to back): the same bound at every m ≥ 2p.
            ScheduleKind::DualPipeV => {
                assert_eq!(r.makespan, 6 * m + p - 1, "{tag}");
                assert!((r.bubble - theory(&s)).abs() < 1e-12, "{tag}");
            }
        }
    }
}

#[test]
fn zero_bubble_v_halves_zero_bubble_h1s_idle_time() {
    // Both idle p−1 units per device, but a ZB-V unit is a chunk, half a stage: ZB-V idles
    // (p−1)/2 stage units per device, ZB-H1 p−1.
    for p in [2, 4, 8] {
        for m in [12, 16, 64] {
            let v = simulate_unit(&zero_bubble_v(p, m).unwrap()).unwrap();
            let h1 = simulate_unit(&zero_bubble_h1(p, m).unwrap()).unwrap();
            assert_eq!(v.idle, h1.idle, "p={p} m={m}");
            assert_eq!(v.makespan, 2 * h1.makespan - (p - 1), "p={p} m={m}");
            assert!(v.bubble < h1.bubble, "p={p} m={m}");
        }
    }
}

#[test]
fn zero_bubble_h1_beats_1f1b() {
    for p in [2, 3, 4, 8] {
        for m in [1, 2, 4, 8, 16, 64] {
            let zb = simulate_unit(&zero_bubble_h1(p, m).unwrap()).unwrap();
            let ofob = simulate_unit(&one_f_one_b(p, m).unwrap()).unwrap();
            assert!(
                zb.bubble < ofob.bubble,
                "p={p} m={m}: zb {} vs 1f1b {}",
                zb.bubble,
                ofob.bubble
            );
            // Same peak activation memory as 1F1B (its first device holds min(p, m)).
            let max = |v: &[usize]| v.iter().copied().max().unwrap();
            assert_eq!(
                max(&zb.peak_activations),
                max(&ofob.peak_activations),
                "p={p} m={m}"
            );
            if p == 4 && m >= 4 {
                println!(
                    "p=4 m={m}: zb-h1 bubble {:.4}, 1f1b {:.4}",
                    zb.bubble, ofob.bubble
                );
            }
        }
    }
}

#[test]
fn peak_activations_per_device() {
    for p in [1, 2, 3, 4, 8] {
        for m in [1, 2, 4, 8, 16, 64] {
            // GPipe holds every microbatch; 1F1B's stage s holds min(p − s, m).
            assert_eq!(
                simulate_unit(&gpipe(p, m).unwrap())
                    .unwrap()
                    .peak_activations,
                vec![m; p]
            );
            let want: Vec<usize> = (0..p).map(|s| (p - s).min(m)).collect();
            assert_eq!(
                simulate_unit(&one_f_one_b(p, m).unwrap())
                    .unwrap()
                    .peak_activations,
                want,
                "p={p} m={m}"
            );
            // ZB-H1: every device holds up to min(p, m) (W frees the activation).
            assert_eq!(
                peak_activations(&zero_bubble_h1(p, m).unwrap()),
                vec![p.min(m); p],
                "p={p} m={m}"
            );
        }
    }
    // ZB-V counts half-stage chunk-microbatches: 2·min(p, m) on the busiest device once m ≥ p
    // (1F1B's first device), never more than 2p.
    for p in [1, 2, 3, 4, 8] {
        for m in [1, 2, 4, 8, 16, 64] {
            let peak = peak_activations(&zero_bubble_v(p, m).unwrap());
            assert!(peak.iter().all(|&n| n <= 2 * p), "p={p} m={m}: {peak:?}");
            if m >= p {
                assert_eq!(peak.iter().max(), Some(&(2 * p)), "p={p} m={m}: {peak:?}");
            }
        }
    }
    // DualPipeV holds one half-stage microbatch more than ZB-V on every device: 2p + 1.
    for p in [1, 2, 3, 4, 8] {
        for m in [2 * p, 2 * p + 1, 64] {
            let peak = peak_activations(&dual_pipe_v(p, m).unwrap());
            assert_eq!(peak, vec![2 * p + 1; p], "p={p} m={m}");
        }
    }
    // Interleaved counts chunk-microbatches: device 0 of p=4, v=2 holds 11 (5.5 stages' worth).
    assert_eq!(
        peak_activations(&interleaved(4, 8, 2).unwrap()),
        vec![11, 9, 7, 5]
    );
}

#[test]
fn link_presets() {
    assert_eq!(Link::by_name("NVLink").unwrap(), Link::nvlink());
    assert_eq!(Link::nvlink().bandwidth_bytes_per_s, 400e9);
    assert_eq!(Link::by_name("pcie").unwrap().bandwidth_bytes_per_s, 25e9);
    assert_eq!(
        Link::by_name("ethernet").unwrap().bandwidth_bytes_per_s,
        12.5e9
    );
    assert_eq!(Link::ideal().transfer_time(1 << 40), 0.0);
    let l = Link::measured(2e9, 1e-5);
    assert!((l.transfer_time(4_000_000) - 2.01e-3).abs() < 1e-15);
}

/// The runtime's lowered programs of schedule `s` on its own (one replica, no tensor
/// parallelism), every chunk one segment per pass.
fn lowered(s: &Schedule) -> (Plan, Mesh) {
    let mesh = Mesh {
        pp: s.p,
        schedule: s.kind,
        microbatches: s.m,
        chunks: s.v,
        ..Mesh::default()
    };
    let shape = ChunkShape {
        forward: vec![],
        backward: vec![],
        weight: vec![],
        buckets: 1,
        split: s.kind.split_backward(),
        gather: false,
    };
    let plan = lower(&mesh, s, &vec![vec![shape; s.v]; s.p]).unwrap();
    (plan, mesh)
}

/// The device clock (the runtime's replay) of `s`: every pass costs `pass(action)`, every
/// send `send` seconds, the rest of the step nothing.
fn device_clock(s: &Schedule, pass: &dyn Fn(&Action) -> f64, send: f64) -> (Plan, Clock) {
    let (plan, mesh) = lowered(s);
    let cost: Vec<Vec<f64>> = plan
        .programs
        .iter()
        .map(|p| {
            p.ops
                .iter()
                .map(|op| match op {
                    Op::Compute { action, .. } => pass(action),
                    Op::Send { .. } => send,
                    _ => 0.0,
                })
                .collect()
        })
        .collect();
    let clock = replay(&plan, &mesh, &cost).unwrap();
    (plan, clock)
}

/// Per device, in program order, the device-clock spans of the ops `pick` selects.
fn spans(plan: &Plan, clock: &Clock, pick: fn(&Op) -> bool) -> Vec<Vec<(f64, f64)>> {
    plan.programs
        .iter()
        .zip(&clock.spans)
        .map(|(p, spans)| {
            p.ops
                .iter()
                .zip(spans)
                .filter(|(op, _)| pick(op))
                .map(|(_, &s)| s)
                .collect()
        })
        .collect()
}

/// Per device, the device-clock spans of its passes in list order.
fn pass_spans(plan: &Plan, clock: &Clock) -> Vec<Vec<(f64, f64)>> {
    spans(plan, clock, |op| matches!(op, Op::Compute { .. }))
}

#[test]
fn the_device_clock_with_unit_costs_and_free_sends_is_the_unit_simulation() {
    for s in all_schedules().into_iter().filter(|s| s.m <= 16) {
        let unit = simulate_unit(&s).unwrap();
        let (plan, clock) = device_clock(&s, &|_| 1.0, 0.0);
        let span = clock.passes_end.iter().copied().fold(0.0, f64::max);
        assert_eq!(span, unit.makespan as f64, "{} p={} m={}", s.kind, s.p, s.m);
        assert_eq!(
            clock.busy,
            unit.busy.iter().map(|&b| b as f64).collect::<Vec<_>>()
        );
        let starts: Vec<Vec<usize>> = pass_spans(&plan, &clock)
            .iter()
            .map(|d| d.iter().map(|&(a, _)| a as usize).collect())
            .collect();
        assert_eq!(starts, unit.start, "{} p={} m={}", s.kind, s.p, s.m);
    }
}

#[test]
fn full_backward_costing_2_keeps_the_bubble_fraction() {
    let cost = |a: &Action| if a.kind == Kind::B { 2.0 } else { 1.0 };
    for (p, m, v) in [
        (2, 2, 1),
        (4, 8, 1),
        (8, 16, 1),
        (2, 2, 2),
        (4, 8, 2),
        (4, 4, 3),
        (3, 9, 3),
    ] {
        for kind in [
            ScheduleKind::GPipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::Interleaved,
        ] {
            let vv = if kind == ScheduleKind::Interleaved {
                v
            } else {
                1
            };
            let s = Schedule::new(kind, p, m, vv).unwrap();
            let (_, clock) = device_clock(&s, &cost, 0.0);
            let span = clock.passes_end.iter().copied().fold(0.0, f64::max);
            assert_eq!(
                span,
                (3 * (vv * m + p - 1)) as f64,
                "{kind} p={p} m={m} v={vv}"
            );
            assert!(
                (clock.bubble(0..p) - theory(&s)).abs() < 1e-12,
                "{kind} p={p} m={m} v={vv}"
            );
        }
    }
}

#[test]
fn slow_link_on_two_stages_by_hand() {
    // 1F1B, p = 2, m = 2; every pass 1 s; every message holds its direction of the link for
    // its whole link-model time, 2.5 s, and arrives at its end:
    //   0F0 [0,1]  a0: 0→1 [1, 3.5]        1F0 [3.5,4.5] 1B0 [4.5,5.5]  g0: 1→0 [5.5, 8]
    //   0F1 [1,2]  a1: waits for the link   1F1 [6,7]     1B1 [7,8]      g1: 1→0 [8, 10.5]
    //              until 3.5 → [3.5, 6]     0B0 [8,9]     0B1 [10.5,11.5]  (unit: 6)
    let s = one_f_one_b(2, 2).unwrap();
    let (plan, clock) = device_clock(&s, &|_| 1.0, 2.5);
    assert_eq!(
        pass_spans(&plan, &clock),
        [
            vec![(0.0, 1.0), (1.0, 2.0), (8.0, 9.0), (10.5, 11.5)],
            vec![(3.5, 4.5), (4.5, 5.5), (6.0, 7.0), (7.0, 8.0)],
        ]
    );
    let sends = spans(&plan, &clock, |op| matches!(op, Op::Send { .. }));
    assert_eq!(
        sends,
        [vec![(1.0, 3.5), (3.5, 6.0)], vec![(5.5, 8.0), (8.0, 10.5)]]
    );
    assert_eq!(clock.busy, [4.0, 4.0]);
    assert_eq!(clock.bubble(0..2), 1.0 - 4.0 / 11.5);
}

#[test]
fn an_unknown_link_is_a_config_error() {
    let e = err(Link::by_name("infiniband"));
    assert!(e.contains("nvlink, pcie, ethernet, ideal"), "{e}");
}

#[test]
fn costed_simulation_is_the_unit_one_at_unit_costs_and_the_formula_at_others() {
    // every device of every schedule does the same work, so the busiest device's idle share
    // is everyone's
    for s in all_schedules() {
        let unit = simulate_unit(&s).unwrap().bubble;
        let costed = simulate_costed(&s, [1.0; 3]).unwrap();
        assert!(
            (unit - costed).abs() < 1e-12,
            "{} p={} m={}",
            s.kind,
            s.p,
            s.m
        );
    }
    // 1F1B's bubble does not depend on the pass costs; ZB-H1's is (p−1)(F+B−W) over
    // m(F+B+W) + (p−1)(F+B−W) once m ≥ p (here W = F/2, as on lavapipe)
    let (f, b, w) = (3.34, 4.29, 2.14);
    for (p, m) in [(2, 4), (4, 4), (4, 8), (4, 64), (8, 16)] {
        let ofob = simulate_costed(&one_f_one_b(p, m).unwrap(), [f, b + w, 0.0]).unwrap();
        assert!((ofob - theory(&one_f_one_b(p, m).unwrap())).abs() < 1e-12);
        let zb = simulate_costed(&zero_bubble_h1(p, m).unwrap(), [f, b, w]).unwrap();
        let hole = (p - 1) as f64 * (f + b - w);
        let want = hole / (m as f64 * (f + b + w) + hole);
        assert!((zb - want).abs() < 1e-9, "p={p} m={m}: {zb} vs {want}");
    }
    assert!(simulate_costed(&gpipe(2, 2).unwrap(), [1.0, f64::NAN, 0.0]).is_err());
}
