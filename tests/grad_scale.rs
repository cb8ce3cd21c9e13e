//! Gradient scale in every layout family: each step's loss, global gradient norm and every
//! tensor's gradient norm held to the one-device trainer — tensor parallelism over 4 ranks,
//! dp × tp, dp × tp × pp, tp × pp under ZB-H1 and interleaved, and a state moved between
//! layouts mid-run. The check is shown to fail: a replicated tensor's gradient doubled on one
//! tensor-parallel rank (a copy counted twice) and a gradient left un-averaged over the
//! replicas (a lost 1/d) are both caught, though the parameters they train stay within the
//! 1e-5 a final-parameter check allows. (The sweep of `layouts.rs` runs the same check.)

mod common;

use common::steps::{compare, reference, worst, Batches, Seen};
use common::tiny::mesh as layout;
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::GptConfig;
use triaxis::pipeline::ScheduleKind;
use triaxis::runtime::GradScale;
use triaxis::step::TrainConfig;

const STEPS: usize = 3;

/// The layout tests' tiny model with 4 heads (tensor parallelism over 4 ranks takes one each).
fn cfg(accum: usize) -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            heads: 4,
            ..common::tiny::model()
        },
        ..common::tiny::cfg(accum)
    }
}

/// `m` microbatches for each of the steps.
fn data(m: usize) -> Batches {
    common::addition_batches(4, 6, m, STEPS, cfg(1).micro)
}

/// Trains `mesh` (global batch: `data`'s microbatches per step) from step `first` on,
/// optionally from `state`: what each step reported, and the engine.
fn train(
    gpus: &[Gpu],
    mesh: Mesh,
    opts: RuntimeOptions,
    data: &[Vec<(Vec<u32>, Vec<u32>)>],
    first: usize,
    state: Option<&triaxis::step::ModelState>,
) -> (Vec<Seen>, Engine) {
    let mut e = Engine::new(&gpus[..mesh.devices()], cfg(mesh.microbatches), mesh, opts)
        .unwrap_or_else(|e| panic!("{}: {e}", mesh.describe()));
    if let Some(st) = state {
        e.set_state(st).unwrap();
    }
    let seen = data[first..]
        .iter()
        .enumerate()
        .map(|(i, b)| Seen::from(&e.step(b, first + i).unwrap()))
        .collect();
    (seen, e)
}

#[test]
fn every_layout_family_gives_one_devices_loss_and_gradient_norms_per_tensor() {
    let Some(gpus) = gpu::test_gpus(8) else {
        return;
    };
    let m = 4;
    let data = data(m);
    let want = reference(&gpus[0], cfg(m), &data);
    for mesh in [
        layout(1, 4, 1, m),
        layout(2, 2, 1, m / 2),
        layout(2, 2, 2, m / 2),
        Mesh {
            schedule: ScheduleKind::ZeroBubbleH1,
            ..layout(1, 2, 2, m)
        },
        Mesh {
            schedule: ScheduleKind::Interleaved,
            chunks: 2,
            ..layout(1, 2, 2, m)
        },
    ] {
        let (got, _) = train(&gpus, mesh, RuntimeOptions::default(), &data, 0, None);
        let (l, n, t) = worst(&want, 0, &got);
        println!(
            "{}: loss {l:.1e}, norm {n:.1e}, worst tensor {t:.1e}",
            mesh.describe()
        );
        if let Err(e) = compare(&want, 0, &got) {
            panic!("{}: {e}", mesh.describe());
        }
    }
}

#[test]
fn a_state_moved_between_layouts_continues_one_devices_steps() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = data(m);
    let want = reference(&gpus[0], cfg(m), &data);
    let (first, a) = train(
        &gpus,
        layout(2, 1, 1, 1),
        RuntimeOptions::default(),
        &data[..1],
        0,
        None,
    );
    compare(&want, 0, &first).unwrap_or_else(|e| panic!("dp 2: {e}"));
    let st = a.state().unwrap();
    drop(a);
    let mesh = layout(1, 2, 2, m);
    let (rest, _) = train(&gpus, mesh, RuntimeOptions::default(), &data, 1, Some(&st));
    let (l, n, t) = worst(&want, 1, &rest);
    println!("dp 2 → tp 2 × pp 2: loss {l:.1e}, norm {n:.1e}, worst tensor {t:.1e}");
    compare(&want, 1, &rest).unwrap_or_else(|e| panic!("resumed under tp 2 × pp 2: {e}"));
}

/// The bug `hook` plants in `mesh`: the comparison names `tensor` (the parameters it trains
/// stay within `1e-5` of one device's, which is why the norms are compared).
fn caught(gpus: &[Gpu], mesh: Mesh, hook: GradScale, data: &Batches, want: &[Seen]) {
    let tensor = hook.tensor.clone();
    let opts = RuntimeOptions {
        grad_scale: Some(hook),
        ..RuntimeOptions::default()
    };
    let (got, e) = train(gpus, mesh, opts, data, 0, None);
    let err = compare(want, 0, &got).expect_err("a scaled gradient must be caught");
    println!("{}: {err}", mesh.describe());
    assert!(err.contains(&tensor), "{err}");
    let mut one = triaxis::train::Trainer::new(&gpus[0], cfg(data[0].len())).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(b, s).unwrap();
    }
    let drift = common::l2_rel(&e.state().unwrap().params, &one.model.params().unwrap());
    println!("  the parameters it trained: ‖Δ‖/‖p‖ = {drift:.1e}");
    assert!(
        drift < 1e-5,
        "a final-parameter check would have caught it too: {drift:.1e}"
    );
}

#[test]
fn a_doubled_replicated_gradient_and_a_lost_average_are_caught() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let m = 2;
    let data = data(m);
    let want = reference(&gpus[0], cfg(m), &data);
    // tensor rank 0's copy of a layernorm gain every rank holds whole, counted twice
    let doubled = GradScale {
        device: 0,
        tensor: "h1.ln2w".into(),
        factor: 2.0,
    };
    caught(&gpus, layout(1, 2, 1, m), doubled, &data, &want);
    // replica 0's reduced gradient of a layernorm bias summed, not averaged, over d = 2
    let summed = GradScale {
        device: 0,
        tensor: "h0.ln1b".into(),
        factor: 2.0,
    };
    caught(&gpus, layout(2, 1, 1, 1), summed, &data, &want);
}
