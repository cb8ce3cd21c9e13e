//! Pipeline schedules on the one runtime (through the engine): every schedule reproduces
//! one-device training bit for bit, a fault in one stage ends the run with a named error, bad
//! layouts are clear errors.
use std::time::{Duration, Instant};

use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::{Schedule, ScheduleKind};
use triaxis::runtime::replay::replay;
use triaxis::runtime::{Fault, FaultKind};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;
use triaxis::Error;

fn cfg(m: usize) -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab: 13,
            ctx: 8,
            channels: 16,
            heads: 2,
            layers: 6,
        },
        micro: Micro { b: 2, t: 8 },
        grad_accum: m,
        steps: 3,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 21,
    }
}

fn batches(c: &Corpus, cfg: &TrainConfig, steps: usize) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    let mut b = Batcher::new(2);
    (0..steps)
        .map(|_| {
            (0..cfg.grad_accum)
                .map(|_| b.next(&c.train, cfg.micro).unwrap())
                .collect()
        })
        .collect()
}

/// A pipeline of `p` devices (dp = tp = 1) running `kind` over `m` microbatches, `v` chunks
/// per device.
fn pipeline(kind: ScheduleKind, p: usize, m: usize, v: usize) -> Mesh {
    Mesh {
        pp: p,
        microbatches: m,
        schedule: kind,
        chunks: v,
        ..Mesh::default()
    }
}

fn engine(
    gpus: &[Gpu],
    cfg: TrainConfig,
    mesh: Mesh,
    opts: RuntimeOptions,
) -> triaxis::Result<Engine> {
    Engine::new(&gpus[..mesh.devices().min(gpus.len())], cfg, mesh, opts)
}

/// Activation slots the runtime allocated per model stage (read from its chunks).
fn slots(e: &Engine) -> Vec<usize> {
    let rt = e.runtime();
    let mut out = vec![0; rt.schedule.stages()];
    for d in 0..rt.mesh.devices() {
        for c in rt.chunks(d) {
            out[c.stage] = c.slots;
        }
    }
    out
}

fn corpus() -> Corpus {
    Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 300,
        val_problems: 20,
        seed: 1,
        reverse: true,
        pad: false,
    })
    .unwrap()
}

#[test]
fn every_schedule_is_bit_identical_to_one_device() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let c = corpus();
    for (kind, p, m, v) in [
        (ScheduleKind::GPipe, 2, 4, 1),
        (ScheduleKind::OneFOneB, 2, 4, 1),
        (ScheduleKind::OneFOneB, 4, 4, 1),
        (ScheduleKind::GPipe, 4, 2, 1),
        (ScheduleKind::Interleaved, 2, 4, 2),
        (ScheduleKind::Interleaved, 4, 4, 2),
        (ScheduleKind::ZeroBubbleH1, 2, 4, 1),
        (ScheduleKind::ZeroBubbleH1, 4, 8, 1),
        (ScheduleKind::ZeroBubbleV, 2, 4, 2),
        (ScheduleKind::DualPipeV, 2, 4, 2),
    ] {
        let cfg = cfg(m);
        let data = batches(&c, &cfg, cfg.steps);
        let mut one = Trainer::new(&gpus[0], cfg.clone()).unwrap();
        let mut pipe = engine(
            &gpus,
            cfg.clone(),
            pipeline(kind, p, m, v),
            RuntimeOptions::default(),
        )
        .unwrap();
        for (s, b) in data.iter().enumerate() {
            let a = one.step(b, s).unwrap();
            let r = pipe.step(b, s).unwrap();
            let report = pipe.report().unwrap().expect("a step was run");
            assert_eq!(
                a.loss.to_bits(),
                r.stats.loss.to_bits(),
                "{kind:?} p={p} m={m} v={v} step {s}: loss"
            );
            assert_eq!(
                a.grad_norm.to_bits(),
                r.stats.grad_norm.to_bits(),
                "{kind:?} step {s}: grad norm"
            );
            let per_micro = if kind.split_backward() { 3 } else { 2 };
            assert_eq!(report.events.len(), p * v * per_micro * m);
            // one device clock: the pipeline summary's bubble is the step's, and its trace has
            // one device-clock span per pass
            let sum = pipe.summary(1).unwrap().expect("a step was run");
            assert_eq!(
                Some(sum.device_bubble),
                r.bubble,
                "{kind:?}: one device clock"
            );
            let trace = pipe.chrome_trace().unwrap().expect("a step was run");
            let passes = trace["traceEvents"]
                .as_array()
                .expect("events")
                .iter()
                .filter(|e| {
                    e["pid"] == 0 && ["F", "B", "W"].contains(&e["cat"].as_str().unwrap_or(""))
                })
                .count();
            assert_eq!(passes, p * v * per_micro * m, "{kind:?}: traced passes");
        }
        let (ca, cb) = (one.checksum().unwrap(), pipe.checksum().unwrap());
        println!(
            "{kind:?} p={p} m={m} v={v}: {cb} (one device {ca}), slots {:?}",
            slots(&pipe)
        );
        assert_eq!(
            ca, cb,
            "{kind:?} p={p} m={m} v={v}: parameters differ from one device"
        );
    }
}

#[test]
fn activation_slots_follow_the_schedule() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let c = corpus();
    let cfg = cfg(8);
    let data = batches(&c, &cfg, 1);
    for (kind, want) in [
        (ScheduleKind::GPipe, vec![8, 8, 8, 8]),
        (ScheduleKind::OneFOneB, vec![4, 3, 2, 1]),
    ] {
        let mut pipe = engine(
            &gpus,
            cfg.clone(),
            pipeline(kind, 4, 8, 1),
            RuntimeOptions::default(),
        )
        .unwrap();
        assert_eq!(slots(&pipe), want, "{kind:?}");
        pipe.step(&data[0], 0).unwrap();
        let r = pipe.report().unwrap().expect("a step was run");
        assert_eq!(
            r.peak_held, want,
            "{kind:?}: peak activations held per stage"
        );
        // the same figure from each device's chunks
        let per_device: Vec<usize> = (0..4)
            .flat_map(|d| pipe.runtime().chunks(d))
            .map(|c| c.peak_held)
            .collect();
        assert_eq!(
            per_device, want,
            "{kind:?}: peak held by the runtime's chunks"
        );
    }
}

#[test]
fn a_fault_in_one_stage_ends_the_run_with_a_named_error() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let c = corpus();
    let cfg = cfg(4);
    let data = batches(&c, &cfg, 2);
    let fault = Fault {
        device: 2,
        action: 3,
        step: 1,
        kind: FaultKind::Error,
    };
    let opts = RuntimeOptions {
        fault: Some(fault),
        recv_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let mut pipe = engine(&gpus, cfg, pipeline(ScheduleKind::OneFOneB, 4, 4, 1), opts).unwrap();
    pipe.step(&data[0], 0).unwrap();
    let t = Instant::now();
    let e = pipe.step(&data[1], 1).unwrap_err();
    println!("{e} (after {:?})", t.elapsed());
    match &e {
        Error::Worker {
            device,
            stage,
            step,
            action,
            msg,
        } => {
            assert_eq!((*device, *stage, *step), (2, 2, 1));
            assert!(action.starts_with('2'), "{action}");
            assert!(msg.contains("injected"), "{msg}");
        }
        other => panic!("expected a worker error, got {other}"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the failure must end the step promptly"
    );
}

#[test]
fn bad_layouts_are_clear_errors() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let small = TrainConfig {
        model: GptConfig {
            layers: 1,
            ..cfg(4).model
        },
        ..cfg(4)
    };
    // 1 layer = 3 blocks; 2 devices × 2 chunks = 4 stages
    let e = engine(
        &gpus,
        small,
        pipeline(ScheduleKind::Interleaved, 2, 4, 2),
        RuntimeOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("only 3 blocks"), "{e}");
    let e = Schedule::new(ScheduleKind::Interleaved, 2, 3, 2).unwrap_err();
    assert!(e.to_string().contains("m % p"), "{e}");
    let e = "pipedream".parse::<ScheduleKind>().unwrap_err();
    assert!(e.to_string().contains("1f1b"), "{e}");
    let e = engine(
        &gpus,
        cfg(4),
        pipeline(ScheduleKind::OneFOneB, 2, 2, 1),
        RuntimeOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("accumulates 4"), "{e}");
    let e = triaxis::model::Micro::of(10, 4, 8).unwrap_err();
    assert!(e.to_string().contains("do not divide"), "{e}");
    // a link model that cannot price a message (the device clock would be inf or NaN)
    for link in [
        triaxis::pipeline::Link::measured(0.0, 1e-6),
        triaxis::pipeline::Link::measured(1e9, f64::NAN),
    ] {
        let opts = RuntimeOptions {
            link,
            ..RuntimeOptions::default()
        };
        let e = engine(
            &gpus,
            cfg(2),
            pipeline(ScheduleKind::OneFOneB, 2, 2, 1),
            opts,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("positive bandwidth"), "{e}");
    }
}

#[test]
fn pooled_device_clock_takes_each_pass_at_its_quantile_over_the_steps() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let c = corpus();
    let cfg = cfg(2);
    let data = batches(&c, &cfg, 4);
    let mesh = pipeline(ScheduleKind::OneFOneB, 2, 2, 1);
    let mut e = engine(
        &gpus,
        cfg,
        mesh,
        RuntimeOptions {
            serial: true,
            ..RuntimeOptions::default()
        },
    )
    .unwrap();
    e.step(&data[0], 0).unwrap();
    assert!(e.pass_times().unwrap().is_none(), "not pooling yet");
    e.pool_steps(true);
    let measured = e.step(&data[1], 1).unwrap();
    // the replay of the measured op costs (what the simulator's validation replays) is the
    // device clock's figure for the step
    let plan = e.plan().unwrap().clone();
    let replayed = replay(&plan, &mesh, &e.pooled_costs(0.5).unwrap().unwrap()).unwrap();
    assert_eq!(replayed.makespan, measured.device_step);
    // one step pooled is that step
    let pooled = |e: &Engine, trace, q| {
        let times = e.pass_times().unwrap().expect("pooled steps");
        e.pooled(&times, 1, trace, q).unwrap().expect("a step")
    };
    let one = pooled(&e, true, 0.5);
    let own = e.summary(1).unwrap().expect("a step was run");
    assert_eq!(one.steps, 1);
    assert_eq!(one.summary.device_bubble, own.device_bubble);
    assert!(one.trace.is_some());
    for (s, b) in data.iter().enumerate().skip(2) {
        e.step(b, s).unwrap();
    }
    let three = pooled(&e, false, 0.5);
    assert_eq!(three.steps, 3);
    // a lower quantile takes no pass longer, so the replayed step is no longer
    let quiet = pooled(&e, false, 0.0);
    let slow = pooled(&e, false, 1.0);
    assert!(quiet.summary.device_step <= three.summary.device_step);
    assert!(three.summary.device_step <= slow.summary.device_step);
    let [lo, hi] = three.bubble_range;
    assert!(lo <= hi && three.trace.is_none());
    assert!((0.0..1.0).contains(&three.summary.device_bubble));
    e.pool_steps(false);
    assert!(e.pass_times().unwrap().is_none(), "pooling off");
}

#[test]
fn pass_times_carry_across_engines_of_one_partition_and_no_further() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let c = corpus();
    let serial = || RuntimeOptions {
        serial: true,
        ..RuntimeOptions::default()
    };
    // one pooled step at m = 2, then one at m = 4: the same two stages, so the same passes
    let pooled_step = |m: usize, kind: ScheduleKind, v: usize| {
        let cfg = cfg(m);
        let data = batches(&c, &cfg, 1);
        let mut e = engine(&gpus, cfg, pipeline(kind, 2, m, v), serial()).unwrap();
        e.pool_steps(true);
        e.step(&data[0], 0).unwrap();
        e
    };
    let two = pooled_step(2, ScheduleKind::OneFOneB, 1);
    let four = pooled_step(4, ScheduleKind::GPipe, 1);
    let own = four.pass_times().unwrap().expect("a pooled step");
    // m = 2's times alone cost m = 4's step: the same passes
    let two_times = two.pass_times().unwrap().unwrap();
    let on_two = four.pooled(&two_times, 1, false, 0.5).unwrap().unwrap();
    assert!(on_two.summary.device_step > 0.0);
    // m = 2's passes first, then m = 4's: each pass of m = 4 has 6 samples, and at the lowest
    // quantile none costs more than on m = 4's alone
    let mut carried = two_times.clone();
    assert_eq!(carried.fewest(), 2);
    carried.extend(&own).unwrap();
    assert_eq!(carried.fewest(), 6);
    let quiet = |t| four.pooled(t, 1, false, 0.0).unwrap().unwrap();
    assert!(quiet(&carried).summary.device_step <= quiet(&own).summary.device_step);
    let [lo, hi] = quiet(&carried).bubble_range;
    assert!(lo <= hi && (0.0..1.0).contains(&lo), "{lo} {hi}");
    // another partition's passes (two chunks per device) cost nothing here: a named refusal
    let other = pooled_step(4, ScheduleKind::Interleaved, 2);
    let e = four
        .pooled(&other.pass_times().unwrap().unwrap(), 1, false, 0.5)
        .expect_err("another partition's pass times");
    assert!(e.to_string().contains("another partition"), "{e}");
}
