//! The one runtime gives the bits the layouts gave before it: one device = the trainer, every
//! pipeline schedule = one device, ZeRO 1–3 = plain data parallelism (which follows one device
//! step by step to f32 rounding), ZeRO-1 in pipeline stages = plain data parallelism, dp × pp = plain dp, a worker behind a serialising
//! communicator = the in-process one — checked step by step on the loss and gradient norm, not
//! only on the final parameters.
mod common;

use triaxis::cpu::AdamW;
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::ScheduleKind;
use triaxis::runtime::{CommKind, Runtime, RuntimeOptions};
use triaxis::step::{StepStats, TrainConfig};
use triaxis::train::Trainer;

const STEPS: usize = 3;

fn cfg(accum: usize) -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab: 13,
            ctx: 8,
            channels: 16,
            heads: 2,
            layers: 2,
        },
        micro: Micro { b: 2, t: 8 },
        grad_accum: accum,
        steps: STEPS,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 8,
    }
}

type Batches = Vec<Vec<(Vec<u32>, Vec<u32>)>>;

fn data(n: usize) -> Batches {
    common::addition_batches(4, 6, n, STEPS, cfg(1).micro)
}

/// Trains `mesh` on the runtime: per-step stats (of device 0) and the checksum.
fn run(gpus: &[Gpu], mesh: Mesh, opts: RuntimeOptions, data: &Batches) -> (Vec<StepStats>, String) {
    let mut rt = Runtime::new(&gpus[..mesh.devices()], cfg(mesh.microbatches), mesh, opts)
        .unwrap_or_else(|e| panic!("{}: {e}", mesh.describe()));
    let n = rt.batches_per_step();
    let mut stats = Vec::new();
    for (s, b) in data.iter().enumerate() {
        let r = rt
            .step(&b[..n], s)
            .unwrap_or_else(|e| panic!("{}: {e}", mesh.describe()));
        for w in &r.runs[1..] {
            assert_eq!(
                w.stats.loss.to_bits(),
                r.runs[0].stats.loss.to_bits(),
                "{}: every device reports the same loss",
                mesh.describe()
            );
        }
        stats.push(r.runs[0].stats);
    }
    (stats, rt.checksum().unwrap())
}

fn mesh(dp: usize, pp: usize, m: usize) -> Mesh {
    Mesh {
        dp,
        pp,
        microbatches: m,
        ..Mesh::default()
    }
}

fn same_steps(what: &str, a: &[StepStats], b: &[StepStats]) {
    for (s, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(
            x.loss.to_bits(),
            y.loss.to_bits(),
            "{what}: loss of step {s}"
        );
        assert_eq!(x.lr.to_bits(), y.lr.to_bits(), "{what}: lr of step {s}");
        let rel = (x.grad_norm - y.grad_norm).abs() / y.grad_norm.max(1e-12);
        assert!(
            rel < 1e-5,
            "{what}: grad norm of step {s}: {} vs {}",
            x.grad_norm,
            y.grad_norm
        );
    }
}

/// Another summation order (d replicas vs one device): loss and gradient norm agree to f32
/// rounding each step, not bit for bit.
fn close_steps(what: &str, a: &[StepStats], b: &[StepStats]) {
    for (s, (x, y)) in a.iter().zip(b).enumerate() {
        let loss = (x.loss - y.loss).abs() / y.loss.abs().max(1e-12);
        let norm = (x.grad_norm - y.grad_norm).abs() / y.grad_norm.max(1e-12);
        println!("{what}: step {s}: loss rel {loss:.1e}, grad norm rel {norm:.1e}");
        assert!(
            loss < 1e-5 && norm < 1e-4,
            "{what}: step {s}: {x:?} vs {y:?}"
        );
        assert_eq!(x.lr.to_bits(), y.lr.to_bits(), "{what}: lr of step {s}");
    }
}

#[test]
fn one_device_and_every_pipeline_schedule_give_the_trainers_bits() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 4;
    let data = data(m);
    let mut one = Trainer::new(&gpus[0], cfg(m)).unwrap();
    let mut want = Vec::new();
    for (s, b) in data.iter().enumerate() {
        want.push(one.step(&b[..m], s).unwrap());
    }
    let single = one.checksum().unwrap();
    for (kind, pp, v) in [
        (ScheduleKind::OneFOneB, 1, 1),
        (ScheduleKind::GPipe, 2, 1),
        (ScheduleKind::OneFOneB, 2, 1),
        (ScheduleKind::ZeroBubbleH1, 2, 1),
        (ScheduleKind::Interleaved, 2, 2),
        (ScheduleKind::ZeroBubbleV, 2, 2),
        (ScheduleKind::DualPipeV, 2, 2),
        (ScheduleKind::OneFOneB, 4, 1),
    ] {
        let mesh = Mesh {
            schedule: kind,
            chunks: v,
            ..mesh(1, pp, m)
        };
        let (stats, sum) = run(&gpus, mesh, RuntimeOptions::default(), &data);
        println!("{}: {sum}", mesh.describe());
        same_steps(&mesh.describe(), &stats, &want);
        assert_eq!(sum, single, "{}: differs from one device", mesh.describe());
    }
}

#[test]
fn zero_1_to_3_give_plain_data_parallel_bits_and_follow_one_device() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    for (d, bucket_bytes) in [(2, 25 << 20), (4, 3 << 10)] {
        let data = data(d * m);
        // one device over the same global batch: the reference each step is held to
        let mut one = Trainer::new(&gpus[0], cfg(d * m)).unwrap();
        let single: Vec<StepStats> = data
            .iter()
            .enumerate()
            .map(|(s, b)| one.step(&b[..d * m], s).unwrap())
            .collect();
        let opts = RuntimeOptions {
            bucket_bytes,
            ..Default::default()
        };
        let (want, zero0) = run(&gpus, mesh(d, 1, m), opts.clone(), &data);
        close_steps(&format!("dp {d} vs one device"), &want, &single);
        for zero in [1, 2, 3] {
            let mesh = Mesh {
                zero,
                ..mesh(d, 1, m)
            };
            let (stats, sum) = run(&gpus, mesh, opts.clone(), &data);
            println!("{}: {sum}", mesh.describe());
            same_steps(&mesh.describe(), &stats, &want);
            assert_eq!(sum, zero0, "{}: differs from ZeRO stage 0", mesh.describe());
        }
    }
}

#[test]
fn dp_by_pp_and_zero_1_in_stages_give_plain_data_parallel_bits() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = data(2 * m);
    let (want, plain) = run(&gpus, mesh(2, 1, m), RuntimeOptions::default(), &data);
    for (kind, zero) in [
        (ScheduleKind::OneFOneB, 0),
        (ScheduleKind::OneFOneB, 1),
        (ScheduleKind::ZeroBubbleH1, 1),
        (ScheduleKind::ZeroBubbleV, 2),
        (ScheduleKind::GPipe, 0),
    ] {
        let mesh = Mesh {
            schedule: kind,
            chunks: kind.fixed_chunks().unwrap_or(1),
            zero,
            ..mesh(2, 2, m)
        };
        let (stats, sum) = run(&gpus, mesh, RuntimeOptions::default(), &data);
        println!("{}: {sum}", mesh.describe());
        same_steps(&mesh.describe(), &stats, &want);
        assert_eq!(sum, plain, "{}: differs from plain dp 2", mesh.describe());
    }
}

#[test]
fn a_serialising_communicator_gives_the_in_process_bits() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = data(2 * m);
    for mesh in [mesh(2, 1, m), mesh(2, 2, m)] {
        let (a, local) = run(&gpus, mesh, RuntimeOptions::default(), &data);
        let loopback = RuntimeOptions {
            comm: CommKind::Loopback,
            ..Default::default()
        };
        let (b, wire) = run(&gpus, mesh, loopback, &data);
        println!("{}: local {local}, loopback {wire}", mesh.describe());
        same_steps(&mesh.describe(), &b, &a);
        assert_eq!(wire, local, "{}", mesh.describe());
    }
}

#[test]
fn tensor_parallel_stays_within_tolerance_of_one_device() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = data(2 * m);
    let mut one = Trainer::new(&gpus[0], cfg(m)).unwrap();
    let mut want = Vec::new();
    for (s, b) in data.iter().enumerate() {
        want.push(one.step(&b[..m], s).unwrap());
    }
    let p1 = one.model.params().unwrap();
    for mesh in [
        Mesh {
            tp: 2,
            ..mesh(1, 1, m)
        },
        Mesh {
            tp: 2,
            ..mesh(1, 2, m)
        },
    ] {
        let mut rt = Runtime::new(
            &gpus[..mesh.devices()],
            cfg(m),
            mesh,
            RuntimeOptions::default(),
        )
        .unwrap();
        for (s, b) in data.iter().enumerate() {
            let r = rt.step(&b[..m], s).unwrap();
            let (x, y) = (&r.runs[0].stats, &want[s]);
            let rl = (x.loss - y.loss).abs() / y.loss;
            let rg = (x.grad_norm - y.grad_norm).abs() / y.grad_norm;
            println!(
                "{} step {s}: loss rel {rl:.2e}, grad norm rel {rg:.2e}",
                mesh.describe()
            );
            assert!(rl < 1e-5 && rg < 1e-4, "{}: step {s}", mesh.describe());
        }
        let err = common::l2_rel(&rt.params().unwrap(), &p1);
        println!("{}: params rel err {err:.2e}", mesh.describe());
        assert!(err < 1e-5, "{}", mesh.describe());
    }
}

#[test]
fn interleaved_over_four_devices_gives_one_devices_bits_on_both_communicators() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    // 8 stages (embedding, 6 layers, head) over 4 devices, 2 chunks each: activations and
    // gradients of different chunks share each link
    let m = 4;
    let six = |accum: usize| TrainConfig {
        model: GptConfig {
            layers: 6,
            ..cfg(accum).model
        },
        ..cfg(accum)
    };
    let data = data(m);
    let mut one = Trainer::new(&gpus[0], six(m)).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(&b[..m], s).unwrap();
    }
    let want = one.checksum().unwrap();
    let mesh = Mesh {
        schedule: ScheduleKind::Interleaved,
        chunks: 2,
        ..mesh(1, 4, m)
    };
    for comm in [CommKind::Local, CommKind::Loopback] {
        let opts = RuntimeOptions {
            comm,
            ..Default::default()
        };
        let mut rt = Runtime::new(&gpus, six(m), mesh, opts).unwrap();
        for (s, b) in data.iter().enumerate() {
            rt.step(&b[..m], s).unwrap();
        }
        let got = rt.checksum().unwrap();
        println!("{} {comm:?}: {got}", mesh.describe());
        assert_eq!(got, want, "{} {comm:?}", mesh.describe());
    }
}

#[test]
fn every_all_reduce_algorithm_trains_and_zero_keeps_the_ring() {
    use triaxis::collective::Algo;
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 1;
    let data = data(4 * m);
    let ring = run(&gpus, mesh(4, 1, m), RuntimeOptions::default(), &data);
    for algo in [Algo::Naive, Algo::Tree] {
        let opts = RuntimeOptions {
            dp_algo: algo,
            ..Default::default()
        };
        let (stats, sum) = run(&gpus, mesh(4, 1, m), opts, &data);
        println!("dp 4 {}: {sum} (ring {})", algo.name(), ring.1);
        for (s, (x, y)) in stats.iter().zip(&ring.0).enumerate() {
            let dl = (x.loss - y.loss).abs() / y.loss;
            assert!(dl < 1e-6, "{}: loss of step {s}", algo.name());
            let rel = (x.grad_norm - y.grad_norm).abs() / y.grad_norm;
            assert!(rel < 1e-5, "{}: grad norm of step {s}", algo.name());
        }
    }
    let zero = Mesh {
        zero: 1,
        ..mesh(2, 1, m)
    };
    let opts = RuntimeOptions {
        dp_algo: Algo::Tree,
        ..Default::default()
    };
    let e = Runtime::new(&gpus[..2], cfg(m), zero, opts)
        .err()
        .expect("refused");
    assert!(
        e.to_string().contains("reduce-scatters with the ring"),
        "{e}"
    );
}
