//! The planner checked on the trainer (`examples/plan --validate`). Without a device: the
//! engine's partition, its tensor-parallel bytes against the cost model, ZeRO-2/3 refused
//! with tensor or pipeline stages (as the engine refuses them), the
//! calibration inverting the compute term. On four virtual devices, a tiny GPT: the calibrated
//! rate is positive and finite, every layout run is a valid plan and a valid engine mesh, the
//! bytes the engine's DP and TP communicator ledgers measured equal the ring formula
//! `2(d−1)/d·S` on its own buffers (interleaved chunks included) and the cost model's
//! prediction wherever conventions match; where d does not divide a gradient bucket's
//! 64-element blocks the busiest rank measurably sends more than the formula (the group as a
//! whole exactly `2(d−1)·S`).

use triaxis::cost::comm::ring_allreduce_bytes;
use triaxis::cost::validate::{
    calibrate, cluster, compare, expect, predicted_tp_bytes, ring_formula_dp_bytes, runnable,
    select, shape_of, step_flops, Conventions, Expected, Measured, Row,
};
use triaxis::cost::{plan, Footprint, MeshCost, Overlap, PlanRequest};
use triaxis::data::Corpus;
use triaxis::gpu;
#[path = "../examples/support/engine_steps.rs"]
mod engine_steps;
#[path = "../examples/plan/measure.rs"]
mod plan_measure;
use plan_measure::measure;
use triaxis::mesh::Mesh;
use triaxis::model::GptConfig;
use triaxis::model::Precision::{Bf16, F32};
use triaxis::parallel::bucket::BUCKET_BYTES;
use triaxis::parallel::shard::Grid;
use triaxis::pipeline::{Link, ScheduleKind};

fn model(corpus: &Corpus) -> GptConfig {
    GptConfig {
        vocab: corpus.vocab.size(),
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 4,
    }
}

/// The cost model's view of a 4 × 128 GPT with a 16-token vocabulary, seq 32.
fn gpt() -> GptConfig {
    GptConfig {
        vocab: 16,
        ctx: 32,
        channels: 128,
        heads: 4,
        layers: 4,
    }
}

/// The ring formula `2(d−1)/d·S` (S = 4 · padded parameters) of each of a replica's devices,
/// summed over them: what `StepCosts::dp_bytes` (a replica's devices' data-parallel ledgers,
/// summed) must measure when the formula is exact per rank.
fn replica_ring_formula(exp: &Expected, dp: usize) -> f64 {
    exp.devices
        .iter()
        .map(|dev| ring_allreduce_bytes(4.0 * dev.padded as f64, dp))
        .sum()
}

#[test]
fn pure_data_parallel_ledgers_measure_the_ring_formula() {
    let mesh = Mesh {
        dp: 4,
        microbatches: 2,
        ..Mesh::default()
    };
    // the partition: one device per replica holding the whole model
    let e = expect(&gpt(), &mesh, 2, 32, F32).unwrap();
    assert_eq!(e.devices.len(), 1);
    assert_eq!(e.devices[0].params, gpt().param_count());
    assert_eq!(e.dp_bytes_device, e.dp_bytes_ledger);
    assert_eq!(e.tp_bytes, 0);
    // measured: the engine's data-parallel ledgers over four devices
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let corpus = Corpus::throughput().unwrap();
    let m = model(&corpus);
    let exp = expect(&m, &mesh, 2, m.ctx, F32).unwrap();
    let got = measure(&gpus, &m, &mesh, 2, &Link::nvlink(), 1, &corpus, F32).unwrap();
    // 4 | the bucket's 64-element blocks: every rank sends exactly 2(d−1)/d·S
    assert_eq!(exp.devices[0].padded % (64 * 4), 0);
    let ring = ring_formula_dp_bytes(&exp, 4);
    println!(
        "dp 4: ledger {} B, ring formula {ring} B ({} padded parameters)",
        got.dp_bytes, exp.devices[0].padded
    );
    assert_eq!(got.dp_bytes as f64, ring, "measured vs 2(d−1)/d·S");
    assert_eq!(got.dp_bytes, exp.dp_bytes_ledger);
    assert_eq!(got.tp_bytes, 0);
}

/// d = 3 does not divide the 236 blocks of 64 elements of the model's one gradient bucket: the
/// engine reduces it with 64-aligned chunks of 78, 79, 79 blocks, rank r sends
/// `4·(2n − |c_r| − |c_(r+1)|)`, and the busiest sends more than `2(d−1)/d·S`, the group's
/// total being exactly `2(d−1)·S`. (`expect`'s per-rank count, floor chunks of elements rather
/// than of 64-element blocks, is printed beside it.)
#[test]
#[allow(clippy::single_range_in_vec_init)] // a list of one unit
fn uneven_aligned_chunks_make_the_busiest_rank_exceed_the_ring_formula() {
    let Some(gpus) = gpu::test_gpus(3) else {
        return;
    };
    let corpus = Corpus::throughput().unwrap();
    let m = model(&corpus);
    let (d, mesh) = (
        3,
        Mesh {
            dp: 3,
            ..Mesh::default()
        },
    );
    let exp = expect(&m, &mesh, 2, m.ctx, F32).unwrap();
    let n = exp.devices[0].padded;
    assert!(4 * n <= BUCKET_BYTES, "one gradient bucket");
    assert_ne!((n / 64) % d, 0, "d must not divide the blocks");
    let grid = Grid::new(&[0..n], n, d).unwrap();
    let rank = |r: usize| 4 * (2 * n - grid.shard_len(r) - grid.shard_len((r + 1) % d)) as u64;
    let busiest = (0..d).map(rank).max().unwrap();
    let group: u64 = (0..d).map(rank).sum();
    assert_eq!(group, 2 * (d as u64 - 1) * 4 * n as u64);
    let got = measure(&gpus, &m, &mesh, 2, &Link::nvlink(), 1, &corpus, F32).unwrap();
    let ring = ring_formula_dp_bytes(&exp, d);
    println!(
        "dp 3: ledger {} B, 64-aligned ring {busiest} B, ring formula {ring:.2} B \
         (+{:.2} B), expect {} B; shards {:?} of {n}",
        got.dp_bytes,
        got.dp_bytes as f64 - ring,
        exp.dp_bytes_ledger,
        (0..d).map(|r| grid.shard_len(r)).collect::<Vec<_>>()
    );
    assert_eq!(got.dp_bytes, busiest, "measured vs the 64-aligned ring");
    assert_eq!(
        exp.dp_bytes_ledger, busiest,
        "expected bytes count the same chunks"
    );
    assert!(got.dp_bytes as f64 > ring);
    // the two chunks a rank keeps are each at most 64 elements short of n/d
    assert!(got.dp_bytes as f64 - ring < 2.0 * 64.0 * 4.0);
}

#[test]
fn tensor_parallel_bytes_match_the_cost_model_and_zero_is_refused() {
    let mesh = Mesh {
        tp: 2,
        pp: 2,
        microbatches: 4,
        ..Mesh::default()
    };
    let e = expect(&gpt(), &mesh, 2, 32, F32).unwrap();
    assert_eq!(e.devices.len(), 4);
    let layout = Mesh {
        dp: 1,
        tp: 2,
        pp: 2,
        zero: 0,
        schedule: ScheduleKind::OneFOneB,
        microbatches: 4,
        chunks: 1,
    };
    let shape = shape_of(&gpt()).unwrap();
    let p = predicted_tp_bytes(&shape, &Footprint::f32_adam(), &layout, 2);
    assert_eq!(e.tp_bytes as f64, p);
    assert_eq!(layout, mesh);
    runnable(&layout).unwrap();
    let dp2 = Mesh { dp: 2, ..layout };
    runnable(&Mesh { zero: 1, ..dp2 }).unwrap();
    // every ZeRO stage composes with tensor and pipeline stages (FSDP + TP + PP); ZeRO-3 not
    // with a zero-bubble split, which defers the weight gradients past the block's gather
    for zero in [2, 3] {
        runnable(&Mesh { zero, ..dp2 }).unwrap();
    }
    let zb = Mesh {
        zero: 3,
        schedule: ScheduleKind::ZeroBubbleH1,
        ..dp2
    };
    let err = runnable(&zb).unwrap_err().to_string();
    assert!(err.contains("is not offered"), "{err}");
    runnable(&Mesh { zero: 2, ..zb }).unwrap();
}

#[test]
fn calibration_inverts_the_compute_term() {
    let shape = shape_of(&gpt()).unwrap();
    let rate = calibrate(&shape, 512, 0.25).unwrap();
    assert!((step_flops(&shape, 512) / rate - 0.25).abs() < 1e-15);
    assert!(calibrate(&shape, 512, 0.0).is_err());
    assert!(calibrate(&shape, 512, f64::NAN).is_err());
    assert!(calibrate(&shape, 0, 1.0).is_err());
}

/// The checks every measured row must pass.
fn check(row: &Row, exp: &Expected, got: &Measured, layers: usize) {
    let name = row.candidate.layout.label().to_string();
    assert!(row.exact, "{name}: {:?}", row.mismatch);
    // data parallel: the bytes the ledgers measured are the ring formula on the engine's own
    // buffers, exact per rank here: d = 2 always, d = 4 divides the 236 blocks of 64 elements
    // of the one-stage model's only gradient bucket (ZeRO-1/2's reduce-scatter + all-gather
    // send what the all-reduce sends; ZeRO-3's block gathers are `expect`'s, checked in `exact`)
    if row.mesh.zero < 3 {
        assert_eq!(
            got.dp_bytes as f64,
            replica_ring_formula(exp, row.mesh.dp),
            "{name}: DP ledger vs 2(d−1)/d·S"
        );
    }
    assert_eq!(got.dp_bytes > 0, row.mesh.dp > 1, "{name}");
    let layers_per_device: Vec<usize> = exp.devices.iter().map(|d| d.layers).collect();
    // tensor parallel: the same convention on both sides when every stage holds L/pp layers
    if layers_per_device.iter().all(|&l| l * row.mesh.pp == layers) {
        assert_eq!(row.tp_bytes.predicted, row.tp_bytes.measured, "{name}: TP");
    }
    assert_eq!(row.tp_bytes.measured > 0.0, row.mesh.tp > 1, "{name}");
    assert!(
        row.step.measured > 0.0 && row.step.measured.is_finite(),
        "{name}"
    );
    assert!(row.state_bytes.measured > 0.0 && row.state_bytes.predicted > 0.0);
    assert_eq!(row.bubble.1.is_some(), row.mesh.pp > 1, "{name}");
}

#[test]
fn the_planners_top_layouts_run_and_send_the_predicted_bytes() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let corpus = Corpus::throughput().unwrap();
    let m = model(&corpus);
    let (global, link) = (8, Link::nvlink());
    let shape = shape_of(&m).unwrap();
    let conv = Conventions::of(&m).unwrap();
    assert_eq!(
        conv.cost_params as usize + conv.norms_biases + conv.untied_head,
        conv.trainer_params
    );
    let cal_mesh = Mesh {
        microbatches: 4,
        ..Mesh::default()
    };
    let cal = measure(&gpus, &m, &cal_mesh, global / 4, &link, 1, &corpus, F32).unwrap();
    let rate = calibrate(&shape, global * m.ctx, cal.step).unwrap();
    println!("calibrated {:.3} GFLOP/s", rate / 1e9);
    assert!(rate.is_finite() && rate > 0.0);
    let req = PlanRequest {
        model: shape.clone(),
        precision: Footprint::f32_adam(),
        cluster: cluster(4, &link, 80.0, rate).unwrap(),
        global_batch: global,
        overlap: Overlap::None,
    };
    let p = plan(&req).unwrap();
    let (run, skipped) = select(&p, 5);
    assert_eq!(run.len(), 5);
    assert!(skipped
        .iter()
        .all(|c| c.layout.zero == 3 && c.layout.schedule.split_backward()));
    for c in &run {
        let mesh = c.layout;
        runnable(&mesh).unwrap();
        let b = c
            .layout
            .validate_on(&req.model, &req.cluster, global)
            .unwrap();
        assert_eq!(b, c.step.micro_batch);
        mesh.validate(&m, b, m.ctx, 4).unwrap();
        let exp = expect(&m, &mesh, b, m.ctx, F32).unwrap();
        let got = measure(&gpus, &m, &mesh, b, &link, 1, &corpus, F32).unwrap();
        let row = compare(c, &shape, &req.precision, &mesh, &exp, &got);
        println!(
            "{}: step {:.1} / {:.1} ms, dp ledger {} B (ring formula {} B), tp {} B, state {} B",
            c.layout.label(),
            row.step.predicted * 1e3,
            row.step.measured * 1e3,
            got.dp_bytes,
            replica_ring_formula(&exp, mesh.dp),
            row.tp_bytes.measured,
            row.state_bytes.measured
        );
        check(&row, &exp, &got, m.layers);
    }
}

#[test]
fn interleaved_chunks_send_the_ring_volumes_of_both_stages() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let corpus = Corpus::throughput().unwrap();
    let m = model(&corpus);
    let mesh = Mesh {
        tp: 2,
        pp: 2,
        schedule: ScheduleKind::Interleaved,
        microbatches: 2,
        chunks: 2,
        ..Mesh::default()
    };
    let exp = expect(&m, &mesh, 2, m.ctx, F32).unwrap();
    // device 0 holds model stages 0 and 2: two layers in two chunks
    assert_eq!(exp.devices[0].chunks.len(), 2);
    assert!(exp.devices.iter().all(|d| d.layers == 2));
    let got = measure(&gpus, &m, &mesh, 2, &Link::pcie(), 1, &corpus, F32).unwrap();
    assert_eq!(got.tp_bytes, exp.tp_bytes);
    assert_eq!(got.dp_bytes, 0);
    let want: Vec<String> = exp.devices.iter().map(|d| d.blocks()).collect();
    assert_eq!(got.blocks, want);
    assert!(got.bubble.is_some());
    // two replicas of the same: the ledger sums each replica's four all-reduces
    let dp = Mesh {
        dp: 2,
        tp: 1,
        ..mesh
    };
    let gpus4 = &gpus[..4];
    let exp = expect(&m, &dp, 2, m.ctx, F32).unwrap();
    let got = measure(gpus4, &m, &dp, 2, &Link::pcie(), 1, &corpus, F32).unwrap();
    assert_eq!(got.dp_bytes, exp.dp_bytes_ledger);
    assert_eq!(got.dp_bytes as f64, replica_ring_formula(&exp, 2));
    assert!(exp.dp_bytes_device < exp.dp_bytes_ledger);
}

/// ZeRO 0–3 over a flat group of 2 and 4: the memory ledger's model state and the
/// data-parallel ledgers' bytes equal what `expect` derives from the shard grid, and, where
/// the ranks' shards are even, the ZeRO formulas (state 16N, 4N + 12N/d, 2N + 14N/d, 16N/d in
/// f32 Adam; bytes per rank the group's (d−1)·4N per collective over d).
#[test]
fn zero_layouts_measure_the_state_and_bytes_expect_derives() {
    use triaxis::cost::zero::{formula_bytes, predicted_comm_bytes, stage};
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let corpus = Corpus::throughput().unwrap();
    let m = model(&corpus);
    let n = m.layout(&m.blocks()).total;
    for d in [2, 4] {
        for zero in 0..4 {
            let mesh = Mesh {
                dp: d,
                zero,
                microbatches: 2,
                ..Mesh::default()
            };
            runnable(&mesh).unwrap();
            let exp = expect(&m, &mesh, 2, m.ctx, F32).unwrap();
            let got = measure(&gpus, &m, &mesh, 2, &Link::nvlink(), 1, &corpus, F32).unwrap();
            let st = stage(zero).unwrap();
            let stored = m.layout(&m.blocks());
            let spans = m.block_spans(&m.blocks(), 1, &stored).unwrap();
            let slot = spans.iter().map(|s| s.len()).max().unwrap();
            let formula = formula_bytes(st, n, d, slot);
            let comm = predicted_comm_bytes(st, n, d, 2) / d as u64;
            println!(
                "dp {d} ZeRO-{zero}: state {} B (expect {} B, formula {formula:.0} B), dp bytes \
                 {} B (expect {} B, formula {comm} B)",
                got.state_bytes, exp.state_bytes, got.dp_bytes, exp.dp_bytes_ledger
            );
            assert_eq!(
                got.state_bytes, exp.state_bytes,
                "dp {d} ZeRO-{zero}: state"
            );
            assert_eq!(
                got.dp_bytes, exp.dp_bytes_ledger,
                "dp {d} ZeRO-{zero}: bytes"
            );
            println!(
                "dp {d} ZeRO-{zero}: activations {} B (predicted {} B)",
                got.activation_bytes, exp.activation_bytes
            );
            assert_eq!(
                got.activation_bytes, exp.activation_bytes,
                "dp {d} ZeRO-{zero}: activation peak"
            );
            if n.is_multiple_of(64 * d) {
                assert_eq!(got.state_bytes as f64, formula, "dp {d} ZeRO-{zero}");
                assert_eq!(got.dp_bytes, comm, "dp {d} ZeRO-{zero}");
            }
        }
    }
}

/// bf16 mixed precision: for every kind of layout the memory ledger's model state (2 + 2 + 12
/// bytes per element of the 128-aligned storage layout, ZeRO's shares of it), the activation
/// peak, the data- and tensor-parallel ledgers (2 bytes per element) and the placement equal
/// what `expect` derives, and each byte figure is below f32's.
#[test]
fn bf16_layouts_measure_what_expect_derives() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let corpus = Corpus::throughput().unwrap();
    let m = model(&corpus);
    let flat = |dp, zero| Mesh {
        dp,
        zero,
        microbatches: 2,
        ..Mesh::default()
    };
    // (every ZeRO stage's bf16 state and bytes are also pinned in tests/precision.rs)
    let meshes = [
        flat(4, 3),
        Mesh {
            tp: 2,
            ..flat(2, 0)
        },
        Mesh {
            pp: 2,
            ..flat(2, 1)
        },
    ];
    for mesh in meshes {
        let what = mesh.describe();
        let exp = expect(&m, &mesh, 2, m.ctx, Bf16).unwrap();
        let got = measure(&gpus, &m, &mesh, 2, &Link::nvlink(), 1, &corpus, Bf16).unwrap();
        let f32_exp = expect(&m, &mesh, 2, m.ctx, F32).unwrap();
        println!(
            "{what} bf16: state {} B (expect {}, f32 {}), activations {} B (expect {}), dp {} B \
             (expect {}, f32 {}), tp {} B (expect {}, f32 {})",
            got.state_bytes,
            exp.state_bytes,
            f32_exp.state_bytes,
            got.activation_bytes,
            exp.activation_bytes,
            got.dp_bytes,
            exp.dp_bytes_ledger,
            f32_exp.dp_bytes_ledger,
            got.tp_bytes,
            exp.tp_bytes,
            f32_exp.tp_bytes
        );
        assert_eq!(got.state_bytes, exp.state_bytes, "{what}: state");
        assert_eq!(
            got.activation_bytes, exp.activation_bytes,
            "{what}: activations"
        );
        assert_eq!(got.dp_bytes, exp.dp_bytes_ledger, "{what}: dp bytes");
        assert_eq!(got.tp_bytes, exp.tp_bytes, "{what}: tp bytes");
        let want: Vec<String> = (0..mesh.dp)
            .flat_map(|_| exp.devices.iter().map(|d| d.blocks()))
            .collect();
        assert_eq!(got.blocks, want, "{what}: placement");
        assert!(exp.dp_bytes_ledger < f32_exp.dp_bytes_ledger, "{what}");
        assert!(exp.activation_bytes < f32_exp.activation_bytes, "{what}");
        if mesh.tp > 1 {
            assert_eq!(2 * exp.tp_bytes, f32_exp.tp_bytes, "{what}: half of f32's");
        }
    }
}
