//! The one-device [`Trainer`] in bf16, the evaluator of bf16 runs: it takes a run's state (the
//! f32 master weights, one-device layout) and gives it back as loaded; its loss of a batch is
//! the loss the bf16 training forward reports for the same parameters and batch, bit for bit
//! (the f32 evaluator on the same master weights is not); and its own steps are the runtime's
//! one-device bf16 steps, bit for bit.
mod common;

use common::tiny;
use triaxis::gpu::{self, Gpu};
use triaxis::model::Precision;
use triaxis::runtime::{Runtime, RuntimeOptions};
use triaxis::train::Trainer;

/// The runtime on one device in bf16, `m` microbatches a step.
fn runtime(gpus: &[Gpu], m: usize) -> Runtime {
    let opts = RuntimeOptions {
        precision: Precision::Bf16,
        ..RuntimeOptions::default()
    };
    Runtime::new(&gpus[..1], tiny::cfg(m), tiny::mesh(1, 1, 1, m), opts).unwrap()
}

#[test]
fn bf16_evaluation_loss_is_the_training_forwards() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let mut rt = runtime(&gpus, 1);
    let data = tiny::batches(1, 3);
    for (s, b) in data[..2].iter().enumerate() {
        rt.step(b, s).unwrap();
    }
    // the state after 2 steps: master weights off bf16's grid, so rounding them matters
    let state = rt.state().unwrap();
    let (x, y) = &data[2][0];
    let bf16 = Trainer::with_precision(&gpus[0], tiny::cfg(1), Precision::Bf16);
    let mut bf16 = bf16.unwrap();
    bf16.set_state(&state).unwrap();
    let mut f32 = Trainer::new(&gpus[0], tiny::cfg(1)).unwrap();
    f32.set_state(&state).unwrap();
    let (eval16, eval32) = (bf16.loss(x, y).unwrap(), f32.loss(x, y).unwrap());
    // the next step's loss is its forward's, on the same parameters and batch
    let trained = rt.step(&data[2], 2).unwrap().runs[0].stats.loss;
    println!("training forward {trained}, bf16 evaluation {eval16}, f32 evaluation {eval32}");
    assert_eq!(eval16.to_bits(), trained.to_bits(), "bf16 evaluation");
    assert_ne!(
        eval32.to_bits(),
        trained.to_bits(),
        "the f32 forward on the master weights is another loss"
    );
}

#[test]
fn bf16_trainer_takes_and_gives_state_in_the_one_device_layout() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let mut rt = runtime(&gpus, 2);
    for (s, b) in tiny::batches(2, 2).iter().enumerate() {
        rt.step(b, s).unwrap();
    }
    let state = rt.state().unwrap();
    let tr = Trainer::with_precision(&gpus[0], tiny::cfg(2), Precision::Bf16).unwrap();
    tr.set_state(&state).unwrap();
    assert_eq!(tr.state().unwrap(), state, "the state as loaded");
    assert_eq!(tr.checksum().unwrap(), rt.checksum().unwrap(), "checksum");
}

#[test]
fn bf16_trainer_steps_are_the_runtimes_one_device_bits() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let mut rt = runtime(&gpus, 2);
    let mut tr = Trainer::with_precision(&gpus[0], tiny::cfg(2), Precision::Bf16).unwrap();
    assert_eq!(tr.state().unwrap(), rt.state().unwrap(), "initial state");
    for (s, b) in tiny::batches(2, 3).iter().enumerate() {
        let a = rt.step(b, s).unwrap().runs[0].stats;
        let t = tr.step(b, s).unwrap();
        println!(
            "step {s}: runtime loss {} norm {}, trainer loss {} norm {}",
            a.loss, a.grad_norm, t.loss, t.grad_norm
        );
        assert_eq!(t.loss.to_bits(), a.loss.to_bits(), "step {s}: loss");
        assert_eq!(
            t.grad_norm.to_bits(),
            a.grad_norm.to_bits(),
            "step {s}: norm"
        );
    }
    assert_eq!(
        tr.state().unwrap(),
        rt.state().unwrap(),
        "state after 3 steps"
    );
}
