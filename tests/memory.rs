//! The memory ledger: allocations by category, releases when the last view drops, transfer
//! staging, peaks and their reset, and the per-device peaks in a data-parallel step report.
mod common;

use triaxis::cpu::AdamW;
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu;
use triaxis::memory::Category;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::params::Buffers;
use triaxis::step::TrainConfig;

#[test]
fn allocations_are_counted_until_the_last_view_drops() {
    let Some(g) = gpu::test_gpu() else { return };
    let base = g.memory();
    let a = g.buffer_in(Category::Gradients, "a", 1000);
    let slice = a.slice(64, 10);
    let act = g.buffer("scratch", 7); // untagged: activations
    let now = g.memory();
    assert_eq!(now.current.gradients - base.current.gradients, 4000);
    assert_eq!(now.current.activations - base.current.activations, 28);
    assert_eq!(a.buf.category(), Some(Category::Gradients));
    drop(a);
    assert_eq!(
        g.memory().current.gradients,
        now.current.gradients,
        "a slice still holds the buffer"
    );
    drop(slice);
    drop(act);
    let after = g.memory();
    assert_eq!(after.current.gradients, base.current.gradients);
    assert_eq!(after.current.activations, base.current.activations);
    assert!(after.peak.gradients >= base.current.gradients + 4000);
    // a new peak window starts at the current bytes
    g.reset_memory_peaks();
    assert_eq!(g.memory().peak, g.memory().current);
}

/// A download's staging buffer is kept for the next download that fits (counted as staging
/// while kept) and grows to the largest; an upload's staging counts only while it runs.
#[test]
fn downloads_reuse_one_kept_staging_buffer_and_uploads_stage_while_they_run() {
    let Some(g) = gpu::test_gpu() else { return };
    let v = common::buf(&g, &[1.0; 256]);
    let w = common::buf(&g, &[2.0; 512]);
    let before = g.memory();
    let back: Vec<f32> = g.download(&v).unwrap();
    let first = g.memory();
    assert_eq!(first.current.staging - before.current.staging, 1024, "kept");
    for _ in 0..3 {
        assert_eq!(g.download::<f32>(&v).unwrap(), back);
    }
    let again = g.memory();
    assert_eq!(again.current.staging, first.current.staging);
    assert_eq!(
        again.staging_allocations, first.staging_allocations,
        "a download that fits makes no buffer"
    );
    assert_eq!(g.download::<f32>(&w).unwrap(), vec![2.0; 512]);
    let grown = g.memory();
    assert_eq!(
        grown.current.staging - before.current.staging,
        2048,
        "grown, not added"
    );
    assert_eq!(
        g.download::<f32>(&v).unwrap(),
        back,
        "a smaller one fits the larger"
    );
    assert_eq!(g.memory().staging_allocations, grown.staging_allocations);
    g.reset_memory_peaks();
    let pre = g.memory();
    g.upload(&v, &back).unwrap();
    let post = g.memory();
    assert_eq!(post.current.staging, pre.current.staging);
    assert_eq!(post.peak.staging - pre.current.staging, 1024);
}

#[test]
fn flat_buffers_are_parameters_gradients_and_optimizer_state() {
    let Some(g) = gpu::test_gpu() else { return };
    let c = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 1,
    };
    let layout = c.layout(&c.blocks());
    let base = g.memory().current;
    let b = Buffers::new(&g, &layout);
    let now = g.memory().current;
    let n = 4 * layout.total as u64;
    assert_eq!(now.parameters - base.parameters, n);
    assert_eq!(now.gradients - base.gradients, n);
    assert_eq!(now.optimizer_state - base.optimizer_state, 2 * n);
    assert_eq!(b.bytes(), 4 * n);
    drop(b);
    assert_eq!(g.memory().current.model_state(), base.model_state());
}

#[test]
fn data_parallel_steps_report_peaks_per_device() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let model = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 2,
    };
    let cfg = TrainConfig {
        model,
        micro: Micro { b: 1, t: 8 },
        grad_accum: 1,
        steps: 1,
        adam: AdamW::default(),
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 1,
    };
    let mesh = Mesh {
        dp: 2,
        ..Mesh::default()
    };
    let mut dp = Engine::new(&gpus, cfg, mesh, RuntimeOptions::default()).unwrap();
    let batch: Vec<(Vec<u32>, Vec<u32>)> = (0..2)
        .map(|i| {
            (
                (0..8).map(|t| (t + i) % 13).collect(),
                (1..9).map(|t| (t + i) % 13).collect(),
            )
        })
        .collect();
    // the step's peaks are its own, as the data-parallel runner's steps reset them
    for g in &gpus {
        g.sync().unwrap();
        g.reset_memory_peaks();
    }
    let r = dp.step(&batch, 0).unwrap();
    let n = model.layout(&model.blocks()).total as u64;
    assert_eq!(r.memory.len(), 2);
    for u in &r.memory {
        println!("{u:?}");
        assert_eq!(
            u.current.model_state(),
            16 * n,
            "P + G + K = 16 bytes per element"
        );
        assert!(u.peak.activations > 0 && u.peak.staging > 0);
        assert!(u.peak_total >= u.current.total());
    }
}
