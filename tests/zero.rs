//! ZeRO stages 1–3 reproduce stage 0 bit for bit (even and uneven shards, with tensor and
//! pipeline stages too), hold the model-state bytes the formula predicts, move the predicted
//! bytes, keep only a shard and two block slots of parameters (stage 3), and reject impossible
//! configurations.
mod common;

use triaxis::cost::zero::{formula_bytes, predicted_comm_bytes, stage as zero_stage};
use triaxis::cpu::AdamW;
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{self, Gpu};
use triaxis::memory::Usage;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro, Precision};
use triaxis::parallel::shard::Grid;
use triaxis::runtime::ChunkInfo;
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;

fn cfg(model: GptConfig, accum: usize) -> TrainConfig {
    TrainConfig {
        model,
        micro: Micro { b: 2, t: 8 },
        grad_accum: accum,
        steps: 3,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 8,
    }
}

/// The shared tiny model: 7936 flat elements = 124 × 64, so d = 3 does not divide it.
fn tiny() -> GptConfig {
    common::tiny::model()
}

fn global_batches(n: usize, steps: usize, micro: Micro) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    common::addition_batches(4, 6, n, steps, micro)
}

/// ZeRO stage `stage` over a data-parallel group of `d` replicas, `accum` microbatches each.
fn mesh(d: usize, stage: usize, accum: usize) -> Mesh {
    Mesh {
        dp: d,
        zero: stage,
        microbatches: accum,
        ..Mesh::default()
    }
}

/// The engine of `mesh` on the first `mesh.devices()` of `gpus`.
fn engine(gpus: &[Gpu], cfg: TrainConfig, mesh: Mesh, opts: RuntimeOptions) -> Engine {
    Engine::new(&gpus[..mesh.devices()], cfg, mesh, opts).unwrap()
}

/// Device 0's only chunk: the whole model's flat buffer, its buckets, shard grid and blocks
/// (every replica's chunk has the same geometry).
fn chunk(e: &Engine) -> ChunkInfo {
    let mut c = e.runtime().chunks(0);
    assert_eq!(c.len(), 1, "one chunk per device without a pipeline");
    c.remove(0)
}

/// Bytes sent rank to rank in step `s`, summed over the data-parallel group (each device's
/// communicator records the hops it sent).
fn group_bytes(e: &Engine, s: usize) -> u64 {
    e.runtime()
        .workers
        .iter()
        .map(|w| w.comms.dp.ledger().for_step(s).hop_bytes())
        .sum()
}

/// Current and peak memory of every device of the layout.
fn memory(gpus: &[Gpu], d: usize) -> Vec<Usage> {
    gpus[..d].iter().map(|g| g.memory()).collect()
}

#[test]
#[allow(clippy::single_range_in_vec_init)] // a list of one unit
fn shard_grid_is_aligned_range_arithmetic() {
    // two units of 3·64 and 1·64 elements over d = 2
    let g = Grid::new(&[192..256, 0..192], 256, 2).unwrap();
    assert_eq!(g.units[0].bounds, vec![0, 64, 192]);
    // the second unit's remainder goes to rank 0 (rank 1 took the first's): rank 1's is empty
    assert_eq!(g.units[1].bounds, vec![192, 256, 256]);
    assert_eq!((g.shard_len(0), g.shard_len(1)), (128, 128));
    assert_eq!(g.units[1].storage, vec![64, 128]);
    let p = g.parts(100..256);
    assert_eq!(p[0].sub, 100..192);
    assert_eq!(p[0].bounds, vec![0, 0, 92]);
    assert_eq!(p[0].storage, vec![64, 36]);
    assert!(
        Grid::new(&[0..100], 100, 2).is_err(),
        "units must be 64-aligned"
    );
    assert!(
        Grid::new(&[0..64], 128, 2).is_err(),
        "units must tile the buffer"
    );
    assert!(Grid::new(&[0..64], 64, 0).is_err());
}

#[test]
fn stages_give_stage_0_bits_even_and_uneven() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let accum = 2;
    let data = global_batches(4 * accum, 3, cfg(tiny(), 1).micro);
    // d = 1: every stage equals one plain device
    let mut one = Trainer::new(&gpus[0], cfg(tiny(), accum)).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(&b[..accum], s).unwrap();
    }
    let single = one.checksum().unwrap();
    for (d, bucket_bytes) in [
        (1, 25 << 20),
        (2, 25 << 20),
        (3, 2 << 10),
        (4, 25 << 20),
        (4, 3 << 10),
    ] {
        let opts = RuntimeOptions {
            bucket_bytes,
            ..Default::default()
        };
        let mut sums = Vec::new();
        for stage in 0..4 {
            if d == 1 && stage > 0 {
                // the engine shards only over a data-parallel group: with one replica, stages
                // 1–3 have nothing to shard across and are refused (stage 0 is that layout)
                let e = Engine::new(
                    &gpus[..1],
                    cfg(tiny(), accum),
                    mesh(1, stage, accum),
                    opts.clone(),
                )
                .err()
                .unwrap();
                assert!(e.to_string().contains("nothing to shard across"), "{e}");
                continue;
            }
            let mut z = engine(
                &gpus,
                cfg(tiny(), accum),
                mesh(d, stage, accum),
                opts.clone(),
            );
            let c = chunk(&z);
            assert_eq!(
                c.buckets.len(),
                c.grid.units.len(),
                "one shard unit per bucket"
            );
            if stage == 0 {
                let even = (0..d).all(|r| c.grid.shard_len(r) * d == c.grid.total);
                println!(
                    "d={d}: {} units, shards {:?} of {} ({})",
                    c.grid.units.len(),
                    (0..d).map(|r| c.grid.shard_len(r)).collect::<Vec<_>>(),
                    c.grid.total,
                    if even { "even" } else { "uneven" }
                );
            }
            let predicted =
                predicted_comm_bytes(zero_stage(stage).unwrap(), c.grid.total, d, accum);
            for (s, b) in data.iter().enumerate() {
                z.step(&b[..d * accum], s).unwrap();
                assert_eq!(
                    group_bytes(&z, s),
                    predicted,
                    "d={d} stage {stage}: bytes moved vs predicted"
                );
            }
            assert!(z.replicas_agree().unwrap(), "d={d} stage {stage}");
            sums.push(z.checksum().unwrap());
        }
        println!("d={d}: {}", sums[0]);
        for (stage, c) in sums.iter().enumerate() {
            assert_eq!(c, &sums[0], "d={d}: stage {stage} differs from stage 0");
        }
        if d == 1 {
            assert_eq!(sums[0], single, "d = 1 must equal one device");
        }
    }
}

/// ZeRO 1–3 compose with tensor-parallel and pipeline stages (FSDP + TP + PP): each tensor
/// rank's and each stage's data-parallel group shards its own chunk, ZeRO-3 gathers the
/// stage's blocks in their slots, and every stage gives the bits of plain dp of the same
/// layout, in f32 and in bf16.
#[test]
fn stages_compose_with_tensor_and_pipeline_stages() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let accum = 2;
    let layouts = [
        Mesh {
            tp: 2,
            ..mesh(2, 0, accum)
        },
        Mesh {
            pp: 2,
            ..mesh(2, 0, accum)
        },
    ];
    let data = global_batches(2 * accum, 2, cfg(tiny(), accum).micro);
    for precision in Precision::ALL {
        let opts = RuntimeOptions {
            precision,
            ..Default::default()
        };
        for base in layouts {
            let mut sums = Vec::new();
            for stage in 0..4 {
                let m = Mesh {
                    zero: stage,
                    ..base
                };
                let mut z = engine(&gpus, cfg(tiny(), accum), m, opts.clone());
                for (s, b) in data.iter().enumerate() {
                    z.step(b, s).unwrap();
                }
                let spans = &z.runtime().chunks(0)[0].block_spans;
                assert_eq!(!spans.is_empty(), stage == 3, "{}", m.describe());
                sums.push(z.checksum().unwrap());
            }
            println!("{} {}: {}", base.describe(), precision.name(), sums[0]);
            for (stage, c) in sums.iter().enumerate() {
                assert_eq!(
                    c,
                    &sums[0],
                    "{} {}: ZeRO-{stage} differs from plain dp",
                    base.describe(),
                    precision.name()
                );
            }
        }
    }
}

#[test]
fn model_state_bytes_match_the_formula() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let model = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 64,
        heads: 2,
        layers: 2,
    };
    let data = global_batches(4, 1, cfg(model, 1).micro);
    for d in [2, 4] {
        for stage in 0..4 {
            let mut z = engine(
                &gpus,
                cfg(model, 1),
                mesh(d, stage, 1),
                RuntimeOptions::default(),
            );
            let info = chunk(&z);
            let n = info.grid.total;
            let slot = info.block_spans.iter().map(|s| s.len()).max().unwrap_or(0);
            let want = formula_bytes(zero_stage(stage).unwrap(), n, d, slot);
            let grid = info.grid;
            let even = (0..d).all(|r| grid.shard_len(r) * d == n);
            for when in ["built", "after a step"] {
                if when == "after a step" {
                    z.step(&data[0][..d], 0).unwrap();
                }
                for u in memory(&gpus, d) {
                    let got = u.current.model_state() as f64;
                    let rel = (got - want).abs() / want;
                    println!(
                        "d={d} stage {stage} {when} {}: {got} B vs formula {want:.0} B ({:+.3} %)",
                        u.device,
                        100.0 * (got - want) / want
                    );
                    assert!(rel < 0.003, "d={d} stage {stage}: {got} vs {want}");
                    if even && stage > 0 {
                        assert_eq!(got, want, "even shards must match exactly");
                    }
                }
            }
        }
    }
}

#[test]
fn stage_3_keeps_a_shard_and_two_block_slots() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let model = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 32,
        heads: 2,
        layers: 4,
    };
    let d = 4;
    let data = global_batches(d, 1, cfg(model, 1).micro);
    let mut z = engine(
        &gpus,
        cfg(model, 1),
        mesh(d, 3, 1),
        RuntimeOptions::default(),
    );
    let infos: Vec<ChunkInfo> = (0..d).map(|r| z.runtime().chunks(r).remove(0)).collect();
    let longest = infos[0].block_spans.iter().map(|s| s.len()).max().unwrap() as u64;
    // the step's peaks are its own, as the runners' steps reset them
    for g in &gpus[..d] {
        g.sync().unwrap();
        g.reset_memory_peaks();
    }
    let r = z.step(&data[0], 0).unwrap();
    assert_eq!(r.memory.len(), d);
    for (rank, u) in r.memory.iter().enumerate() {
        let grid = &infos[rank].grid;
        let shard = grid.shard_len(rank) as u64;
        println!(
            "{}: peak parameters {} B = shard {} B + 2 block slots of {} B; full model {} B",
            u.device,
            u.peak.parameters,
            4 * shard,
            4 * longest,
            4 * grid.total
        );
        assert_eq!(u.peak.parameters, 4 * (shard + 2 * longest));
        assert!(u.peak.parameters < 4 * grid.total as u64);
        // built once for the run: nothing is allocated or freed by a step
        assert_eq!(u.current.parameters, u.peak.parameters);
        // the full gradient buffer every microbatch accumulates into, the shard its own range
        assert_eq!(u.peak.gradients, 4 * grid.total as u64);
        assert_eq!(u.current.gradients, u.peak.gradients);
    }
}

#[test]
fn bad_configurations_are_clear_errors() {
    // no devices: a data-parallel group of d = 0, and a group of 2 with nothing to run on
    let e = Engine::new(
        &[],
        cfg(tiny(), 1),
        mesh(0, 1, 1),
        RuntimeOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("--dp must be at least 1"), "{e}");
    let e = Engine::new(
        &[],
        cfg(tiny(), 1),
        mesh(2, 1, 1),
        RuntimeOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("no device is available"), "{e}");
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let e = Engine::new(
        &gpus,
        cfg(tiny(), 1),
        mesh(2, 4, 1),
        RuntimeOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("ZeRO stage 4 does not exist"), "{e}");
    let naive = RuntimeOptions {
        dp_algo: triaxis::collective::Algo::Naive,
        ..Default::default()
    };
    let e = Engine::new(&gpus, cfg(tiny(), 1), mesh(2, 2, 1), naive)
        .err()
        .unwrap();
    assert!(e.to_string().contains("ring"), "{e}");
    let mut z = engine(
        &gpus,
        cfg(tiny(), 1),
        mesh(2, 3, 1),
        RuntimeOptions::default(),
    );
    let data = global_batches(3, 1, cfg(tiny(), 1).micro);
    let e = z.step(&data[0], 0).expect_err("3 microbatches for d = 2");
    assert!(e.to_string().contains("needs 2 microbatches, got 3"), "{e}");
}
