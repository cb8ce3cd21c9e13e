//! The one entry point for every layout: every layout trains to one device's result; a model
//! state moves between layouts; every injected fault ends the step within seconds with device,
//! stage, action and step named, and no thread left running; ZeRO-1 inside pipeline stages
//! keeps the bits. (Refusals: `layout_refusals.rs`, `flag_refusals.rs`.)

mod common;

use std::time::{Duration, Instant};

use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu;
use triaxis::mesh::Mesh;

use triaxis::runtime::{Fault, FaultKind};

use triaxis::train::Trainer;
use triaxis::Error;

use common::steps::Seen;
use common::tiny::{batches, cfg, mesh, no_thread_left, one_at_a_time, threads};

#[test]
fn every_layout_trains_like_one_device_and_states_move_between_layouts() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let (m, steps) = (4, 4);
    let data = batches(m, steps);
    let want = common::steps::reference(&gpus[0], cfg(m), &data);
    let mut one = Trainer::new(&gpus[0], cfg(m)).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(b, s).unwrap();
    }
    let reference = one.model.params().unwrap();
    let rel = |p: &[f32]| common::l2_rel(p, &reference);
    // one device through the engine: the same bits as the trainer
    let mut single = Engine::new(
        &gpus[..1],
        cfg(m),
        mesh(1, 1, 1, m),
        RuntimeOptions::default(),
    )
    .unwrap();
    for (s, b) in data.iter().enumerate() {
        single.step(b, s).unwrap();
    }
    assert_eq!(
        single.state().unwrap().params,
        reference,
        "1 device: bit-identical"
    );
    for (dp, tp, pp, zero) in [
        (2, 1, 1, 0),
        (1, 1, 2, 0),
        (2, 1, 2, 0),
        (1, 2, 2, 0),
        (2, 2, 1, 0),
        (2, 1, 1, 1),
        (4, 1, 1, 2),
        (2, 1, 1, 3),
        (2, 1, 2, 1),
        (2, 2, 1, 1),
    ] {
        let n = dp * tp * pp;
        let layout = Mesh {
            zero,
            ..mesh(dp, tp, pp, m / dp)
        };
        let mut e = Engine::new(&gpus[..n], cfg(m / dp), layout, RuntimeOptions::default())
            .unwrap_or_else(|e| panic!("dp={dp} tp={tp} pp={pp}: {e}"));
        assert_eq!(e.placement().len(), n);
        let costs: Vec<_> = data
            .iter()
            .enumerate()
            .map(|(s, b)| e.step(b, s).unwrap())
            .collect();
        let c = costs.last().unwrap();
        let seen: Vec<Seen> = costs.iter().map(Seen::from).collect();
        let err = rel(&e.state().unwrap().params);
        let (l, n, t) = common::steps::worst(&want, 0, &seen);
        println!(
            "dp={dp} tp={tp} pp={pp} zero={zero}: ‖Δ‖/‖p‖ = {err:.2e}; per step loss {l:.1e}, norm {n:.1e}, worst tensor norm {t:.1e}; bubble {:?} (theory {:?}), dp bytes {}, tp bytes {}",
            c.bubble, c.bubble_theory, c.dp_bytes, c.tp_bytes
        );
        if let Err(e) = common::steps::compare(&want, 0, &seen) {
            panic!("dp={dp} tp={tp} pp={pp} zero={zero}: {e}");
        }
        assert!(err < 1e-5, "dp={dp} tp={tp} pp={pp}: {err:.2e}");
        assert_eq!(c.bubble.is_some(), pp > 1);
        assert_eq!(c.dp_bytes > 0, dp > 1);
        assert_eq!(c.tp_bytes > 0, tp > 1);
    }
    // stop after 2 steps under dp = 2, resume under pp = 2 (and tp = 2): close to never stopping
    let mut a = Engine::new(
        &gpus[..2],
        cfg(2),
        mesh(2, 1, 1, 2),
        RuntimeOptions::default(),
    )
    .unwrap();
    for (s, b) in data.iter().enumerate().take(2) {
        a.step(b, s).unwrap();
    }
    let st = a.state().unwrap();
    let mut b = Engine::new(&gpus, cfg(m), mesh(1, 2, 2, m), RuntimeOptions::default()).unwrap();
    b.set_state(&st).unwrap();
    let resumed: Vec<Seen> = data
        .iter()
        .enumerate()
        .skip(2)
        .map(|(s, batch)| Seen::from(&b.step(batch, s).unwrap()))
        .collect();
    let err = rel(&b.state().unwrap().params);
    println!("saved at dp = 2, resumed at tp = 2 × pp = 2: ‖Δ‖/‖p‖ = {err:.2e}");
    if let Err(e) = common::steps::compare(&want, 2, &resumed) {
        panic!("resumed at tp = 2 × pp = 2: {e}");
    }
    assert!(err < 1e-5);
}

#[test]
fn stopping_and_resuming_the_same_layout_gives_the_same_bits() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 4);
    let layout = mesh(2, 1, 2, m);
    let mut straight = Engine::new(&gpus, cfg(m), layout, RuntimeOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate() {
        straight.step(b, s).unwrap();
    }
    let mut first = Engine::new(&gpus, cfg(m), layout, RuntimeOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate().take(2) {
        first.step(b, s).unwrap();
    }
    let st = first.state().unwrap();
    drop(first);
    let mut second = Engine::new(&gpus, cfg(m), layout, RuntimeOptions::default()).unwrap();
    second.set_state(&st).unwrap();
    for (s, b) in data.iter().enumerate().skip(2) {
        second.step(b, s).unwrap();
    }
    assert_eq!(second.checksum().unwrap(), straight.checksum().unwrap());
}

#[test]
fn every_injected_fault_ends_the_step_with_a_named_error() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 2);
    for (kind, device, action, want_stage, want_action, want) in [
        (FaultKind::Error, 1, 1, 1, "1B0", "injected fault"),
        (
            FaultKind::Panic,
            0,
            2,
            0,
            "0B0",
            "worker panicked: injected panic",
        ),
        (FaultKind::DeviceLost, 1, 0, 1, "1F0", "device lost"),
        (FaultKind::Nan, 1, 1, 1, "gradient check", "not finite"),
        (FaultKind::Nan, 1, 0, 1, "loss", "the loss is NaN"),
    ] {
        let opts = RuntimeOptions {
            fault: Some(Fault {
                device,
                action,
                step: 1,
                kind,
            }),
            recv_timeout: Duration::from_secs(10),
            ..RuntimeOptions::default()
        };
        let mut e = Engine::new(&gpus, cfg(m), mesh(2, 1, 2, m), opts).unwrap();
        let before_params = {
            e.step(&data[0], 0).unwrap();
            e.state().unwrap().params
        };
        let base = threads();
        let t = Instant::now();
        let err = e.step(&data[1], 1).unwrap_err();
        let took = t.elapsed();
        println!("{kind:?}: {err} (after {took:?})");
        assert!(took < Duration::from_secs(5), "{kind:?} took {took:?}");
        match &err {
            Error::Worker {
                device: d,
                stage,
                action: a,
                step,
                msg,
            } => {
                // replica 0's schedule device `device` is global device `device` (pp = 2, tp = 1)
                assert_eq!((*d, *stage, *step), (device, want_stage, 1), "{kind:?}");
                assert_eq!(a, want_action, "{kind:?}");
                assert!(msg.contains(want), "{kind:?}: {msg}");
            }
            other => panic!("{kind:?}: expected a worker error, got {other:?}"),
        }
        assert!(
            no_thread_left(base),
            "{kind:?}: a thread outlived the failed step"
        );
        // the failed step changed no parameter
        assert_eq!(e.state().unwrap().params, before_params, "{kind:?}");
    }
}

#[test]
fn zero1_inside_pipeline_stages_shards_moments_and_keeps_the_bits() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 3);
    let layout = mesh(2, 1, 2, m);
    let fresh = Engine::new(&gpus, cfg(m), layout, RuntimeOptions::default()).unwrap();
    let full_state: Vec<u64> = gpus
        .iter()
        .map(|g| g.memory().current.optimizer_state)
        .collect();
    drop(fresh);
    let sharded_layout = Mesh { zero: 1, ..layout };
    let mut z = Engine::new(&gpus, cfg(m), sharded_layout, RuntimeOptions::default()).unwrap();
    let sharded_state: Vec<u64> = gpus
        .iter()
        .map(|g| g.memory().current.optimizer_state)
        .collect();
    for (s, b) in data.iter().enumerate() {
        z.step(b, s).unwrap();
    }
    let mut again = Engine::new(&gpus, cfg(m), layout, RuntimeOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate() {
        again.step(b, s).unwrap();
    }
    // d = 2: each chunk is summed x0 + x1 either way, the same bits as plain data parallelism
    assert_eq!(z.checksum().unwrap(), again.checksum().unwrap());
    assert_eq!(z.state().unwrap().m, again.state().unwrap().m);
    // each device keeps about half of its stage's moments (64-aligned chunks, +8 B placeholders)
    println!("optimizer state per device: unsharded {full_state:?}, ZeRO-1 {sharded_state:?}");
    for (f, s) in full_state.iter().zip(&sharded_state) {
        let half = *f as f64 / 2.0;
        assert!(
            (*s as f64 - half).abs() <= 64.0 * 8.0 + 8.0,
            "{s} vs {half}"
        );
    }
}

/// The thread ids of this process's worker threads (Linux), by name.
#[cfg(target_os = "linux")]
fn worker_threads() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let tid = e.file_name().to_string_lossy().parse().unwrap_or(0);
        if name.starts_with("triaxis-dev-") {
            out.push((name.trim().to_string(), tid));
        }
    }
    out.sort();
    out
}

/// Each device's worker runs on one thread for the life of the layout, started with it: every
/// step finds the same threads, and they end with the layout.
#[cfg(target_os = "linux")]
#[test]
fn each_worker_keeps_one_thread_across_steps_until_the_layout_ends() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 3);
    assert!(worker_threads().is_empty(), "no worker thread before");
    let mut e = Engine::new(&gpus, cfg(m), mesh(2, 1, 2, m), RuntimeOptions::default()).unwrap();
    let started = worker_threads();
    let names: Vec<&str> = started.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "triaxis-dev-0",
            "triaxis-dev-1",
            "triaxis-dev-2",
            "triaxis-dev-3"
        ]
    );
    for (s, b) in data.iter().enumerate() {
        e.step(b, s).unwrap();
        assert_eq!(worker_threads(), started, "step {s} ran on other threads");
    }
    drop(e);
    let t0 = Instant::now();
    while !worker_threads().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "worker threads outlived their layout: {:?}",
            worker_threads()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
