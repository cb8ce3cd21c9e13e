//! The planner checked on the trainer (`examples/plan --validate`). Without a device: the
//! expected bytes of the engine's partition against the ring formula and the cost model, ZeRO
//! refused, the calibration inverting the compute term. On four virtual devices, a tiny GPT:
//! the calibrated rate is positive and finite, every layout run is a valid plan and a valid
//! engine mesh, the engine's DP and TP ledgers equal the ring volumes of its own buffers
//! (interleaved chunks included), and the cost model's prediction wherever conventions match.

use triaxis::cost::validate::{
    calibrate, cluster, compare, expect, measure, mesh_of, predicted_tp_bytes,
    ring_formula_dp_bytes, select, shape_of, step_flops, Conventions, Row,
};
use triaxis::cost::{plan, Layout, Overlap, PlanRequest, Precision, Schedule, ZeroStage};
use triaxis::data::Corpus;
use triaxis::gpu;
use triaxis::mesh::Mesh;
use triaxis::model::GptConfig;
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

#[test]
fn pure_data_parallel_buffers_match_the_ring_formula() {
    let mesh = Mesh {
        dp: 4,
        microbatches: 2,
        ..Mesh::default()
    };
    let e = expect(&gpt(), &mesh, 2, 32).unwrap();
    assert_eq!(e.devices.len(), 1);
    assert_eq!(e.devices[0].params, gpt().param_count());
    assert_eq!(e.dp_bytes_device, e.dp_bytes_ledger);
    assert_eq!(e.dp_bytes_device as f64, ring_formula_dp_bytes(&e, 4));
    assert_eq!(e.tp_bytes, 0);
}

#[test]
fn tensor_parallel_bytes_match_the_cost_model_and_zero_is_refused() {
    let mesh = Mesh {
        tp: 2,
        pp: 2,
        microbatches: 4,
        ..Mesh::default()
    };
    let e = expect(&gpt(), &mesh, 2, 32).unwrap();
    assert_eq!(e.devices.len(), 4);
    let layout = Layout {
        dp: 1,
        tp: 2,
        pp: 2,
        zero: ZeroStage::Stage0,
        schedule: Schedule::OneFOneB,
        microbatches: 4,
    };
    let shape = shape_of(&gpt()).unwrap();
    let p = predicted_tp_bytes(&shape, &Precision::f32_adam(), &layout, 2);
    assert_eq!(e.tp_bytes as f64, p);
    assert_eq!(mesh_of(&layout).unwrap(), mesh);
    for zero in [ZeroStage::Stage1, ZeroStage::Stage2, ZeroStage::Stage3] {
        let z = Layout { zero, ..layout };
        let err = mesh_of(&z).unwrap_err().to_string();
        assert!(err.contains("not available"), "{err}");
    }
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
fn check(row: &Row, layers_per_device: &[usize], layers: usize) {
    let name = row.candidate.layout.to_string();
    assert!(row.exact, "{name}: {:?}", row.mismatch);
    // data parallel: the cost model's ring formula on the engine's own count is exact
    assert_eq!(row.dp_ring_formula, row.dp_bytes.measured, "{name}: DP");
    assert_eq!(row.dp_bytes.measured > 0.0, row.mesh.dp > 1, "{name}");
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
    let cal = measure(&gpus, &m, &cal_mesh, global / 4, &link, 1, &corpus).unwrap();
    let rate = calibrate(&shape, global * m.ctx, cal.step).unwrap();
    println!("calibrated {:.3} GFLOP/s", rate / 1e9);
    assert!(rate.is_finite() && rate > 0.0);
    let req = PlanRequest {
        model: shape.clone(),
        precision: Precision::f32_adam(),
        cluster: cluster(4, &link, 80.0, rate).unwrap(),
        global_batch: global,
        overlap: Overlap::None,
    };
    let p = plan(&req).unwrap();
    let (run, skipped) = select(&p, 5);
    assert_eq!(run.len(), 5, "dp·tp·pp ∈ 4·1·1, 2·2·1, 2·1·2, 1·2·2, 1·1·4");
    assert!(skipped.iter().all(|c| c.layout.zero.index() > 0));
    for c in &run {
        let mesh = mesh_of(&c.layout).unwrap();
        let b = c.layout.validate(&req.model, &req.cluster, global).unwrap();
        assert_eq!(b, c.step.micro_batch);
        mesh.validate(&m, b, m.ctx, 4).unwrap();
        let exp = expect(&m, &mesh, b, m.ctx).unwrap();
        let got = measure(&gpus, &m, &mesh, b, &link, 1, &corpus).unwrap();
        let row = compare(c, &shape, &req.precision, &mesh, &exp, &got);
        println!(
            "{}: step {:.1} / {:.1} ms, dp {} B, tp {} B, state {} B",
            c.layout,
            row.step.predicted * 1e3,
            row.step.measured * 1e3,
            row.dp_bytes.measured,
            row.tp_bytes.measured,
            row.state_bytes.measured
        );
        let layers: Vec<usize> = exp.devices.iter().map(|d| d.layers).collect();
        check(&row, &layers, m.layers);
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
    let exp = expect(&m, &mesh, 2, m.ctx).unwrap();
    // device 0 holds model stages 0 and 2: two layers in two chunks
    assert_eq!(exp.devices[0].chunks.len(), 2);
    assert!(exp.devices.iter().all(|d| d.layers == 2));
    let got = measure(&gpus, &m, &mesh, 2, &Link::pcie(), 1, &corpus).unwrap();
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
    let exp = expect(&m, &dp, 2, m.ctx).unwrap();
    let got = measure(gpus4, &m, &dp, 2, &Link::pcie(), 1, &corpus).unwrap();
    assert_eq!(got.dp_bytes, exp.dp_bytes_ledger);
    assert!(exp.dp_bytes_device < exp.dp_bytes_ledger);
}
