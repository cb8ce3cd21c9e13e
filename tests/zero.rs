//! ZeRO stages 1–3 reproduce stage 0 bit for bit (even and uneven shards), hold the model-state
//! bytes the formula predicts, move the predicted bytes, free gathered parameters (stage 3),
//! and reject impossible configurations.
mod common;

use triaxis::cost::memory::ZeroStage;
use triaxis::cpu::AdamW;
use triaxis::gpu;
use triaxis::model::{GptConfig, Micro};
use triaxis::parallel::data::DpOptions;
use triaxis::parallel::shard::Grid;
use triaxis::parallel::zero::{formula_bytes, Zero};
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

/// 7936 flat elements = 124 × 64: d = 3 does not divide it.
fn tiny() -> GptConfig {
    GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 2,
    }
}

fn global_batches(n: usize, steps: usize, micro: Micro) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    common::addition_batches(4, 6, n, steps, micro)
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
        let opts = DpOptions {
            bucket_bytes,
            ..Default::default()
        };
        let mut sums = Vec::new();
        for stage in 0..4 {
            let mut z = Zero::new(&gpus[..d], cfg(tiny(), accum), opts.clone(), stage).unwrap();
            if stage == 0 {
                let even = (0..d).all(|r| z.grid.shard_len(r) * d == z.grid.total);
                println!(
                    "d={d}: {} units, shards {:?} of {} ({})",
                    z.grid.units.len(),
                    (0..d).map(|r| z.grid.shard_len(r)).collect::<Vec<_>>(),
                    z.grid.total,
                    if even { "even" } else { "uneven" }
                );
            }
            for (s, b) in data.iter().enumerate() {
                let r = z.step(&b[..d * accum], s).unwrap();
                assert_eq!(
                    r.comm_bytes, r.predicted_bytes,
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
            let mut z = Zero::new(&gpus[..d], cfg(model, 1), DpOptions::default(), stage).unwrap();
            let n = z.flat_len();
            let want = formula_bytes(ZeroStage::from_index(stage).unwrap(), n, d);
            let even = (0..d).all(|r| z.grid.shard_len(r) * d == n);
            for when in ["built", "after a step"] {
                if when == "after a step" {
                    z.step(&data[0][..d], 0).unwrap();
                }
                for u in z.memory() {
                    let got = u.current.model_state() as f64;
                    let rel = (got - want).abs() / want;
                    println!(
                        "d={d} stage {stage} {when} {}: {got} B vs formula {want:.0} B ({:+.3} %)",
                        u.device,
                        100.0 * (got - want) / want
                    );
                    assert!(rel < 0.01, "d={d} stage {stage}: {got} vs {want}");
                    if even && stage > 0 {
                        assert_eq!(got, want, "even shards must match exactly");
                    }
                }
            }
        }
    }
}

#[test]
fn stage_3_frees_gathered_parameters() {
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
    let mut z = Zero::new(&gpus[..d], cfg(model, 1), DpOptions::default(), 3).unwrap();
    let longest = z.spans.iter().map(|s| s.range.len()).max().unwrap() as u64;
    let r = z.step(&data[0], 0).unwrap();
    for (rank, u) in r.memory.iter().enumerate() {
        let shard = z.grid.shard_len(rank) as u64;
        println!(
            "{}: peak parameters {} B = shard {} B + 2 block slots of {} B; full model {} B",
            u.device,
            u.peak.parameters,
            4 * shard,
            4 * longest,
            4 * z.grid.total
        );
        assert_eq!(u.peak.parameters, 4 * (shard + 2 * longest));
        assert!(u.peak.parameters < 4 * z.grid.total as u64);
        assert_eq!(
            u.current.parameters,
            4 * shard,
            "slots freed after the step"
        );
        // the step-scoped full gradient buffer is alive only during backward
        assert_eq!(u.peak.gradients, 4 * (shard + z.grid.total as u64));
        assert_eq!(u.current.gradients, 4 * shard);
    }
}

#[test]
fn bad_configurations_are_clear_errors() {
    let e = Zero::new(&[], cfg(tiny(), 1), DpOptions::default(), 1)
        .err()
        .unwrap();
    assert!(e.to_string().contains("data-parallel group"), "{e}");
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let e = Zero::new(&gpus, cfg(tiny(), 1), DpOptions::default(), 4)
        .err()
        .unwrap();
    assert!(e.to_string().contains("ZeRO stage 4 does not exist"), "{e}");
    let naive = DpOptions {
        algo: triaxis::collective::Algo::Naive,
        ..Default::default()
    };
    let e = Zero::new(&gpus, cfg(tiny(), 1), naive, 2).err().unwrap();
    assert!(e.to_string().contains("ring"), "{e}");
    let mut z = Zero::new(&gpus, cfg(tiny(), 1), DpOptions::default(), 3).unwrap();
    let data = global_batches(3, 1, cfg(tiny(), 1).micro);
    assert!(z.step(&data[0], 0).is_err(), "3 microbatches for d = 2");
}
