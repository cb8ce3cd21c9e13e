//! Executor overhead per action: a pipeline step of a tiny model on the runtime, through the
//! engine (where kernels cost little and the runtime's own work — threads, communicators, host
//! staging, timing — dominates) next to the same microbatches on one device, in one run.
//! Overhead per action = (pipeline step − one-device step) / actions per step.
//!
//! Run: `cargo bench --bench pipeline`.

use criterion::{criterion_group, criterion_main, Criterion};
use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::{Schedule, ScheduleKind};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;

fn bench(c: &mut Criterion) {
    let (p, m) = (4, 8);
    let gpus = match AdapterChoice::from_env().and_then(|ch| Gpu::open_virtual(&ch, p)) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("SKIP: no GPU adapter ({e})");
            return;
        }
    };
    let cfg = TrainConfig {
        model: GptConfig {
            vocab: 13,
            ctx: 8,
            channels: 16,
            heads: 2,
            layers: 4,
        },
        micro: Micro { b: 2, t: 8 },
        grad_accum: m,
        steps: 1,
        adam: AdamW::default(),
        warmup: 1,
        min_lr_frac: 1.0,
        seed: 1,
    };
    let corpus = Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 500,
        val_problems: 10,
        seed: 1,
        reverse: true,
        pad: false,
    })
    .expect("corpus");
    let mut batcher = Batcher::new(3);
    let batches: Vec<_> = (0..m)
        .map(|_| corpus.train_batch(&mut batcher, cfg.micro).expect("batch"))
        .collect();
    let mut one = Trainer::new(&gpus[0], cfg.clone()).expect("trainer");
    let sched = Schedule::new(ScheduleKind::OneFOneB, p, m, 1).expect("schedule");
    let actions: usize = sched.actions.iter().map(Vec::len).sum();
    assert_eq!(actions, 2 * p * m);
    let mesh = Mesh {
        pp: p,
        microbatches: m,
        schedule: ScheduleKind::OneFOneB,
        ..Mesh::default()
    };
    let mut pipe = Engine::new(&gpus, cfg, mesh, RuntimeOptions::default()).expect("pipeline");
    let mut g = c.benchmark_group("executor");
    g.sample_size(20);
    let mut t_one = Vec::new();
    let mut t_pipe = Vec::new();
    g.bench_function("one_device_step", |b| {
        b.iter(|| {
            let t = std::time::Instant::now();
            one.step(&batches, 0).expect("step");
            t_one.push(t.elapsed().as_secs_f64());
        })
    });
    g.bench_function("pipeline_1f1b_p4_m8_step", |b| {
        b.iter(|| {
            let t = std::time::Instant::now();
            pipe.step(&batches, 0).expect("step");
            t_pipe.push(t.elapsed().as_secs_f64());
        })
    });
    g.finish();
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (med(&mut t_one), med(&mut t_pipe));
    println!(
        "executor overhead on {}: one device {:.2} ms, pipeline {:.2} ms for {actions} actions → {:.0} µs per action (median)",
        gpus[0].adapter_name(),
        a * 1e3,
        b * 1e3,
        (b - a) / actions as f64 * 1e6
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
