//! The forward-only evaluator: on the run's own whole model between steps it gives the loss the
//! next training forward reports, bit for bit, and a mirror loaded with the run's parameters
//! gives the same (f32 and bf16); evaluating between steps leaves the run's bits unchanged;
//! only layouts that keep the model whole on a device offer their own model.
mod common;
use triaxis::mesh::Mesh;

use common::tiny;
use triaxis::eval::{self, Mirror};
use triaxis::gpu::{self, Gpu};
use triaxis::model::Precision;
use triaxis::runtime::{Runtime, RuntimeOptions};

fn runtime(gpus: &[Gpu], dp: usize, tp: usize, pp: usize, prec: Precision) -> Runtime {
    let opts = RuntimeOptions {
        precision: prec,
        ..RuntimeOptions::default()
    };
    Runtime::new(gpus, tiny::cfg(1), tiny::mesh(dp, tp, pp, 1), opts).unwrap()
}

#[test]
fn own_model_and_mirror_give_the_next_training_loss() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let data = tiny::batches(1, 3);
    for prec in [Precision::F32, Precision::Bf16] {
        let mut rt = runtime(&gpus[..1], 1, 1, 1, prec);
        for (s, b) in data[..2].iter().enumerate() {
            rt.step(b, s).unwrap();
        }
        let (x, y) = &data[2][0];
        let own = eval::loss(rt.whole_model().expect("one device"), x, y).unwrap();
        let mirror = Mirror::new(&gpus[1], tiny::model(), tiny::cfg(1).micro, prec).unwrap();
        mirror.load(&rt.params().unwrap()).unwrap();
        let mirrored = eval::loss(&mirror.model, x, y).unwrap();
        let trained = rt.step(&data[2], 2).unwrap().runs[0].stats.loss;
        println!("{prec:?}: own {own}, mirror {mirrored}, training forward {trained}");
        assert_eq!(own.to_bits(), trained.to_bits(), "{prec:?}: own model");
        assert_eq!(mirrored.to_bits(), trained.to_bits(), "{prec:?}: mirror");
    }
}

#[test]
fn evaluating_between_steps_leaves_the_run_unchanged() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let data = tiny::batches(1, 3);
    let mut plain = runtime(&gpus, 1, 1, 1, Precision::F32);
    let mut evaluated = runtime(&gpus, 1, 1, 1, Precision::F32);
    for (s, b) in data.iter().enumerate() {
        plain.step(b, s).unwrap();
        evaluated.step(b, s).unwrap();
        let m = evaluated.whole_model().unwrap();
        let (x, y) = &data[(s + 1) % data.len()][0];
        eval::loss(m, x, y).unwrap();
        eval::generate(m, &[x[..3].to_vec()], 4, None).unwrap();
    }
    assert_eq!(
        evaluated.checksum().unwrap(),
        plain.checksum().unwrap(),
        "a run evaluated after every step trains the same bits"
    );
}

#[test]
fn only_layouts_that_keep_the_model_whole_offer_it() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    for (dp, tp, pp, whole) in [(2, 1, 1, true), (1, 2, 1, false), (1, 1, 2, false)] {
        let rt = runtime(&gpus, dp, tp, pp, Precision::F32);
        assert_eq!(rt.whole_model().is_some(), whole, "dp {dp} tp {tp} pp {pp}");
    }
    // ZeRO 1 and 2 keep the whole parameters on every rank; ZeRO-3 only a shard and two slots
    for (zero, whole) in [(1, true), (2, true), (3, false)] {
        let mesh = Mesh {
            zero,
            ..tiny::mesh(2, 1, 1, 1)
        };
        let rt = Runtime::new(&gpus, tiny::cfg(1), mesh, RuntimeOptions::default()).unwrap();
        assert_eq!(rt.whole_model().is_some(), whole, "ZeRO-{zero}");
    }
}
