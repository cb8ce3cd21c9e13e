//! The pipeline simulators: the unit-cost simulation against the textbook bubble formulas,
//! peak activations, zero-bubble against 1F1B, and the device-clock replay with link models.
//! Pure logic: no GPU.

mod common;
use common::all_schedules;
use triaxis::pipeline::*;
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

#[test]
fn replay_with_unit_costs_and_an_ideal_link_is_the_unit_simulation() {
    for s in all_schedules().into_iter().filter(|s| s.m <= 16) {
        let unit = simulate_unit(&s).unwrap();
        for link in [Link::ideal(), Link::measured(f64::INFINITY, 0.0)] {
            let r = replay(&s, &|_, _| 1.0, &link, &|_| 1 << 20).unwrap();
            assert_eq!(r.makespan, unit.makespan as f64);
            assert_eq!(
                r.busy,
                unit.busy.iter().map(|&b| b as f64).collect::<Vec<_>>()
            );
            assert_eq!(
                r.bubble,
                1.0 - unit.busy.iter().sum::<usize>() as f64 / (s.p * unit.makespan) as f64
            );
            let starts: Vec<usize> = r.actions.iter().map(|a| a.start as usize).collect();
            assert_eq!(starts, unit.start.concat());
        }
    }
}

#[test]
fn full_backward_costing_2_keeps_the_bubble_fraction() {
    let cost = |_: usize, a: &Action| if a.kind == Kind::B { 2.0 } else { 1.0 };
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
            let r = replay(
                &Schedule::new(kind, p, m, vv).unwrap(),
                &cost,
                &Link::ideal(),
                &|_| 0,
            )
            .unwrap();
            assert_eq!(
                r.makespan,
                (3 * (vv * m + p - 1)) as f64,
                "{kind} p={p} m={m} v={vv}"
            );
        }
    }
}

#[test]
fn slow_link_on_two_stages_by_hand() {
    // 1F1B, p = 2, m = 2; every action 1 s; 1 byte per message over 0.5 B/s + 0.5 s latency:
    // a transfer holds its direction of the link 2 s and arrives 2.5 s after it starts.
    //   0F0 [0,1]  a0: 0→1 [1, 3.5]       1F0 [3.5,4.5] 1B0 [4.5,5.5]  g0: 1→0 [5.5, 8]
    //   0F1 [1,2]  a1: waits for the link  1F1 [5.5,6.5] 1B1 [6.5,7.5]  g1: 1→0 [7.5, 10]
    //              until 3 → [3, 5.5]      0B0 [8,9]     0B1 [10,11]    makespan 11 (unit: 6)
    let s = one_f_one_b(2, 2).unwrap();
    let r = replay(&s, &|_, _| 1.0, &Link::measured(0.5, 0.5), &|_| 1).unwrap();
    let spans: Vec<(usize, String, f64, f64)> = r
        .actions
        .iter()
        .map(|a| (a.device, s.label(a.device, &a.action), a.start, a.end))
        .collect();
    let want = [
        (0, "0F0", 0.0, 1.0),
        (0, "0F1", 1.0, 2.0),
        (0, "0B0", 8.0, 9.0),
        (0, "0B1", 10.0, 11.0),
        (1, "1F0", 3.5, 4.5),
        (1, "1B0", 4.5, 5.5),
        (1, "1F1", 5.5, 6.5),
        (1, "1B1", 6.5, 7.5),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|&(d, l, a, b)| (d, l.to_string(), a, b))
        .collect();
    assert_eq!(spans, want);
    let transfers: Vec<(usize, usize, f64, f64)> = r
        .transfers
        .iter()
        .map(|t| (t.from, t.to, t.start, t.end))
        .collect();
    assert_eq!(
        transfers,
        [
            (0, 1, 1.0, 3.5),
            (0, 1, 3.0, 5.5),
            (1, 0, 5.5, 8.0),
            (1, 0, 7.5, 10.0)
        ]
    );
    assert_eq!(r.makespan, 11.0);
    assert_eq!(r.busy, [4.0, 4.0]);
    assert_eq!(r.bubble, 1.0 - 8.0 / 22.0);
}

#[test]
fn bad_links_and_costs_are_config_errors() {
    let e = err(Link::by_name("infiniband"));
    assert!(e.contains("nvlink, pcie, ethernet, ideal"), "{e}");
    let s = gpipe(2, 1).unwrap();
    assert!(
        err(replay(&s, &|_, _| 1.0, &Link::measured(0.0, 1e-6), &|_| 1))
            .contains("positive bandwidth")
    );
    assert!(err(replay(&s, &|_, _| f64::NAN, &Link::ideal(), &|_| 1)).contains("cost of 0F0"));
}
