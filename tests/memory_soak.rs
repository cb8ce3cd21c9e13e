//! A memory soak through the engine: 300 steps of a tiny GPT on one device, dp 2 × pp 2 (1F1B),
//! plain data parallelism, ZeRO-3 and tp = 2. The first step builds what is built once (e.g.
//! the timestamp resolve buffer) and grows each device's kept read-back buffer to its largest
//! download; from the second step on, which holds that buffer throughout, no device's memory
//! ledger may grow: per category neither the bytes held between steps nor the peak. No step
//! may allocate more buffers than the second one did (the ledger's allocation count is
//! cumulative and every upload stages through a fresh buffer, so the count per step is what
//! must stay flat), and after the first no step allocates any buffer but a transfer's staging
//! (ZeRO-3 included: its models, slots and gradients are built once). A staging buffer, view or
//! activation kept alive beyond that fails it, named by layout, device, category and step. Not a
//! timed test: the wall times are printed, never asserted.
mod common;

use std::time::Instant;

use triaxis::cpu::AdamW;
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu;
use triaxis::memory::{Category, Usage};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::ScheduleKind;
use triaxis::step::TrainConfig;

const STEPS: usize = 300;
/// Distinct global batches, cycled over the steps.
const DISTINCT: usize = 8;

fn model() -> GptConfig {
    GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 1,
    }
}

fn cfg(accum: usize) -> TrainConfig {
    TrainConfig {
        model: model(),
        micro: Micro { b: 2, t: 8 },
        grad_accum: accum,
        steps: STEPS,
        adam: AdamW {
            lr: 1e-3,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 5,
    }
}

/// `got` must not exceed `base` (after step 1): bytes held now and each category's peak.
fn no_growth(layout: &str, d: usize, s: usize, base: &Usage, got: &Usage) {
    for cat in Category::ALL {
        let (b, g) = (base.current.get(cat), got.current.get(cat));
        assert!(
            g <= b,
            "{layout}: device {d} ({}), {}: {g} B held after step {s}, {b} B after step 1 \
             (+{} B)",
            got.device,
            cat.name(),
            g - b
        );
        let (b, g) = (base.peak.get(cat), got.peak.get(cat));
        assert!(
            g <= b,
            "{layout}: device {d} ({}), {}: peak {g} B by step {s}, {b} B by step 1 (+{} B)",
            got.device,
            cat.name(),
            g - b
        );
    }
    assert!(
        got.peak_total <= base.peak_total,
        "{layout}: device {d} ({}): total peak {} B by step {s}, {} B by step 1",
        got.device,
        got.peak_total,
        base.peak_total
    );
}

/// Trains `mesh` for [`STEPS`] steps on `gpus` and checks every device's ledger after each.
fn soak(layout: &str, mesh: Mesh) {
    let Some(gpus) = gpu::test_gpus(mesh.devices()) else {
        return;
    };
    let c = cfg(mesh.microbatches);
    let mut e = Engine::new(&gpus, c.clone(), mesh, RuntimeOptions::default()).unwrap();
    let data = common::addition_batches(4, 6, e.batches_per_step(), DISTINCT, c.micro);
    let t0 = Instant::now();
    let mut base: Vec<Usage> = Vec::new();
    let mut prev: Vec<Usage> = Vec::new();
    // buffers each device allocated during step 1 (the first step after the baseline)
    let mut per_step: Vec<u64> = Vec::new();
    let (mut first_loss, mut last_loss) = (0.0, 0.0);
    let mut walls = Vec::with_capacity(STEPS);
    for s in 0..STEPS {
        let costs = e.step(&data[s % DISTINCT], s).unwrap();
        walls.push(costs.wall);
        let loss = costs.stats.loss;
        assert!(loss.is_finite(), "{layout}: step {s}: loss {loss}");
        let mem = costs.memory;
        assert_eq!(mem.len(), mesh.devices(), "{layout}: one usage per device");
        if s == 0 {
            first_loss = loss;
        } else {
            for (d, u) in mem.iter().enumerate() {
                if s >= 2 {
                    no_growth(layout, d, s, &base[d], u);
                }
                // every buffer but a host transfer's staging is built once, before step 0 ends
                let built = |x: &Usage| x.allocations - x.staging_allocations;
                assert_eq!(
                    built(u),
                    built(&prev[d]),
                    "{layout}: device {d} ({}): step {s} allocated a buffer that is no staging",
                    u.device
                );
                let n = u.allocations - prev[d].allocations;
                if s == 1 {
                    per_step.push(n);
                } else {
                    assert!(
                        n <= per_step[d],
                        "{layout}: device {d} ({}): step {s} allocated {n} buffers, step 1 {}",
                        u.device,
                        per_step[d]
                    );
                }
            }
        }
        if s == 1 {
            base = mem.clone();
        }
        last_loss = loss;
        prev = mem;
    }
    let wall = t0.elapsed().as_secs_f64();
    for (d, (b, u)) in base.iter().zip(&prev).enumerate() {
        println!(
            "{layout}: device {d}: {} B held after step 1 and after step {}, peak {} B \
             (activations {} B, staging {} B), {} buffers per step",
            b.current.total(),
            STEPS - 1,
            u.peak_total,
            u.peak.activations,
            u.peak.staging,
            per_step[d]
        );
    }
    // (information only: the communicators' ledgers keep every step's entries)
    let mean_ms = |w: &[f64]| 1e3 * w.iter().sum::<f64>() / w.len() as f64;
    let k = STEPS / 6;
    println!(
        "{layout}: {STEPS} steps in {wall:.1} s (steps 1–{k}: {:.1} ms each, last {k}: {:.1} ms), \
         loss {first_loss:.3} → {last_loss:.3} ({})",
        mean_ms(&walls[1..=k]),
        mean_ms(&walls[STEPS - k..]),
        mesh.describe()
    );
    // every buffer of the engine goes with it
    drop(e);
    for (d, g) in gpus.iter().enumerate() {
        let now = g.memory().current;
        println!(
            "{layout}: device {d}: {} B held after the engine dropped (model state {} B)",
            now.total(),
            now.model_state()
        );
        assert_eq!(
            now.model_state(),
            0,
            "{layout}: device {d}: model state left after the engine dropped"
        );
    }
}

#[test]
fn one_device_holds_its_memory_flat() {
    soak("one device", Mesh::default());
}

#[test]
fn dp_2_pp_2_one_f_one_b_holds_its_memory_flat() {
    soak(
        "dp 2 × pp 2 (1F1B)",
        Mesh {
            dp: 2,
            pp: 2,
            schedule: ScheduleKind::OneFOneB,
            microbatches: 2,
            ..Mesh::default()
        },
    );
}

#[test]
fn plain_data_parallel_holds_its_memory_flat() {
    soak(
        "plain dp 2",
        Mesh {
            dp: 2,
            ..Mesh::default()
        },
    );
}

#[test]
fn zero_3_holds_its_memory_flat() {
    soak(
        "ZeRO-3 dp 2",
        Mesh {
            dp: 2,
            zero: 3,
            ..Mesh::default()
        },
    );
}

#[test]
fn tensor_parallel_holds_its_memory_flat() {
    soak(
        "tp 2",
        Mesh {
            tp: 2,
            ..Mesh::default()
        },
    );
}
