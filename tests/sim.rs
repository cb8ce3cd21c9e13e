//! The simulator: one replica stands for identical ones exactly, it meets the schedule formula
//! at unit costs, its critical path covers the step, its calibration fit and file checks hold,
//! and a 1024-device layout keeps only tp · pp programs. No device work.

use triaxis::cost::{Cluster, Link};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Recompute};
use triaxis::pipeline::ScheduleKind;
use triaxis::precision::Precision;
use triaxis::runtime::ir::Op;
use triaxis::sim::report::critical_path;
use triaxis::sim::{simulate, Calibration, CommSource, Fit, Links, Spec, Terms};

fn small() -> GptConfig {
    GptConfig {
        vocab: 16,
        ctx: 16,
        channels: 32,
        heads: 4,
        layers: 2,
    }
}

fn cluster(nodes: usize, per_node: usize) -> Cluster {
    Cluster::new(
        nodes,
        per_node,
        80.0,
        Link::gbps(100.0).with_latency_us(2.0),
        Link::gbps(1.0).with_latency_us(20.0),
        1e-3,
    )
    .unwrap()
}

fn spec(mesh: Mesh, cluster: Cluster, calibration: Calibration) -> Spec {
    Spec {
        model: small(),
        micro_b: 2,
        mesh,
        cluster,
        calibration,
        precision: Precision::F32,
        recompute: Recompute::None,
        bucket_bytes: 16 << 10,
        every_replica: false,
        comm: CommSource::Cluster,
    }
}

fn layout(dp: usize, tp: usize, pp: usize, zero: usize) -> Mesh {
    Mesh {
        dp,
        tp,
        pp,
        zero,
        schedule: ScheduleKind::OneFOneB,
        microbatches: 4,
        chunks: 1,
    }
}

#[test]
fn one_replica_stands_for_identical_replicas_exactly() {
    for zero in [0, 1, 3] {
        let s = spec(
            layout(4, 2, 2, zero),
            cluster(2, 8),
            Calibration::from_rate(1e9),
        );
        let one = simulate(&s).unwrap();
        let all = simulate(&Spec {
            every_replica: true,
            ..s
        })
        .unwrap();
        assert_eq!((one.replicas, all.replicas), (1, 4), "zero {zero}");
        assert_eq!(one.plan.programs.len(), 4);
        assert_eq!(one.step(), all.step(), "zero {zero}");
        assert_eq!(one.bubble, all.bubble);
        assert_eq!(one.exposed, all.exposed);
        assert!(one.exposed.dp > 0.0, "the dp traffic crosses the slow link");
        assert_eq!(one.clock.spans[..], all.clock.spans[..4], "zero {zero}");
    }
}

#[test]
fn replicas_on_unlike_links_are_all_simulated() {
    // 3 devices per node: replica 0's pipeline transfer stays inside node 0, replica 1's
    // (devices 2 → 3) crosses to node 1
    let s = spec(
        layout(2, 1, 2, 0),
        cluster(2, 3),
        Calibration::from_rate(1e9),
    );
    assert_eq!(simulate(&s).unwrap().replicas, 2);
}

#[test]
fn the_simulated_bubble_is_the_schedule_formula_at_unit_costs() {
    // every layer, the embedding and the head cost one second a pass (both stages hold two
    // of them), links ideal, the optimizer free: 1F1B's (p − 1)/(m + p − 1)
    let unit = Fit {
        per_block: 1.0,
        per_end: 1.0,
        ..Fit::default()
    };
    let mut cal = Calibration::from_rate(1e9);
    cal.passes = [unit; 4];
    // links fast enough to cost nothing at these sizes (4 KB in 4·10⁻¹⁵ s)
    let fast = Link::gbps(1e9);
    let ideal = Cluster {
        intra: fast,
        inter: fast,
        ..cluster(1, 8)
    };
    for m in [2, 4, 8] {
        let mesh = Mesh {
            microbatches: m,
            ..layout(1, 1, 2, 0)
        };
        let sim = simulate(&spec(mesh, ideal.clone(), cal.clone())).unwrap();
        let formula = 1.0 / (m as f64 + 1.0);
        assert!((sim.bubble - formula).abs() < 1e-9, "m {m}: {}", sim.bubble);
        // F = 2 s and B = 2 s per microbatch on each device, plus the fill and drain
        assert!((sim.step() - 4.0 * (m as f64 + 1.0)).abs() < 1e-9);
    }
}

#[test]
fn the_critical_path_covers_the_step() {
    let s = spec(
        layout(2, 2, 2, 1),
        cluster(1, 8),
        Calibration::from_rate(1e8),
    );
    let sim = simulate(&s).unwrap();
    let path = critical_path(&sim);
    let total: f64 = path.seconds.iter().sum();
    assert!(
        (total - sim.step()).abs() <= 1e-9 * sim.step(),
        "{total} vs {}",
        sim.step()
    );
    assert!(path.words().starts_with("critical path"));
}

#[test]
fn the_calibration_fit_recovers_its_constants() {
    // [ops, layers, ends, FLOPs, tensor-parallel FLOPs]: every constant pinned by points that
    // vary apart (the last two split their layers over tensor ranks)
    let (op, layer, end, flop, split) = (1e-4, 2e-3, 3e-4, 1.0 / 20e9, 1.0 / 12e9);
    let pts: Vec<(Terms, f64)> = [
        [1.0, 4.0, 2.0, 1e9, 0.0],
        [1.0, 2.0, 1.0, 2.5e9, 0.0],
        [1.0, 1.0, 0.0, 2e9, 0.0],
        [9.0, 4.0, 2.0, 0.1e9, 0.5e9],
        [17.0, 8.0, 2.0, 0.1e9, 1.2e9],
        [1.0, 1.0, 1.0, 0.7e9, 0.0],
    ]
    .iter()
    .map(|x| {
        let t = op * x[0] + layer * x[1] + end * x[2] + flop * x[3] + split * x[4];
        (*x, t)
    })
    .collect();
    let f = Fit::of(&pts).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
    assert!(
        close(f.per_segment, op) && close(f.per_block, layer),
        "{f:?}"
    );
    assert!(close(f.per_end, end) && close(f.per_unit, flop), "{f:?}");
    assert!(f.per_split.is_some_and(|s| close(s, split)), "{f:?}");
    assert!(f.max_miss < 1e-9);
    // without tensor-parallel points there is no split rate: split FLOPs cost what FLOPs do
    let one = Fit::of(&pts[..3]).unwrap();
    assert_eq!(one.per_split, None);
    assert_eq!(
        one.seconds([0.0, 0.0, 0.0, 0.0, 1e9]),
        one.seconds([0.0, 0.0, 0.0, 1e9, 0.0])
    );
    // a negative fixed cost is no cost: the rate alone fits these best
    let pts = [
        ([0.0, 1.0, 0.0, 1.0, 0.0], 1.0),
        ([0.0, 1.0, 0.0, 3.0, 0.0], 4.0),
    ];
    let f = Fit::of(&pts).unwrap();
    assert_eq!(f.per_block, 0.0);
    assert!(f.per_unit > 0.0 && f.is_valid());
    assert!(Fit::of(&[]).is_err());
    assert!(Fit::of(&[([1.0, 1.0, 0.0, 0.0, 0.0], 1.0)]).is_err());
}

#[test]
fn a_calibration_from_before_the_split_rate_still_loads() {
    // files written before tensor-parallel FLOPs had their own rate have no per_split
    let dir = std::env::temp_dir().join(format!("triaxis-sim-old-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cal.json");
    let c = Calibration::from_rate(1e12);
    let old: String = c
        .to_json()
        .lines()
        .filter(|l| !l.contains("per_split"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!old.contains("per_split"));
    std::fs::write(&path, old).unwrap();
    let loaded = Calibration::load(&path).unwrap();
    assert_eq!(loaded, c);
    assert_eq!(loaded.passes[0].per_split, None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_calibration_file_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("triaxis-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cal.json");
    std::fs::write(&path, "{ not json").unwrap();
    let e = Calibration::load(&path).unwrap_err().to_string();
    assert!(e.contains("no calibration file"), "{e}");
    let mut c = Calibration::from_rate(1e12);
    c.passes[1].per_unit = -1.0;
    std::fs::write(&path, c.to_json()).unwrap();
    let e = Calibration::load(&path).unwrap_err().to_string();
    assert!(e.contains("finite and ≥ 0"), "{e}");
    let good = Calibration::from_rate(1e12);
    std::fs::write(&path, good.to_json()).unwrap();
    assert_eq!(Calibration::load(&path).unwrap(), good);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_impossible_layout_is_refused_before_simulating() {
    let s = spec(
        layout(64, 2, 2, 0),
        cluster(1, 8),
        Calibration::from_rate(1e9),
    );
    let e = simulate(&s).unwrap_err().to_string();
    assert!(e.contains("256 devices"), "{e}");
    let s = spec(
        layout(1, 3, 1, 0),
        cluster(1, 8),
        Calibration::from_rate(1e9),
    );
    assert!(simulate(&s).is_err(), "3 tensor ranks cannot split 4 heads");
}

#[test]
fn a_thousand_devices_keep_only_one_replica_of_programs() {
    let model = GptConfig {
        vocab: 32000,
        ctx: 2048,
        channels: 8192,
        heads: 64,
        layers: 80,
    };
    let mesh = Mesh {
        microbatches: 32,
        ..layout(16, 8, 8, 1)
    };
    let s = Spec {
        model,
        micro_b: 1,
        precision: Precision::Bf16,
        bucket_bytes: 25 << 20,
        ..spec(mesh, cluster(128, 8), Calibration::from_rate(300e12))
    };
    let s = Spec {
        cluster: Cluster {
            inter: Link::gbps(25.0).with_latency_us(10.0),
            ..s.cluster.clone()
        },
        ..s
    };
    let sim = simulate(&s).unwrap();
    assert_eq!((sim.replicas, sim.plan.programs.len()), (1, 64));
    assert_eq!(sim.memory.len(), 64);
    assert!(sim.bubble > 0.0 && sim.bubble < 7.0 / 39.0 + 0.01);
    assert_eq!(sim.tokens, 16 * 32 * 2048);
}

#[test]
fn measured_links_price_every_transfer_with_its_staging() {
    // α, seconds per byte: staging 1 ms + 1 ns/B (of every device staging at once), ring steps
    // 100 µs + 2 ns/B, messages 50 µs + 4 ns/B
    let byte_fit = |alpha: f64, per_byte: f64| Fit {
        per_segment: alpha,
        per_unit: per_byte,
        ..Fit::default()
    };
    let links = Links {
        transport: "test".into(),
        staging: byte_fit(1e-3, 1e-9),
        ring: byte_fit(1e-4, 2e-9),
        message: byte_fit(5e-5, 4e-9),
    };
    // the ring fit recovers α and β from all-reduces over 2 and 4 ranks
    let pts: Vec<(Terms, f64)> = [(2, 1e5), (2, 1e7), (4, 1e5), (4, 1e7)]
        .iter()
        .map(|&(d, b)| {
            let x = Links::ring_terms(b, d);
            (x, links.ring.seconds(x))
        })
        .collect();
    let f = Fit::of(&pts).unwrap();
    assert!((f.per_segment / 1e-4 - 1.0).abs() < 1e-9 && (f.per_unit / 2e-9 - 1.0).abs() < 1e-9);
    let mut cal = Calibration::from_rate(1e9);
    let s = spec(layout(1, 2, 2, 0), cluster(1, 8), cal.clone());
    let s = Spec {
        comm: CommSource::Calibration,
        ..s
    };
    let e = simulate(&s).unwrap_err().to_string();
    assert!(e.contains("no communication measured"), "{e}");
    cal.links = Some(links.clone());
    let sim = simulate(&Spec {
        calibration: cal,
        ..s
    })
    .unwrap();
    // one microbatch's activations at a stage boundary: b · T · h f32
    let act = (2 * 16 * 32 * 4) as f64;
    let (mut tp, mut sends) = (0, 0);
    for (p, costs) in sim.plan.programs.iter().zip(&sim.cost) {
        for (op, &c) in p.ops.iter().zip(costs) {
            let want = match op {
                Op::TpAllReduce { .. } => {
                    // both ranks stage at once: the host's staging bandwidth shared by 2
                    tp += 1;
                    1e-3 + 2e-9 * act + 2.0 * 1e-4 + 2e-9 * act
                }
                Op::Send { .. } => {
                    sends += 1;
                    1e-3 + 1e-9 * act + 5e-5 + 4e-9 * act
                }
                _ => continue,
            };
            assert!((c - want).abs() <= 1e-12, "{op:?}: {c} vs {want}");
        }
    }
    assert!(tp > 0 && sends > 0);
    let want = 1e-3 + 2e-9 * act + 2e-4 + 2e-9 * act;
    assert!((links.staged_all_reduce(act, 2) - want).abs() < 1e-15);
}
