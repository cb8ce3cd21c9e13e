//! The analytic cost model: docs/design.md's reference numbers (golden), the decision guide on the
//! four situations of docs/design.md's table, monotonicity properties, and bad-input errors.

use triaxis::cost::comm::{
    fraction_lost, large_p_allreduce_bytes, ring_allreduce_bytes, ring_allreduce_time,
    tp_block_traffic,
};
use triaxis::cost::divisors;
use triaxis::cost::memory::{activation_bytes_per_layer, zero_state_bytes};
use triaxis::cost::pipeline::{bubble, label};
use triaxis::cost::plan::{enumerate, SIMPLICITY_MARGIN};
use triaxis::cost::step::estimate;
use triaxis::cost::{
    plan, Cluster, Convention, Family, Footprint, Link, MeshCost, ModelShape, Overlap, PlanRequest,
    ZeroStage, GB,
};
use triaxis::mesh::Mesh;
use triaxis::pipeline::ScheduleKind;
use triaxis::Error;

const N7B: f64 = 7e9;
const MIXED: (f64, f64, f64) = (2.0, 2.0, 12.0);

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

/// One node of 8 × `mem` GB, NVLink-class 400 GB/s inside, 25 GB/s per device between nodes,
/// 300 TFLOP/s achieved per device.
fn cluster(nodes: usize, mem: f64) -> Cluster {
    Cluster::new(
        nodes,
        8,
        mem,
        Link::gbps(400.0).with_latency_us(3.0),
        Link::gbps(25.0).with_latency_us(10.0),
        300.0,
    )
    .unwrap()
}

fn request(model: ModelShape, cluster: Cluster, global_batch: usize) -> PlanRequest {
    PlanRequest {
        model,
        precision: Footprint::mixed_adam(),
        cluster,
        global_batch,
        overlap: Overlap::Backward,
    }
}

fn seven_b() -> ModelShape {
    ModelShape::with_params(N7B, 32, 4096, 32, 2048, 32000).unwrap()
}

fn is_config(e: Error, needle: &str) {
    match e {
        Error::Config(msg) => assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- golden: docs/design.md reference

#[test]
fn golden_allreduce_volume_time_and_fraction() {
    let s = N7B * 2.0; // bf16 gradients
    assert_eq!(s, 14e9, "S = 14 GB");
    // Ring 2(p−1)/p·S at p = 8: 24.5 GB; large-p 2·S: 28 GB.
    assert!(close(ring_allreduce_bytes(s, 8), 24.5e9, 1e-12));
    assert_eq!(large_p_allreduce_bytes(s), 28e9);
    assert!(
        close(ring_allreduce_bytes(s, 1 << 20), 28e9, 1e-5),
        "ring → 2·S as p grows"
    );
    assert_eq!(ring_allreduce_bytes(s, 1), 0.0);
    // 28 GB at 400 GB/s ≈ 70 ms.
    let t = Link::gbps(400.0).time(28e9);
    assert!(close(t, 0.070, 1e-12), "t = {t}");
    // Ring time with no latency at p = 8: 24.5 GB / 400 GB/s = 61.25 ms.
    assert!(close(
        ring_allreduce_time(s, 8, Link::gbps(400.0)),
        0.06125,
        1e-12
    ));
    // 200 ms step: 70 / (200 + 70) ≈ 26 % lost without overlap; nothing with backward overlap.
    let lost = fraction_lost(t, 0.200, Overlap::None);
    assert!(close(lost, 70.0 / 270.0, 1e-12));
    assert_eq!(format!("{:.0}", lost * 100.0), "26");
    assert_eq!(
        fraction_lost(t, 0.200, Overlap::Backward),
        0.0,
        "70 ms < 133 ms of backward"
    );
    // Printed conventions name themselves.
    assert_eq!(Convention::Ring.to_string(), "ring 2(p-1)/p·S");
    assert_eq!(Convention::LargeP.to_string(), "large-p 2·S");
}

#[test]
fn golden_pipeline_bubble() {
    for (kind, v) in [(ScheduleKind::GPipe, 1), (ScheduleKind::OneFOneB, 1)] {
        assert!(close(bubble(kind, v, 8, 8), 7.0 / 15.0, 1e-15));
        assert!(close(bubble(kind, v, 8, 64), 7.0 / 71.0, 1e-15));
        assert_eq!(format!("{:.1}", 100.0 * bubble(kind, v, 8, 8)), "46.7");
        assert_eq!(format!("{:.1}", 100.0 * bubble(kind, v, 8, 64)), "9.9");
    }
    // Interleaved: (p−1)/(v·m + p − 1); v = 1 is 1F1B.
    assert!(close(
        bubble(ScheduleKind::Interleaved, 2, 8, 8),
        7.0 / 23.0,
        1e-15
    ));
    assert_eq!(
        bubble(ScheduleKind::Interleaved, 1, 8, 8),
        bubble(ScheduleKind::OneFOneB, 1, 8, 8)
    );
    // ZB-H1: idle (p−1) units of 3m work units: (p−1)/(3m + p − 1); idle time a third of 1F1B's.
    assert!(close(
        bubble(ScheduleKind::ZeroBubbleH1, 1, 8, 8),
        7.0 / 31.0,
        1e-15
    ));
    let work = 3.0 * 8.0;
    let idle = |f: f64| work * f / (1.0 - f);
    assert!(close(
        idle(bubble(ScheduleKind::ZeroBubbleH1, 1, 8, 8)),
        idle(bubble(ScheduleKind::OneFOneB, 1, 8, 8)) / 3.0,
        1e-12
    ));
    // One stage: no bubble.
    for (kind, v) in [
        (ScheduleKind::GPipe, 1),
        (ScheduleKind::OneFOneB, 1),
        (ScheduleKind::Interleaved, 4),
        (ScheduleKind::ZeroBubbleH1, 1),
    ] {
        assert_eq!(bubble(kind, v, 1, 5), 0.0);
    }
}

#[test]
fn golden_zero_rows() {
    let n = N7B;
    let row = |z| zero_state_bytes(n, 8, z, MIXED);
    assert_eq!(row(ZeroStage::Stage0), 112e9, "16N");
    assert!(
        close(row(ZeroStage::Stage1), 4.0 * n + 12.0 * n / 8.0, 1e-15),
        "4N + 12N/p"
    );
    assert!(close(row(ZeroStage::Stage1), 38.5e9, 1e-15));
    assert!(
        close(row(ZeroStage::Stage2), 2.0 * n + 14.0 * n / 8.0, 1e-15),
        "2N + 14N/p"
    );
    assert!(close(row(ZeroStage::Stage2), 26.25e9, 1e-15));
    assert_eq!(row(ZeroStage::Stage3), 14e9, "16N/p");
    // The general (P, G, K) form for any p; f32 Adam is P=4, G=4, K=8.
    for p in 1..=64 {
        let pf = p as f64;
        let f = |z| zero_state_bytes(n, p, z, (4.0, 4.0, 8.0));
        assert!(close(f(ZeroStage::Stage0), 16.0 * n, 1e-14));
        assert!(close(f(ZeroStage::Stage1), 8.0 * n + 8.0 * n / pf, 1e-14));
        assert!(close(f(ZeroStage::Stage2), 4.0 * n + 12.0 * n / pf, 1e-14));
        assert!(close(f(ZeroStage::Stage3), 16.0 * n / pf, 1e-14));
    }
    assert_eq!(Footprint::mixed_adam().total(), 16.0);
    assert_eq!(Footprint::f32_adam().total(), 16.0);
}

#[test]
fn model_activation_and_tp_formulas() {
    // GPT-2 small: 12·12·768² + 50257·768 + 1024·768 = 124,318,464 parameters.
    let gpt2 = ModelShape::gpt(12, 768, 12, 1024, 50257).unwrap();
    assert_eq!(gpt2.params, 124_318_464.0);
    assert!(close(gpt2.block_params(), 12.0 * 768.0 * 768.0, 1e-12));
    // A bare parameter count gets a GPT-3-like shape: 7e9 → 32 layers × 4096, 32 heads.
    let inferred = ModelShape::from_params(N7B, 2048, 32000).unwrap();
    assert_eq!(
        (
            inferred.layers,
            inferred.hidden,
            inferred.heads,
            inferred.params
        ),
        (32, 4096, 32, N7B)
    );
    // Korthikanti et al.: s·b·h·(34 + 5·a·s/h) bytes per block, t = 1, 16-bit activations.
    let (s, h, a) = (2048.0, 4096.0, 32.0);
    let t1 = activation_bytes_per_layer(1, 2048, 4096, 32, 1, 2.0);
    assert_eq!(t1, s * h * (34.0 + 5.0 * a * s / h));
    // With t-way TP: s·b·h·(10 + 24/t + 5·a·s/(h·t)); f32 activations double it.
    let t8 = activation_bytes_per_layer(2, 2048, 4096, 32, 8, 4.0);
    assert!(close(
        t8,
        2.0 * s * 2.0 * h * (10.0 + 3.0 + 5.0 * a * s / (h * 8.0)),
        1e-12
    ));
    // TP: 2 + 2 all-reduces of b·s·h·bytes per block per microbatch, ring over t devices.
    let link = Link::gbps(400.0);
    let tp = tp_block_traffic(1, 2048, 4096, 2.0, 8, link);
    let msg = 2048.0 * 4096.0 * 2.0;
    assert_eq!((tp.allreduces, tp.message), (4, msg));
    assert!(close(tp.bytes, 4.0 * 2.0 * 7.0 / 8.0 * msg, 1e-12));
    assert!(close(tp.time, tp.bytes / 400e9, 1e-12));
    assert_eq!(tp_block_traffic(1, 2048, 4096, 2.0, 1, link).time, 0.0);
}

#[test]
fn step_estimate_terms() {
    // 7B, ZeRO-1 over 8 devices: step = compute (6·N·tokens / (8 · 300 TFLOP/s)), the
    // all-reduce hides behind the backward pass.
    let (m, c) = (seven_b(), cluster(1, 80.0));
    let layout = Mesh {
        zero: 1,
        ..Mesh::data_parallel(8, 8)
    };
    let st = estimate(
        &m,
        &Footprint::mixed_adam(),
        &c,
        &layout,
        64,
        Overlap::Backward,
    )
    .unwrap();
    let compute = 6.0 * N7B * 64.0 * 2048.0 / (8.0 * 300e12);
    assert!(close(st.compute, compute, 1e-12));
    assert_eq!(
        (
            st.micro_batch,
            st.tp_comm,
            st.pp_comm,
            st.bubble,
            st.dp_exposed
        ),
        (1, 0.0, 0.0, 0.0, 0.0)
    );
    assert!(close(st.step, compute, 1e-12));
    // Without overlap the whole DP traffic adds to the step.
    let none = estimate(&m, &Footprint::mixed_adam(), &c, &layout, 64, Overlap::None).unwrap();
    assert!(close(none.step, compute + none.dp_comm, 1e-12));
    // A pipeline multiplies its work by 1/(1 − bubble).
    let pl = Mesh {
        dp: 2,
        pp: 4,
        zero: 0,
        schedule: ScheduleKind::OneFOneB,
        microbatches: 8,
        tp: 1,
        chunks: 1,
    };
    let st = estimate(&m, &Footprint::mixed_adam(), &c, &pl, 64, Overlap::None).unwrap();
    let work = st.compute + st.tp_comm + st.pp_comm;
    assert!(close(st.bubble, 3.0 / 11.0, 1e-15));
    assert!(close(st.step, work / (1.0 - st.bubble) + st.dp_comm, 1e-12));
}

// ---------------------------------------------------------------- the decision guide

/// (1) A small model fits on one device → pure data parallel, no ZeRO.
#[test]
fn guide_small_model_is_pure_data_parallel() {
    let m = ModelShape::gpt(12, 768, 12, 1024, 50257).unwrap(); // GPT-2 small
    let p = plan(&request(m, cluster(1, 80.0), 64)).unwrap();
    let l = p.recommended.layout;
    assert_eq!(p.recommended.family(), Family::PureDp, "{}", l.label());
    assert_eq!((l.dp, l.tp, l.pp, l.zero), (8, 1, 1, 0));
    assert!(p.verdicts[0].chosen && p.verdicts[0].reason.starts_with("chosen"));
}

/// (2) Adam state does not fit replicated (16N = 112 GB > 80 GB) but params + grads do
/// (4N = 28 GB) → ZeRO over the 8 devices of one node.
#[test]
fn guide_optimizer_state_too_big_is_zero() {
    let (m, c) = (seven_b(), cluster(1, 80.0));
    let replicated = zero_state_bytes(m.params, 1, ZeroStage::Stage0, MIXED);
    assert!(
        replicated > c.mem_per_device && 4.0 * m.params < c.mem_per_device,
        "premise"
    );
    assert_eq!(replicated, 112.0 * GB);
    let p = plan(&request(m, c, 64)).unwrap();
    let l = p.recommended.layout;
    assert_eq!(p.recommended.family(), Family::Zero, "{}", l.label());
    assert_eq!((l.dp, l.tp, l.pp), (8, 1, 1));
    assert_ne!(l.zero, 0);
    assert!(
        p.verdicts[0].reason.starts_with("does not fit"),
        "{}",
        p.verdicts[0].reason
    );
    assert!(
        p.verdicts[0].reason.contains("GB over 80.0 GB"),
        "{}",
        p.verdicts[0].reason
    );
}

/// (3) One block's activations alone (135.7 GB at b = 1, seq 16384, hidden 12288) exceed a
/// 64 GB device, so no ZeRO stage helps → tensor parallel, inside the node.
#[test]
fn guide_layer_too_big_is_tensor_parallel_inside_a_node() {
    let m = ModelShape::gpt(2, 12288, 96, 16384, 50257).unwrap();
    let c = cluster(1, 64.0);
    let one_layer =
        activation_bytes_per_layer(1, 16384, 12288, 96, 1, 2.0) + 4.0 * m.block_params();
    assert!(
        one_layer > c.mem_per_device,
        "premise: one layer's weights + activations do not fit"
    );
    let p = plan(&request(m, c.clone(), 64)).unwrap();
    let l = p.recommended.layout;
    assert_eq!(p.recommended.family(), Family::Tensor, "{}", l.label());
    assert_eq!(l.pp, 1);
    assert!(l.tp > 1 && l.tp <= c.devices_per_node);
    for f in [0, 1, 3] {
        assert!(
            p.verdicts[f].reason.starts_with("does not fit"),
            "{}",
            p.verdicts[f].reason
        );
    }
}

/// (4) A very deep model (96 × 8192, 77.7e9 params) on 4 nodes × 8 × 80 GB with 25 GB/s
/// between nodes. Nothing fits unless the model states are sharded over all 32 devices, and
/// TP stays inside a node, so the rest must be ZeRO-3 across nodes or pipeline stages across
/// nodes. (In this model 1F1B's first stage holds p microbatches of L/p layers, the same
/// activations as no pipeline, so ZeRO-3 + TP fits as well as the pipeline does; it loses on
/// time: its parameter gathers and gradient reduce-scatters repeat every microbatch over the
/// slow inter-node link.) → pipeline with m ≥ 4p.
#[test]
fn guide_very_deep_model_is_pipeline_with_many_microbatches() {
    let m = ModelShape::gpt(96, 8192, 64, 2048, 50257).unwrap();
    let c = cluster(4, 80.0);
    let p = plan(&request(m, c.clone(), 64)).unwrap();
    let l = p.recommended.layout;
    assert_eq!(p.recommended.family(), Family::Pipeline, "{}", l.label());
    assert!(l.pp > 1 && l.microbatches >= 4 * l.pp, "{}", l.label());
    assert!(l.tp <= c.devices_per_node);
    // ZeRO alone does not fit; ZeRO-3 + TP fits but is far slower than the margin.
    assert!(
        p.verdicts[1].reason.starts_with("does not fit"),
        "{}",
        p.verdicts[1].reason
    );
    let tp_best = p
        .ranked
        .iter()
        .find(|c| c.family() == Family::Tensor)
        .expect("a TP layout fits");
    assert_eq!(tp_best.layout.zero, 3);
    assert!(tp_best.step.step > 2.0 * p.recommended.step.step);
}

#[test]
fn plan_ranks_fitting_layouts_and_explains_every_family() {
    let req = request(seven_b(), cluster(2, 80.0), 64);
    let p = plan(&req).unwrap();
    assert_eq!(p.verdicts.len(), 4);
    assert_eq!(p.verdicts.iter().filter(|v| v.chosen).count(), 1);
    assert!(p.ranked.iter().all(|c| c.fits(&req.cluster)));
    assert_eq!(p.ranked[0], p.recommended);
    assert!(p.ranked[1..]
        .windows(2)
        .all(|w| w[0].step.step <= w[1].step.step));
    let fastest = p
        .ranked
        .iter()
        .map(|c| c.step.step)
        .fold(f64::INFINITY, f64::min);
    assert!(p.recommended.step.step <= fastest * (1.0 + SIMPLICITY_MARGIN));
    // Every enumerated layout keeps TP inside a node and uses all devices.
    for c in enumerate(&req).unwrap() {
        assert!(c.layout.tp <= 8 && c.layout.devices() == 16);
    }
}

/// The closed form of "does a group cross nodes" against a rank-by-rank check, for every
/// layout of small clusters (placement: tp innermost, then pp, then dp).
#[test]
fn placement_matches_a_rank_by_rank_check() {
    let brute = |n: usize, dpn: usize, stride: usize, size: usize| {
        (0..n)
            .filter(|r| (r / stride).is_multiple_of(size))
            .any(|r| r / dpn != (r + (size - 1) * stride) / dpn)
    };
    for nodes in 1..=4 {
        for dpn in 1..=8 {
            let c =
                Cluster::new(nodes, dpn, 80.0, Link::gbps(400.0), Link::gbps(25.0), 300.0).unwrap();
            let n = c.devices();
            for tp in divisors(n) {
                for pp in divisors(n / tp) {
                    let dp = n / (tp * pp);
                    for (stride, size) in [(1, tp), (tp, pp), (tp * pp, dp)] {
                        assert_eq!(
                            c.group_spans_nodes(stride, size),
                            brute(n, dpn, stride, size),
                            "{nodes}×{dpn}: stride {stride} size {size}"
                        );
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- monotonicity

#[test]
fn more_devices_never_raise_zero3_memory() {
    for pgk in [MIXED, (4.0, 4.0, 8.0)] {
        let mut last = f64::INFINITY;
        for p in 1..=4096 {
            let b = zero_state_bytes(N7B, p, ZeroStage::Stage3, pgk);
            assert!(b <= last, "p = {p}");
            last = b;
        }
    }
    // Whole layouts: ZeRO-3 over more nodes, same microbatch size.
    let m = seven_b();
    let mut last = f64::INFINITY;
    for nodes in 1..=16 {
        let c = cluster(nodes, 80.0);
        let d = c.devices();
        let layout = Mesh {
            zero: 3,
            ..Mesh::data_parallel(d, 1)
        };
        let b = layout.validate_on(&m, &c, d).unwrap();
        let mem = layout.memory(&m, &Footprint::mixed_adam(), b).total;
        assert!(mem <= last, "{nodes} nodes: {mem} > {last}");
        last = mem;
    }
}

#[test]
fn more_microbatches_never_raise_the_bubble() {
    let schedules = [
        (ScheduleKind::GPipe, 1),
        (ScheduleKind::OneFOneB, 1),
        (ScheduleKind::Interleaved, 2),
        (ScheduleKind::Interleaved, 4),
        (ScheduleKind::ZeroBubbleH1, 1),
    ];
    for (kind, v) in schedules {
        for p in 1..=32 {
            let mut last = 1.0;
            for m in 1..=256 {
                let b = bubble(kind, v, p, m);
                assert!(
                    (0.0..1.0).contains(&b) && b <= last,
                    "{} p={p} m={m}",
                    label(kind, v)
                );
                last = b;
            }
        }
    }
    // And ZB-H1 ≤ interleaved(v=2) ≤ 1F1B everywhere.
    for p in 1..=16 {
        for m in 1..=64 {
            let (z, i, o) = (
                bubble(ScheduleKind::ZeroBubbleH1, 1, p, m),
                bubble(ScheduleKind::Interleaved, 2, p, m),
                bubble(ScheduleKind::OneFOneB, 1, p, m),
            );
            assert!(z <= i && i <= o);
        }
    }
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_inputs_are_config_errors_that_say_what_to_change() {
    is_config(
        ModelShape::gpt(0, 768, 12, 1024, 50257).unwrap_err(),
        "--layers",
    );
    is_config(
        ModelShape::gpt(12, 768, 7, 1024, 50257).unwrap_err(),
        "heads",
    );
    is_config(
        ModelShape::with_params(1e6, 12, 768, 12, 1024, 50257).unwrap_err(),
        "raise --params",
    );
    is_config(
        ModelShape::from_params(f64::NAN, 1024, 50257).unwrap_err(),
        "--params",
    );
    is_config(
        Cluster::new(0, 8, 80.0, Link::gbps(400.0), Link::gbps(25.0), 300.0).unwrap_err(),
        "--nodes",
    );
    is_config(
        Cluster::new(1, 8, -1.0, Link::gbps(400.0), Link::gbps(25.0), 300.0).unwrap_err(),
        "--mem-gb",
    );
    is_config(
        Cluster::new(1, 8, 80.0, Link::gbps(0.0), Link::gbps(25.0), 300.0).unwrap_err(),
        "intra-node",
    );
    is_config(
        Cluster::new(1, 8, 80.0, Link::gbps(400.0), Link::gbps(25.0), 0.0).unwrap_err(),
        "--tflops",
    );
    let mut prec = Footprint::mixed_adam();
    prec.optim = -1.0;
    is_config(prec.validate().unwrap_err(), "(K)");

    let (m, c, mixed) = (seven_b(), cluster(1, 80.0), Footprint::mixed_adam());
    let est = |l: Mesh, batch| estimate(&m, &mixed, &c, &l, batch, Overlap::Backward).unwrap_err();
    is_config(est(Mesh::data_parallel(4, 1), 64), "product is 8");
    is_config(
        est(
            Mesh {
                tp: 3,
                dp: 1,
                pp: 1,
                ..Mesh::data_parallel(1, 1)
            },
            64,
        ),
        "product",
    );
    is_config(est(Mesh::data_parallel(8, 3), 64), "multiple of 24");
    is_config(
        est(
            Mesh {
                dp: 1,
                pp: 8,
                schedule: ScheduleKind::Interleaved,
                chunks: 2,
                ..Mesh::data_parallel(1, 12)
            },
            96,
        ),
        "multiple of pp",
    );
    is_config(
        est(
            Mesh {
                dp: 1,
                pp: 8,
                schedule: ScheduleKind::Interleaved,
                chunks: 8,
                ..Mesh::data_parallel(1, 8)
            },
            64,
        ),
        "layers",
    );
    is_config(
        est(
            Mesh {
                dp: 1,
                tp: 8,
                ..Mesh::data_parallel(1, 1)
            },
            0,
        ),
        "global batch",
    );

    // No layout fits: the error says by how much.
    let tiny = plan(&request(seven_b(), cluster(1, 10.0), 64)).unwrap_err();
    is_config(tiny, "GB over");
    // No layout splits the batch (a prime batch on 8 devices of a 1-layer, 1-head model).
    let narrow = ModelShape::gpt(1, 64, 1, 16, 100).unwrap();
    is_config(
        plan(&request(narrow, cluster(1, 80.0), 7)).unwrap_err(),
        "multiple of 8",
    );
    is_config(
        plan(&request(seven_b(), cluster(1, 80.0), 0)).unwrap_err(),
        "--global-batch",
    );
}
