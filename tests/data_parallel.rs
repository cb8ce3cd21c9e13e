//! Data parallelism: d replicas match one device, repeat bit for bit, move exactly the ring's
//! bytes, and reject impossible batches.
mod common;

use triaxis::collective::{chunk, ring_all_reduce_bytes, ring_all_reduce_rank_bytes, Algo};
use triaxis::cpu::AdamW;
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::runtime::{Fault, FaultKind};
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

fn engine(gpus: &[Gpu], d: usize, k: usize, opts: RuntimeOptions) -> Engine {
    let mesh = Mesh {
        dp: d,
        microbatches: k,
        ..Mesh::default()
    };
    Engine::new(&gpus[..d], cfg(k), mesh, opts).unwrap_or_else(|e| panic!("dp {d}: {e}"))
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
                let opts = RuntimeOptions {
                    dp_algo: algo,
                    ..Default::default()
                };
                let mut dp = engine(&gpus, d, global / d, opts);
                for (s, b) in data.iter().enumerate() {
                    dp.step(b, s).unwrap();
                }
                assert!(dp.replicas_agree().unwrap(), "d={d}: replicas diverged");
                (dp.state().unwrap().params, dp.checksum().unwrap())
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

/// Bytes rank `r` sends in a ring all-reduce over the chunk bounds `b` (d + 1 offsets): every
/// chunk but its own in the reduce-scatter, every chunk but (r + 1)'s in the all-gather.
fn ring_rank_bytes(b: &[usize], r: usize) -> u64 {
    let d = b.len() - 1;
    let (n, len) = (b[d] - b[0], |k: usize| b[k + 1] - b[k]);
    4 * (2 * n - len(r) - len((r + 1) % d)) as u64
}

#[test]
fn ledger_bytes_equal_the_ring_formula() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    for d in [2, 3, 4] {
        let opts = RuntimeOptions {
            bucket_bytes: 8 << 10,
            ..Default::default()
        };
        let mut dp = engine(&gpus, d, 1, opts);
        let info = dp.runtime().chunks(0).remove(0);
        assert!(
            info.buckets.len() > 1,
            "small buckets must split the gradients"
        );
        let data = global_batches(d, 1, cfg(1).micro);
        dp.step(&data[0], 0).unwrap();
        let sent: Vec<u64> = (0..d)
            .map(|r| dp.runtime().workers[r].comms.dp.ledger().hop_bytes())
            .collect();
        let even = info.grid.units.iter().all(|u| {
            let n = u.range.len();
            (0..d).all(|k| u.bounds[k + 1] - u.bounds[k] == chunk(n, d, k).len())
        });
        for (rank, &got) in sent.iter().enumerate() {
            // each bucket's chunks are the shard grid's (64-element aligned) bounds
            let want: u64 = info
                .grid
                .units
                .iter()
                .map(|u| ring_rank_bytes(&u.bounds, rank))
                .sum();
            assert_eq!(got, want, "d={d} rank {rank}");
            // with even chunks that is the ledger's own formula, bucket by bucket
            if even {
                let even: u64 = info
                    .buckets
                    .iter()
                    .map(|b| ring_all_reduce_rank_bytes(b.len(), d, rank))
                    .sum();
                assert_eq!(got, even, "d={d} rank {rank}: even chunks");
            }
        }
        // the whole group moves exactly 2(d−1)·S; the busiest rank 2(d−1)/d·S within the
        // chunks' 64-element alignment
        let s_bytes: u64 = info.buckets.iter().map(|b| 4 * b.len() as u64).sum();
        let formula = 2.0 * (d as f64 - 1.0) / d as f64 * s_bytes as f64;
        println!(
            "d={d}: {} buckets, per rank {sent:?} bytes; 2(d-1)/d*S = {formula:.0}",
            info.buckets.len()
        );
        assert_eq!(sent.iter().sum::<u64>(), 2 * (d as u64 - 1) * s_bytes);
        let busiest = *sent.iter().max().unwrap();
        if even {
            let want: u64 = info
                .buckets
                .iter()
                .map(|b| ring_all_reduce_bytes(b.len(), d))
                .sum();
            assert_eq!(busiest, want, "d={d}: the busiest rank");
        }
        let slack = 2.0 * 4.0 * 64.0 * info.buckets.len() as f64;
        assert!((busiest as f64 - formula).abs() <= slack);
    }
}

#[test]
fn impossible_batches_are_clear_errors() {
    let mesh = Mesh {
        dp: 0,
        ..Mesh::default()
    };
    let e = mesh.validate(&cfg(1).model, 2, 8, 1).unwrap_err();
    assert!(e.to_string().contains("--dp must be at least 1"), "{e}");
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let mesh = Mesh {
        dp: 2,
        ..Mesh::default()
    };
    let e = Engine::new(&gpus, cfg(2), mesh, RuntimeOptions::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("accumulates 2 microbatches"), "{e}");
    let mut dp = engine(&gpus, 2, 1, RuntimeOptions::default());
    let data = global_batches(3, 1, cfg(1).micro);
    let e = dp.step(&data[0], 0).unwrap_err();
    assert!(e.to_string().contains("needs 2 microbatches, got 3"), "{e}");
}

#[test]
fn a_failing_replica_ends_the_step_with_a_named_error() {
    let Some(gpus) = gpu::test_gpus(3) else {
        return;
    };
    let opts = RuntimeOptions {
        // replica 1 fails in its third gradient reduction
        reduce_fault: Some(Fault {
            device: 1,
            action: 2,
            step: 0,
            kind: FaultKind::Error,
        }),
        bucket_bytes: 8 << 10,
        recv_timeout: std::time::Duration::from_secs(20),
        ..Default::default()
    };
    let mut dp = engine(&gpus, 3, 1, opts);
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
    let tree = RuntimeOptions {
        dp_algo: Algo::Tree,
        accumulation: Accumulation::PairwiseTree,
        bucket_bytes: 8 << 10,
        ..Default::default()
    };
    for d in [1, 2, 4] {
        let mut dp = engine(&gpus, d, global / d, tree.clone());
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
    let bad = RuntimeOptions {
        dp_algo: Algo::Ring,
        ..tree.clone()
    };
    let mesh = Mesh {
        dp: 2,
        microbatches: 4,
        ..Mesh::default()
    };
    let e = Engine::new(&gpus[..2], cfg(4), mesh, bad).err().unwrap();
    assert!(e.to_string().contains("tree all-reduce"), "{e}");
    let mesh = Mesh {
        microbatches: 3,
        ..Mesh::default()
    };
    let e = Engine::new(&gpus[..1], cfg(3), mesh, tree.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("power-of-two"), "{e}");
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
    // one bucket: reduced after the whole backward (no overlap); small buckets: each reduced
    // as soon as backward finishes it
    for bucket_bytes in [usize::MAX / 2, 8 << 10] {
        let opts = RuntimeOptions {
            bucket_bytes,
            ..Default::default()
        };
        let mut dp = engine(&gpus, 2, 2, opts);
        let buckets = dp.runtime().chunks(0)[0].buckets.len();
        for (s, b) in data.iter().enumerate() {
            let r = dp.step(b, s).unwrap();
            println!(
                "{buckets} bucket(s): dp comm {:.3} ms, exposed {:.3} ms",
                r.dp_comm * 1e3,
                r.dp_exposed * 1e3
            );
            assert!(r.dp_exposed <= r.dp_comm + 1e-12);
            if buckets == 1 {
                assert!(
                    (r.dp_exposed - r.dp_comm).abs() < 1e-9,
                    "without overlap all comm is exposed"
                );
            } else {
                assert!(r.dp_exposed < r.dp_comm, "small buckets hide some comm");
            }
        }
        sums.push(dp.checksum().unwrap());
    }
    assert_eq!(sums[0], sums[1]);
}

#[test]
fn buckets_follow_the_order_backward_finishes_gradients() {
    use triaxis::model::gpu_model::GpuModel;
    use triaxis::parallel::bucket::buckets;
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
}

#[test]
fn dp_by_pp_trains_and_matches_one_device() {
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
    let mut hy = Engine::new(&gpus, cfg(m), mesh, RuntimeOptions::default()).unwrap();
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
    assert!(Engine::new(&gpus[..3], cfg(m), mesh, RuntimeOptions::default()).is_err());
}
