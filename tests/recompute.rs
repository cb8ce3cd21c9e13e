//! Activation recomputation repeats the forward's own kernels in the same order, so every
//! layout gives the bits of `--recompute none`, step by step, while the chunk keeps fewer
//! activation bytes.
mod common;

use common::tiny;
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::Recompute;
use triaxis::pipeline::ScheduleKind;
use triaxis::runtime::{Runtime, RuntimeOptions};

/// Per-step loss bits, the checksum and device 0's activation bytes of `mesh` under `mode`.
fn run(gpus: &[Gpu], mesh: Mesh, mode: Recompute) -> (Vec<u32>, String, u64) {
    let opts = RuntimeOptions {
        recompute: mode,
        ..RuntimeOptions::default()
    };
    let what = format!("{} recompute {mode}", mesh.describe());
    // the peaks of this run only (the devices outlive the runs before it)
    for g in gpus {
        g.reset_memory_peaks();
    }
    let mut rt = Runtime::new(
        &gpus[..mesh.devices()],
        tiny::cfg(mesh.microbatches),
        mesh,
        opts,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let data = tiny::batches(mesh.microbatches * mesh.dp, 3);
    let n = rt.batches_per_step();
    let mut losses = Vec::new();
    let mut act = 0;
    for (s, b) in data.iter().enumerate() {
        let r = rt
            .step(&b[..n], s)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        losses.push(r.runs[0].stats.loss.to_bits());
        // the busiest device (under ZB-V device 0 holds only the embedding and the head)
        act = r
            .runs
            .iter()
            .map(|d| d.memory.peak.activations)
            .max()
            .unwrap_or(0);
    }
    (losses, rt.checksum().unwrap(), act)
}

fn layouts() -> Vec<Mesh> {
    let with = |kind, chunks, m: Mesh| Mesh {
        schedule: kind,
        chunks,
        ..m
    };
    vec![
        tiny::mesh(1, 1, 1, 2),
        with(ScheduleKind::OneFOneB, 1, tiny::mesh(2, 1, 2, 4)),
        with(ScheduleKind::ZeroBubbleH1, 1, tiny::mesh(2, 1, 2, 4)),
        tiny::mesh(1, 2, 1, 2),
        with(ScheduleKind::OneFOneB, 1, tiny::mesh(1, 2, 2, 4)),
        with(ScheduleKind::Interleaved, 2, tiny::mesh(1, 1, 2, 4)),
        with(ScheduleKind::ZeroBubbleV, 2, tiny::mesh(1, 1, 2, 4)),
        with(ScheduleKind::DualPipeV, 2, tiny::mesh(1, 1, 2, 4)),
        Mesh {
            zero: 3,
            ..tiny::mesh(2, 1, 1, 2)
        },
        Mesh {
            zero: 1,
            ..tiny::mesh(2, 1, 1, 2)
        },
    ]
}

#[test]
fn recomputation_gives_the_bits_of_keeping_everything() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let _one = tiny::one_at_a_time();
    for mesh in layouts() {
        let (losses, sum, act) = run(&gpus, mesh, Recompute::None);
        for mode in [Recompute::Selective, Recompute::Full] {
            let (l, s, a) = run(&gpus, mesh, mode);
            let what = format!("{} recompute {mode}", mesh.describe());
            println!("{what}: {s}, activations {a} B vs {act} B kept");
            assert_eq!(l, losses, "{what}: the loss of every step");
            assert_eq!(s, sum, "{what}: the parameters after the steps");
            assert!(
                a < act,
                "{what}: {a} activation bytes, not fewer than {act}"
            );
        }
    }
}

#[test]
fn full_recomputation_of_a_split_tensor_parallel_backward_is_refused() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let mesh = Mesh {
        schedule: ScheduleKind::ZeroBubbleH1,
        ..tiny::mesh(1, 2, 2, 4)
    };
    let opts = |recompute| RuntimeOptions {
        recompute,
        ..RuntimeOptions::default()
    };
    let err = Runtime::new(&gpus, tiny::cfg(4), mesh, opts(Recompute::Full))
        .err()
        .expect("full recomputation under zb-h1 with tp 2 is refused");
    let msg = err.to_string();
    println!("{msg}");
    assert!(
        msg.contains("full recomputation") && msg.contains("selective"),
        "{msg}"
    );
    // selective recomputation of the same layout runs and keeps the bits
    let (a, _, _) = run(&gpus, mesh, Recompute::None);
    let (b, _, _) = run(&gpus, mesh, Recompute::Selective);
    assert_eq!(a, b, "zb-h1 × tp 2, selective: the loss of every step");
}
