//! Data parallelism: d replicas match one device, repeat bit for bit, move exactly the ring's
//! bytes, and reject impossible batches.
mod common;

use triaxis::collective::{ring_all_reduce_bytes, ring_all_reduce_rank_bytes, Algo};
use triaxis::cpu::AdamW;
use triaxis::gpu;
use triaxis::model::{GptConfig, Micro};
use triaxis::parallel::data::{DataParallel, DpOptions};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;

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
        steps: 4,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 8,
    }
}

fn global_batches(n: usize, steps: usize, micro: Micro) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    common::addition_batches(4, 6, n, steps, micro)
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

#[test]
fn replicas_match_one_device_and_repeat_bit_for_bit() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let global = 4; // microbatches per step
    let data = global_batches(global, 4, cfg(1).micro);
    let mut one = Trainer::new(&gpus[0], cfg(global)).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(b, s).unwrap();
    }
    let reference = one.model.params().unwrap();
    for d in [2, 4] {
        for algo in [Algo::Ring, Algo::Naive] {
            let run = || {
                let opts = DpOptions {
                    algo,
                    ..Default::default()
                };
                let mut dp = DataParallel::new(&gpus[..d], cfg(global / d), opts).unwrap();
                for (s, b) in data.iter().enumerate() {
                    dp.step(b, s).unwrap();
                }
                assert!(dp.replicas_agree().unwrap(), "d={d}: replicas diverged");
                (dp.params(0).unwrap(), dp.checksum().unwrap())
            };
            let (p, c1) = run();
            let (_, c2) = run();
            let err = max_rel(&p, &reference);
            println!("d={d} {algo:?}: max |Δ| / max |p| vs one device = {err:.2e}; {c1}");
            assert!(
                err < 1e-5,
                "d={d} {algo:?}: parameters differ from one device by {err}"
            );
            assert_eq!(c1, c2, "d={d} {algo:?}: two runs must give the same bits");
        }
    }
}

#[test]
fn ledger_bytes_equal_the_ring_formula() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    for d in [2, 3, 4] {
        let opts = DpOptions {
            bucket_bytes: 8 << 10,
            ..Default::default()
        };
        let mut dp = DataParallel::new(&gpus[..d], cfg(1), opts).unwrap();
        assert!(
            dp.buckets.len() > 1,
            "small buckets must split the gradients"
        );
        let data = global_batches(d, 1, cfg(1).micro);
        let r = dp.step(&data[0], 0).unwrap();
        for rank in 0..d {
            let want: u64 = dp
                .buckets
                .iter()
                .map(|b| ring_all_reduce_rank_bytes(b.range.len(), d, rank))
                .sum();
            assert_eq!(r.bytes_per_rank[rank], want, "d={d} rank {rank}");
        }
        // the busiest rank moves 2(d−1)/d·S (exactly, when d divides every bucket)
        let s_bytes: u64 = dp.buckets.iter().map(|b| 4 * b.range.len() as u64).sum();
        let busiest: u64 = dp
            .buckets
            .iter()
            .map(|b| ring_all_reduce_bytes(b.range.len(), d))
            .sum();
        let formula = 2.0 * (d as f64 - 1.0) / d as f64 * s_bytes as f64;
        println!(
            "d={d}: {} buckets, per rank {:?} bytes; 2(d-1)/d*S = {formula:.0}",
            dp.buckets.len(),
            r.bytes_per_rank
        );
        assert_eq!(*r.bytes_per_rank.iter().max().unwrap(), busiest);
        assert!((busiest as f64 - formula).abs() <= 8.0 * dp.buckets.len() as f64);
    }
}

#[test]
fn impossible_batches_are_clear_errors() {
    let e = DataParallel::accumulation(10, 4, 2).unwrap_err();
    assert!(
        e.to_string().contains("not divisible by d × microbatch"),
        "{e}"
    );
    let e = DataParallel::accumulation(8, 0, 2).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
    assert_eq!(DataParallel::accumulation(16, 4, 2).unwrap(), 2);
    let e = DataParallel::new(&[], cfg(1), DpOptions::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("d = 0"), "{e}");
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let mut dp = DataParallel::new(&gpus, cfg(1), DpOptions::default()).unwrap();
    let data = global_batches(3, 1, cfg(1).micro);
    assert!(dp.step(&data[0], 0).is_err());
}

#[test]
fn a_failing_replica_ends_the_step_with_a_named_error() {
    use triaxis::collective::{Fault, Opts};
    let Some(gpus) = gpu::test_gpus(3) else {
        return;
    };
    let collective = Opts {
        fault: Some(Fault { rank: 1, round: 2 }),
        recv_timeout: std::time::Duration::from_secs(20),
        ..Default::default()
    };
    let mut dp = DataParallel::new(
        &gpus,
        cfg(1),
        DpOptions {
            collective,
            ..Default::default()
        },
    )
    .unwrap();
    let data = global_batches(3, 1, cfg(1).micro);
    let t = std::time::Instant::now();
    let e = dp.step(&data[0], 0).unwrap_err();
    println!("{e} (after {:?})", t.elapsed());
    match e {
        triaxis::Error::Worker { device, .. } => assert_eq!(device, 1),
        other => panic!("expected a worker error, got {other}"),
    }
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn pairwise_tree_accumulation_is_bit_identical_across_layouts() {
    use triaxis::parallel::accumulate::Accumulation;
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let global = 8; // microbatches per step
    let data = global_batches(global, 3, cfg(1).micro);
    let t = std::time::Instant::now();
    let mut one =
        Trainer::with_accumulation(&gpus[0], cfg(global), Accumulation::PairwiseTree).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(b, s).unwrap();
    }
    let tree_time = t.elapsed();
    let reference = one.checksum().unwrap();
    let t = std::time::Instant::now();
    let mut seq = Trainer::new(&gpus[0], cfg(global)).unwrap();
    for (s, b) in data.iter().enumerate() {
        seq.step(b, s).unwrap();
    }
    println!(
        "one device: pairwise tree {tree_time:?} vs sequential {:?} for 3 steps",
        t.elapsed()
    );
    for d in [2, 4] {
        let opts = DpOptions {
            algo: Algo::Tree,
            accumulation: Accumulation::PairwiseTree,
            ..Default::default()
        };
        let mut dp = DataParallel::new(&gpus[..d], cfg(global / d), opts).unwrap();
        for (s, b) in data.iter().enumerate() {
            dp.step(b, s).unwrap();
        }
        println!("d={d}: {}", dp.checksum().unwrap());
        assert_eq!(
            dp.checksum().unwrap(),
            reference,
            "d={d}: the pairwise tree must give one device's bits"
        );
    }
    // the sequential ring layout is not bit-identical to one device (that is the point of the mode)
    let bad = DpOptions {
        algo: Algo::Ring,
        accumulation: Accumulation::PairwiseTree,
        ..Default::default()
    };
    let e = DataParallel::new(&gpus[..2], cfg(4), bad).err().unwrap();
    assert!(e.to_string().contains("tree all-reduce"), "{e}");
    let e = Trainer::with_accumulation(&gpus[0], cfg(3), Accumulation::PairwiseTree)
        .err()
        .unwrap();
    assert!(e.to_string().contains("power-of-two"), "{e}");
}

#[test]
fn overlap_changes_timing_not_bits() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let data = global_batches(4, 2, cfg(1).micro);
    let mut sums = Vec::new();
    for overlap in [false, true] {
        let opts = DpOptions {
            overlap,
            bucket_bytes: 8 << 10,
            ..Default::default()
        };
        let mut dp = DataParallel::new(&gpus, cfg(2), opts).unwrap();
        for (s, b) in data.iter().enumerate() {
            let r = dp.step(b, s).unwrap();
            assert_eq!(r.buckets.len(), dp.buckets.len());
            assert!(r.exposed_device <= r.comm_device + 1e-12);
            if !overlap {
                assert!(
                    (r.exposed_device - r.comm_device).abs() < 1e-9,
                    "without overlap all comm is exposed"
                );
            }
        }
        sums.push(dp.checksum().unwrap());
    }
    assert_eq!(sums[0], sums[1]);
}

#[test]
fn buckets_follow_the_order_backward_finishes_gradients() {
    use triaxis::model::gpu_model::GpuModel;
    use triaxis::parallel::bucket::{buckets, device_schedule, BucketTiming};
    let Some(g) = gpu::test_gpu() else { return };
    let c = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 3,
    };
    let m = GpuModel::new(&g, c, &c.blocks(), Micro { b: 1, t: 8 }, 1.0).unwrap();
    let layout = &m.buffers.layout;
    // one group per linear / layernorm pair: head 2, each layer 6, embedding 1
    assert_eq!(m.grad_ready.len(), 2 + 6 * 3 + 1);
    let one_per_group = buckets(layout, &m.grad_ready, 1);
    assert_eq!(one_per_group.len(), m.grad_ready.len());
    assert_eq!(one_per_group[0].tensors, vec!["headw"]);
    assert_eq!(one_per_group[2].tensors, vec!["h2.fcprojw", "h2.fcprojb"]);
    // groups lie downwards and tile the buffer
    assert_eq!(one_per_group[0].range.end, layout.total);
    for w in one_per_group.windows(2) {
        assert_eq!(w[1].range.end, w[0].range.start);
    }
    assert_eq!(one_per_group.last().unwrap().range.start, 0);
    let all = buckets(layout, &m.grad_ready, usize::MAX);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].range, 0..layout.total);
    assert_eq!(all[0].ready_point, m.grad_ready.len() - 1);
    // the device-clock model: ready at 1, 2, 3 s; each all-reduce 0.5 s; compute ends at 3 s
    let mut t: Vec<BucketTiming> = [1.0, 2.0, 3.0]
        .iter()
        .map(|&r| BucketTiming {
            ready_device: r,
            ..Default::default()
        })
        .collect();
    assert_eq!(device_schedule(&mut t, &[0.5; 3], 3.0, true), 3.5);
    assert_eq!(device_schedule(&mut t, &[0.5; 3], 3.0, false), 4.5);
}

#[test]
fn dp_by_pp_trains_and_matches_one_device() {
    use triaxis::engine::{Engine, EngineOptions};
    use triaxis::mesh::Mesh;
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2; // microbatches per pipeline replica
    let data = global_batches(2 * m, 4, cfg(1).micro);
    let mut one = Trainer::new(&gpus[0], cfg(2 * m)).unwrap();
    let mut losses = Vec::new();
    for (s, b) in data.iter().enumerate() {
        losses.push(one.step(b, s).unwrap().loss);
    }
    let reference = one.model.params().unwrap();
    let mesh = Mesh {
        dp: 2,
        pp: 2,
        microbatches: m,
        ..Mesh::default()
    };
    let mut hy = Engine::new(&gpus, cfg(m), mesh, EngineOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate() {
        let st = hy.step(b, s).unwrap().stats;
        assert!(
            (st.loss - losses[s]).abs() / losses[s] < 1e-5,
            "step {s}: loss {} vs {}",
            st.loss,
            losses[s]
        );
    }
    let p = hy.state().unwrap().params;
    assert!(
        hy.replicas_agree().unwrap(),
        "replicas must agree bit for bit"
    );
    let err = max_rel(&p, &reference);
    println!("dp × pp = 2 × 2: max |Δ| / max |p| vs one device = {err:.2e}");
    assert!(err < 1e-5);
    assert!(Engine::new(&gpus[..3], cfg(m), mesh, EngineOptions::default()).is_err());
}
