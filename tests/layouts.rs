//! The one entry point for every layout: impossible layouts are refused before any device
//! work with the violated constraint and a valid alternative; every layout trains to one
//! device's result; a model state moves between layouts; every injected fault ends the step
//! within seconds with device, stage, action and step named, and no thread left running.

mod common;

use std::time::{Duration, Instant};

use triaxis::cpu::AdamW;
use triaxis::engine::{Engine, EngineOptions};
use triaxis::gpu;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::executor::{Fault, FaultKind};
use triaxis::pipeline::{Link, ScheduleKind};
use triaxis::train::{TrainConfig, Trainer};
use triaxis::Error;

fn model() -> GptConfig {
    GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 2,
    }
}

fn cfg(accum: usize) -> TrainConfig {
    TrainConfig {
        model: model(),
        micro: Micro { b: 2, t: 8 },
        grad_accum: accum,
        steps: 6,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 5,
    }
}

fn mesh(dp: usize, tp: usize, pp: usize, m: usize) -> Mesh {
    Mesh {
        dp,
        tp,
        pp,
        microbatches: m,
        ..Mesh::default()
    }
}

fn batches(n: usize, steps: usize) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    common::addition_batches(4, 6, n, steps, cfg(1).micro)
}

/// (what, layout, model, microbatch size, sequence length, devices, expected message parts)
#[allow(clippy::type_complexity)]
fn invalid() -> Vec<(
    &'static str,
    Mesh,
    GptConfig,
    usize,
    usize,
    usize,
    Vec<&'static str>,
)> {
    let m = model(); // 2 heads, 2 layers: 4 blocks
    let wide = GptConfig {
        heads: 6,
        channels: 24,
        ..m
    };
    let z = |zero| Mesh {
        zero,
        ..mesh(1, 1, 1, 1)
    };
    let il = |pp, mb, v| Mesh {
        schedule: ScheduleKind::Interleaved,
        chunks: v,
        ..mesh(1, 1, pp, mb)
    };
    vec![
        (
            "dp = 0",
            mesh(0, 1, 1, 1),
            m,
            2,
            8,
            1,
            vec!["--dp must be at least 1"],
        ),
        (
            "tp = 0",
            mesh(1, 0, 1, 1),
            m,
            2,
            8,
            1,
            vec!["--tp must be at least 1"],
        ),
        (
            "pp = 0",
            mesh(1, 1, 0, 1),
            m,
            2,
            8,
            1,
            vec!["--pp must be at least 1"],
        ),
        (
            "no microbatches",
            mesh(1, 1, 1, 0),
            m,
            2,
            8,
            1,
            vec!["--microbatches must be at least 1"],
        ),
        (
            "chunks = 0",
            Mesh {
                chunks: 0,
                ..mesh(1, 1, 1, 1)
            },
            m,
            2,
            8,
            1,
            vec!["--chunks must be at least 1"],
        ),
        (
            "microbatch of 0 sequences",
            mesh(1, 1, 1, 1),
            m,
            0,
            8,
            1,
            vec!["at least 1 sequence"],
        ),
        (
            "sequence longer than the context",
            mesh(1, 1, 1, 1),
            m,
            2,
            9,
            1,
            vec!["1..=8", "--seq 8"],
        ),
        (
            "empty sequence",
            mesh(1, 1, 1, 1),
            m,
            2,
            0,
            1,
            vec!["sequence length"],
        ),
        (
            "too few devices",
            mesh(2, 1, 2, 4),
            m,
            2,
            8,
            3,
            vec!["= 4 devices, but 3 are given", "--dp 1 --tp 1 --pp 3"],
        ),
        (
            "too many devices",
            mesh(1, 1, 2, 4),
            m,
            2,
            8,
            4,
            vec!["= 2 devices, but 4 are given", "--dp 2 --tp 1 --pp 2"],
        ),
        (
            "devices not a multiple of tp·pp",
            mesh(1, 2, 2, 4),
            m,
            2,
            8,
            6,
            vec!["but 6 are given", "--tp 2 --pp 3"],
        ),
        (
            "tp not dividing the heads",
            mesh(1, 4, 1, 1),
            wide,
            2,
            8,
            4,
            vec!["must divide the heads (6)", "--tp 3"],
        ),
        (
            "tp larger than the heads",
            mesh(1, 3, 1, 1),
            m,
            2,
            8,
            3,
            vec!["must divide the heads (2)", "--tp 2"],
        ),
        (
            "pp larger than the blocks",
            mesh(1, 1, 5, 5),
            m,
            2,
            8,
            5,
            vec!["only 4 blocks", "--pp 4"],
        ),
        (
            "interleaved stages beyond the blocks",
            il(2, 4, 3),
            m,
            2,
            8,
            2,
            vec!["6 pipeline stages", "--chunks 1"],
        ),
        (
            "chunks without interleaving",
            Mesh {
                chunks: 2,
                ..mesh(1, 1, 2, 4)
            },
            m,
            2,
            8,
            2,
            vec!["needs --schedule interleaved"],
        ),
        (
            "interleaved with m not a multiple of pp",
            il(2, 3, 2),
            m,
            2,
            8,
            2,
            vec!["m % pp == 0", "--microbatches 4"],
        ),
        (
            "ZeRO stage 4",
            Mesh { dp: 2, ..z(4) },
            m,
            2,
            8,
            2,
            vec!["ZeRO stage 4 does not exist", "--zero 3"],
        ),
        (
            "ZeRO without data parallelism",
            z(2),
            m,
            2,
            8,
            1,
            vec!["dp = 1", "--dp 2"],
        ),
        (
            "ZeRO-1 without data parallelism",
            Mesh { pp: 2, ..z(1) },
            m,
            2,
            8,
            2,
            vec!["nothing to shard"],
        ),
        (
            "heads not dividing channels",
            mesh(1, 1, 1, 1),
            GptConfig { heads: 3, ..m },
            2,
            8,
            1,
            vec!["heads (3) must divide channels (16)"],
        ),
        (
            "zero-sized model",
            mesh(1, 1, 1, 1),
            GptConfig { layers: 0, ..m },
            2,
            8,
            1,
            vec!["must be positive"],
        ),
    ]
}

#[test]
fn every_impossible_layout_is_refused_with_its_constraint_and_an_alternative() {
    let cases = invalid();
    assert!(cases.len() >= 20);
    for (what, mesh, model, b, t, devices, want) in cases {
        match mesh.validate(&model, b, t, devices) {
            Err(Error::Config(msg)) => {
                println!("{what}: {msg}");
                for w in want {
                    assert!(msg.contains(w), "{what}: {msg:?} lacks {w:?}");
                }
            }
            other => panic!("{what}: expected a configuration error, got {other:?}"),
        }
    }
    // bad names of flags' values
    for (what, err) in [
        (
            "schedule",
            "zigzag"
                .parse::<ScheduleKind>()
                .err()
                .map(|e| e.to_string()),
        ),
        (
            "link",
            Link::by_name("carrier-pigeon").err().map(|e| e.to_string()),
        ),
        (
            "fault",
            FaultKind::by_name("meteor").err().map(|e| e.to_string()),
        ),
    ] {
        let msg = err.unwrap_or_else(|| panic!("{what}: accepted"));
        println!("{what}: {msg}");
        assert!(msg.contains("expected"), "{msg}");
    }
    // valid layouts pass
    for ok in [mesh(1, 1, 1, 1), mesh(2, 1, 2, 4), mesh(1, 2, 2, 2)] {
        ok.validate(&model(), 2, 8, ok.devices()).unwrap();
    }
}

#[test]
fn engine_refuses_before_any_device_work() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let e = Engine::new(&gpus, cfg(4), mesh(2, 1, 1, 2), EngineOptions::default()).err();
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("accumulates 4 microbatches"), "{msg}");
    let e = Engine::new(&gpus, cfg(2), mesh(1, 1, 1, 2), EngineOptions::default()).err();
    assert!(e
        .map(|e| e.to_string())
        .unwrap_or_default()
        .contains("2 are given"));
}

#[test]
fn every_layout_trains_like_one_device_and_states_move_between_layouts() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let (m, steps) = (4, 4);
    let data = batches(m, steps);
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
        EngineOptions::default(),
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
        let mut e = Engine::new(&gpus[..n], cfg(m / dp), layout, EngineOptions::default())
            .unwrap_or_else(|e| panic!("dp={dp} tp={tp} pp={pp}: {e}"));
        assert_eq!(e.placement().len(), n);
        let mut last = None;
        for (s, b) in data.iter().enumerate() {
            last = Some(e.step(b, s).unwrap());
        }
        let c = last.unwrap();
        let err = rel(&e.state().unwrap().params);
        println!(
            "dp={dp} tp={tp} pp={pp} zero={zero}: ‖Δ‖/‖p‖ = {err:.2e}; bubble {:?} (theory {:?}), dp bytes {}, tp bytes {}",
            c.bubble, c.bubble_theory, c.dp_bytes, c.tp_bytes
        );
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
        EngineOptions::default(),
    )
    .unwrap();
    for (s, b) in data.iter().enumerate().take(2) {
        a.step(b, s).unwrap();
    }
    let st = a.state().unwrap();
    let mut b = Engine::new(&gpus, cfg(m), mesh(1, 2, 2, m), EngineOptions::default()).unwrap();
    b.set_state(&st).unwrap();
    for (s, batch) in data.iter().enumerate().skip(2) {
        b.step(batch, s).unwrap();
    }
    let err = rel(&b.state().unwrap().params);
    println!("saved at dp = 2, resumed at tp = 2 × pp = 2: ‖Δ‖/‖p‖ = {err:.2e}");
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
    let mut straight = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate() {
        straight.step(b, s).unwrap();
    }
    let mut first = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate().take(2) {
        first.step(b, s).unwrap();
    }
    let st = first.state().unwrap();
    drop(first);
    let mut second = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    second.set_state(&st).unwrap();
    for (s, b) in data.iter().enumerate().skip(2) {
        second.step(b, s).unwrap();
    }
    assert_eq!(second.checksum().unwrap(), straight.checksum().unwrap());
}

/// The tests of this file run one at a time, so the thread count of the process reflects only
/// the running test.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Threads of this process (Linux), to prove a failed step leaves none behind.
fn threads() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
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
        let opts = EngineOptions {
            fault: Some(Fault {
                device,
                action,
                step: 1,
                kind,
            }),
            recv_timeout: Duration::from_secs(10),
            ..EngineOptions::default()
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
        assert_eq!(
            threads(),
            base,
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
    let fresh = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    let full_state: Vec<u64> = gpus
        .iter()
        .map(|g| g.memory().current.optimizer_state)
        .collect();
    drop(fresh);
    let sharded_layout = Mesh { zero: 1, ..layout };
    let mut z = Engine::new(&gpus, cfg(m), sharded_layout, EngineOptions::default()).unwrap();
    let sharded_state: Vec<u64> = gpus
        .iter()
        .map(|g| g.memory().current.optimizer_state)
        .collect();
    for (s, b) in data.iter().enumerate() {
        z.step(b, s).unwrap();
    }
    let mut again = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
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
