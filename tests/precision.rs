//! bf16 mixed precision on the runtime: runs repeat bit for bit and every pipeline schedule
//! gives the one-device bits (stages move packed activations as they are); recomputation keeps
//! them; data parallelism under every ZeRO stage gives plain dp's bits and a state moves
//! between the stages exactly; the ledger holds 2 + 2 + 12 bytes per parameter (and ZeRO's
//! shares of it); a checkpoint keeps the f32 master weights, so a bf16 run resumes exactly and
//! checkpoints move between f32 and bf16; bf16 learns as f32 does on a short run; pairwise-tree accumulation gives one device's bits on 2
//! and 4 replicas; the naive all-reduce, which bf16 cannot run, is refused by name.
mod common;

use common::tiny;
use triaxis::data::{AdditionSpec, Corpus};
use triaxis::engine::Engine;
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro, Precision, Recompute};
use triaxis::pipeline::ScheduleKind;
use triaxis::runtime::{Runtime, RuntimeOptions};
use triaxis::session::{CheckpointPolicy, Session};
use triaxis::step::TrainConfig;

fn opts(precision: Precision, recompute: Recompute) -> RuntimeOptions {
    RuntimeOptions {
        precision,
        recompute,
        ..RuntimeOptions::default()
    }
}

/// Per-step loss bits and the checksum of `mesh` on the runtime.
fn run(gpus: &[Gpu], mesh: Mesh, o: RuntimeOptions) -> (Vec<u32>, String) {
    let what = format!("{} {:?}", mesh.describe(), o.precision);
    let mut rt = Runtime::new(
        &gpus[..mesh.devices()],
        tiny::cfg(mesh.microbatches),
        mesh,
        o,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let data = tiny::batches(mesh.microbatches * mesh.dp, 3);
    let n = rt.batches_per_step();
    let losses = data
        .iter()
        .enumerate()
        .map(|(s, b)| {
            let r = rt
                .step(&b[..n], s)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            r.runs[0].stats.loss.to_bits()
        })
        .collect();
    (losses, rt.checksum().unwrap())
}

fn pp(kind: ScheduleKind, p: usize, v: usize, m: usize) -> Mesh {
    Mesh {
        pp: p,
        schedule: kind,
        chunks: v,
        microbatches: m,
        ..Mesh::default()
    }
}

#[test]
fn bf16_repeats_and_every_pipeline_schedule_gives_the_one_device_bits() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let bf16 = opts(Precision::Bf16, Recompute::None);
    let one = tiny::mesh(1, 1, 1, 4);
    let (losses, sum) = run(&gpus, one, bf16.clone());
    let (f32_losses, f32_sum) = run(&gpus, one, opts(Precision::F32, Recompute::None));
    println!("one device: bf16 {sum}, f32 {f32_sum}");
    assert_ne!(sum, f32_sum, "bf16 rounds: other bits than f32");
    for (s, (a, b)) in losses.iter().zip(&f32_losses).enumerate() {
        let (a, b) = (f32::from_bits(*a), f32::from_bits(*b));
        assert!(
            (a - b).abs() / b < 0.02,
            "step {s}: bf16 loss {a} vs f32 {b}"
        );
    }
    assert_eq!(
        run(&gpus, one, bf16),
        (losses.clone(), sum.clone()),
        "repeat"
    );
    // every schedule; the recompute modes where the schedule replays most (the zero-bubble W's,
    // the interleaved and V chunks; tests/recompute.rs covers every schedule in f32)
    for mesh in [
        pp(ScheduleKind::GPipe, 2, 1, 4),
        pp(ScheduleKind::OneFOneB, 4, 1, 4),
        pp(ScheduleKind::ZeroBubbleH1, 2, 1, 4),
        pp(ScheduleKind::Interleaved, 2, 2, 4),
        pp(ScheduleKind::ZeroBubbleV, 2, 2, 4),
        pp(ScheduleKind::DualPipeV, 2, 2, 4),
    ] {
        let modes: &[Recompute] = match mesh.schedule {
            ScheduleKind::GPipe | ScheduleKind::OneFOneB => &[Recompute::None],
            _ => &Recompute::ALL,
        };
        for &mode in modes {
            let got = run(&gpus, mesh, opts(Precision::Bf16, mode));
            println!("{} recompute {mode}: {}", mesh.describe(), got.1);
            assert_eq!(got, (losses.clone(), sum.clone()), "{}", mesh.describe());
        }
    }
}

#[test]
fn bf16_data_parallel_reduces_on_a_bf16_ring_of_2_bytes_per_element() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let bf16 = opts(Precision::Bf16, Recompute::None);
    let model = tiny::model();
    let n = model.layout(&model.blocks()).packed().total as u64;
    // one device with 2 microbatches vs dp 2 with one each: the same data, another sum order
    let (one, _) = run(&gpus, tiny::mesh(1, 1, 1, 2), bf16.clone());
    let mut dp: Option<(Vec<u32>, String)> = None;
    for mesh in [tiny::mesh(2, 1, 1, 1), tiny::mesh(2, 1, 2, 1)] {
        let what = mesh.describe();
        let mut rt = Runtime::new(
            &gpus[..mesh.devices()],
            tiny::cfg(mesh.microbatches),
            mesh,
            bf16.clone(),
        )
        .unwrap();
        let data = tiny::batches(2, 3);
        let mut losses = Vec::new();
        for (s, b) in data.iter().enumerate() {
            let r = rt.step(&b[..rt.batches_per_step()], s).unwrap();
            losses.push(r.runs[0].stats.loss.to_bits());
            if mesh.pp == 1 {
                // d = 2: each rank sends every word of the buckets once (half in each phase)
                for w in &r.runs {
                    assert_eq!(w.dp_sent, 2 * n, "{what}: 2(d−1)/d · 2N bytes, N = {n}");
                }
            }
        }
        let sum = rt.checksum().unwrap();
        println!("{what}: {sum}");
        for (s, (a, b)) in losses.iter().zip(&one).enumerate() {
            let (a, b) = (f32::from_bits(*a), f32::from_bits(*b));
            assert!(
                (a - b).abs() / b < 0.02,
                "{what}: step {s}: {a} vs one device {b}"
            );
        }
        match &dp {
            // the pipeline stages' buckets sum in the same order as one device's
            Some(first) => assert_eq!(&(losses, sum), first, "{what}: dp 2 × pp 2 = dp 2"),
            None => dp = Some((losses, sum)),
        }
    }
    // ZeRO-1–3: the reduce-scatter sums each element as the all-reduce does, AdamW runs on
    // the own shard, the all-gathers move bf16 (ZeRO-3: every block before it runs): the bits
    // of plain dp
    let zero = |z: usize, pp: usize| Mesh {
        zero: z,
        ..tiny::mesh(2, 1, pp, 1)
    };
    for mesh in [zero(1, 1), zero(1, 2), zero(2, 1), zero(3, 1)] {
        let what = mesh.describe();
        for g in &gpus {
            g.reset_memory_peaks();
        }
        let got = run(&gpus, mesh, bf16.clone());
        println!("{what}: {}", got.1);
        assert_eq!(Some(&got), dp.as_ref(), "{what}: the bits of plain dp");
    }
    // four ranks (chunk sums in another order than two's), and recomputation under ZeRO-3
    let (z4, plain4) = (
        |z| Mesh {
            zero: z,
            ..tiny::mesh(4, 1, 1, 1)
        },
        run(&gpus, tiny::mesh(4, 1, 1, 1), bf16.clone()),
    );
    for z in [1, 3] {
        assert_eq!(run(&gpus, z4(z), bf16.clone()), plain4, "dp 4, ZeRO-{z}");
    }
    for mode in [Recompute::Selective, Recompute::Full] {
        let got = run(&gpus, zero(3, 1), opts(Precision::Bf16, mode));
        assert_eq!(Some(&got), dp.as_ref(), "ZeRO-3 recompute {mode}");
    }
    // model state: 2N + 2N + 12·shard (ZeRO-1 and 2: the full gradient buffer every
    // microbatch accumulates into), 2·shard + 2N + 12·shard + two bf16 slots of the largest
    // block (ZeRO-3); bytes per step at d = 2, one microbatch: ZeRO-1/2 send 2N (the
    // reduce-scatter's other chunk, the gather's own), ZeRO-3 2(N − shard) + 2 · 2·shard (its
    // own piece of every block, gathered for the forward and again for the backward)
    let data = tiny::batches(2, 1);
    for z in 1..=3 {
        let base: Vec<u64> = gpus[..2]
            .iter()
            .map(|g| g.memory().current.model_state())
            .collect();
        let mut rt = Runtime::new(&gpus[..2], tiny::cfg(1), zero(z, 1), bf16.clone()).unwrap();
        for (d, g) in gpus[..2].iter().enumerate() {
            let info = &rt.chunks(d)[0];
            let shard = info.grid.shard_len(d) as u64;
            let slot = info.block_spans.iter().map(|s| s.len()).max().unwrap_or(0) as u64;
            let state = g.memory().current.model_state() - base[d];
            println!("ZeRO-{z} bf16 device {d}: {state} B of model state, N = {n}, shard {shard}");
            let want = match z {
                1 | 2 => 4 * n + 12 * shard,
                _ => 14 * shard + 2 * n + 2 * 2 * slot,
            };
            assert_eq!(state, want, "ZeRO-{z} device {d}");
        }
        let r = rt.step(&data[0][..rt.batches_per_step()], 0).unwrap();
        for (d, w) in r.runs.iter().enumerate() {
            let shard = rt.chunks(d)[0].grid.shard_len(d) as u64;
            let want = match z {
                3 => 2 * (n - shard) + 4 * shard,
                _ => 2 * n,
            };
            println!("ZeRO-{z} bf16 device {d}: {} B sent", w.dp_sent);
            assert_eq!(w.dp_sent, want, "ZeRO-{z} device {d}: bytes sent");
        }
        drop(rt);
    }
}

#[test]
fn bf16_tensor_parallelism_all_reduces_bf16_partial_sums() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let bf16 = opts(Precision::Bf16, Recompute::None);
    let (one, _) = run(&gpus, tiny::mesh(1, 1, 1, 2), bf16.clone());
    let tp2 = tiny::mesh(1, 2, 1, 2);
    let (losses, sum) = run(&gpus, tp2, bf16.clone());
    assert_eq!(
        run(&gpus, tp2, bf16.clone()),
        (losses.clone(), sum.clone()),
        "repeat"
    );
    for (s, (a, b)) in losses.iter().zip(&one).enumerate() {
        let (a, b) = (f32::from_bits(*a), f32::from_bits(*b));
        assert!(
            (a - b).abs() / b < 0.02,
            "tp 2: step {s}: {a} vs one device {b}"
        );
    }
    // tp × pp, and selective recomputation (ZB-H1 with full is refused as in f32)
    let tp_pp = Mesh {
        schedule: ScheduleKind::ZeroBubbleH1,
        ..tiny::mesh(1, 2, 2, 2)
    };
    let a = run(&gpus, tp_pp, bf16.clone());
    let b = run(&gpus, tp_pp, opts(Precision::Bf16, Recompute::Selective));
    assert_eq!(
        a, b,
        "tp 2 × pp 2 zb-h1: selective recomputation keeps the bits"
    );
    // the partial sums travel as bf16: the busiest rank's tensor-parallel bytes are half f32's
    let tp_bytes = |p| {
        let mut rt = Runtime::new(&gpus[..2], tiny::cfg(2), tp2, opts(p, Recompute::None)).unwrap();
        let data = tiny::batches(2, 1);
        let r = rt.step(&data[0][..2], 0).unwrap();
        r.runs[0].tp_sent
    };
    let (b16, b32) = (tp_bytes(Precision::Bf16), tp_bytes(Precision::F32));
    println!("tp 2 bytes per step: bf16 {b16}, f32 {b32}");
    assert_eq!(2 * b16, b32);
}

#[test]
fn bf16_model_state_is_2_2_12_bytes_per_parameter() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let _one = tiny::one_at_a_time();
    let g = &gpus[0];
    let base = g.memory().current;
    let rt = Runtime::new(
        &gpus,
        tiny::cfg(1),
        tiny::mesh(1, 1, 1, 1),
        opts(Precision::Bf16, Recompute::None),
    )
    .unwrap();
    let model = tiny::model();
    // the packed storage layout: every tensor on a 128-element boundary
    let n = model.layout(&model.blocks()).packed().total as u64;
    let now = g.memory().current;
    let grew = |f: fn(&triaxis::memory::Bytes) -> u64| f(&now) - f(&base);
    println!("N = {n}: {now:?}");
    assert_eq!(grew(|b| b.parameters), 2 * n, "bf16 parameters");
    assert_eq!(grew(|b| b.gradients), 2 * n, "bf16 gradients");
    assert_eq!(
        grew(|b| b.optimizer_state),
        12 * n,
        "f32 master weights, m and v"
    );
    drop(rt);
}

#[test]
fn bf16_zero_state_moves_between_every_zero_stage() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let bf16 = opts(Precision::Bf16, Recompute::None);
    let mesh = |z| Mesh {
        zero: z,
        ..tiny::mesh(2, 1, 1, 1)
    };
    let data = tiny::batches(2, 4);
    let new = |z| Runtime::new(&gpus[..2], tiny::cfg(1), mesh(z), bf16.clone()).unwrap();
    // 3 steps under ZeRO-3, then its state (master weights, m, v) into each stage: equal as
    // loaded, and the 4th step of every stage gives the same bits as ZeRO-3's own
    let mut from = new(3);
    for (s, b) in data[..3].iter().enumerate() {
        from.step(&b[..from.batches_per_step()], s).unwrap();
    }
    let state = from.state().unwrap();
    from.step(&data[3][..from.batches_per_step()], 3).unwrap();
    let want = from.checksum().unwrap();
    for z in 0..=3 {
        let mut rt = new(z);
        rt.set_state(&state).unwrap();
        assert_eq!(rt.state().unwrap(), state, "ZeRO-{z}: the state as loaded");
        rt.step(&data[3][..rt.batches_per_step()], 3).unwrap();
        assert_eq!(rt.checksum().unwrap(), want, "ZeRO-{z}: the next step");
        assert!(rt.replicas_agree().unwrap(), "ZeRO-{z}");
    }
}

/// Pairwise-tree accumulation in bf16: one device's tree of 4 microbatches, 2 replicas' trees
/// of 2 joined by the bf16 tree all-reduce and 4 replicas' single microbatches give the same
/// bits (every level adds in f32 and rounds to bf16, on the device and between ranks), which
/// differ from sequential accumulation's.
#[test]
fn bf16_pairwise_tree_accumulation_is_bit_identical_across_layouts() {
    use triaxis::collective::Algo;
    use triaxis::parallel::accumulate::Accumulation;
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let tree = RuntimeOptions {
        dp_algo: Algo::Tree,
        accumulation: Accumulation::PairwiseTree,
        ..opts(Precision::Bf16, Recompute::None)
    };
    let (one, sum) = run(&gpus, tiny::mesh(1, 1, 1, 4), tree.clone());
    println!("one device, tree of 4: {sum}");
    for d in [2, 4] {
        let got = run(&gpus, tiny::mesh(d, 1, 1, 4 / d), tree.clone());
        println!("dp {d}: {}", got.1);
        assert_eq!(got, (one.clone(), sum.clone()), "dp {d}: one device's bits");
    }
    let (_, sequential) = run(
        &gpus,
        tiny::mesh(1, 1, 1, 4),
        opts(Precision::Bf16, Recompute::None),
    );
    assert_ne!(sequential, sum, "the tree groups the sums otherwise");
}

fn corpus() -> Corpus {
    Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 300,
        val_problems: 20,
        seed: 3,
        reverse: true,
        pad: false,
    })
    .unwrap()
}

fn engine(gpus: &[Gpu], cfg: &TrainConfig, precision: Precision) -> Engine {
    let o = RuntimeOptions {
        precision,
        ..RuntimeOptions::default()
    };
    Engine::new(&gpus[..1], cfg.clone(), tiny::mesh(1, 1, 1, 2), o).unwrap()
}

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("triaxis-precision-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn checkpoints_keep_master_weights_and_move_between_precisions() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let c = corpus();
    let cfg = TrainConfig {
        steps: 6,
        ..tiny::cfg(2)
    };
    let d = dir("resume");
    // bf16: 3 steps + save + resume + 3 steps = 6 steps straight, parameters and moments
    let mut straight = Session::new(engine(&gpus, &cfg, Precision::Bf16), &c, 1);
    straight.run_until(6, |_, _| {}).unwrap();
    let path = d.join("bf16.safetensors");
    let mut first = Session::new(engine(&gpus, &cfg, Precision::Bf16), &c, 1).with_checkpoints(
        CheckpointPolicy {
            path: path.clone(),
            every: 3,
        },
    );
    first.run_until(3, |_, _| {}).unwrap();
    drop(first);
    let saved = triaxis::checkpoint::Checkpoint::load(&path).unwrap();
    assert!(saved.layout.ends_with("precision=bf16"), "{}", saved.layout);
    let mut second = Session::resume(engine(&gpus, &cfg, Precision::Bf16), &c, &path).unwrap();
    second.run_until(6, |_, _| {}).unwrap();
    assert_eq!(
        straight.engine.state().unwrap(),
        second.engine.state().unwrap(),
        "bf16 resume: master weights and moments"
    );
    // the bf16 checkpoint resumes in f32, and an f32 one in bf16: each trains on from it
    for (from, to) in [
        (Precision::Bf16, Precision::F32),
        (Precision::F32, Precision::Bf16),
    ] {
        let path = d.join(format!("{from}.safetensors"));
        let mut a = Session::new(engine(&gpus, &cfg, from), &c, 1);
        a.run_until(3, |_, _| {}).unwrap();
        a.save(&path).unwrap();
        let state = a.engine.state().unwrap();
        let mut b = Session::resume(engine(&gpus, &cfg, to), &c, &path).unwrap();
        assert_eq!(
            b.engine.state().unwrap(),
            state,
            "{from} → {to}: the state as saved"
        );
        b.run_until(6, |_, _| {}).unwrap();
        let after = b.engine.state().unwrap();
        assert_ne!(after.params, state.params, "{from} → {to}: trained on");
        assert!(after.params.iter().all(|x| x.is_finite()), "{from} → {to}");
    }
}

#[test]
fn bf16_learns_as_f32_does_on_a_short_run() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let c = corpus();
    let cfg = TrainConfig {
        model: GptConfig {
            vocab: c.vocab.size(),
            ctx: 16,
            channels: 32,
            heads: 2,
            layers: 2,
        },
        micro: Micro { b: 8, t: 16 },
        steps: 120,
        warmup: 10,
        ..tiny::cfg(2)
    };
    let mut val = Vec::new();
    for p in Precision::ALL {
        let mut s = Session::new(engine(&gpus, &cfg, p), &c, 1);
        let first = s.step_once().unwrap().stats.loss;
        s.run_until(cfg.steps, |_, _| {}).unwrap();
        // evaluated with the forward it trained with (bf16: packed, on the rounded masters)
        let mut eval = triaxis::train::Trainer::with_precision(&gpus[0], cfg.clone(), p).unwrap();
        eval.set_state(&s.engine.state().unwrap()).unwrap();
        let v = eval.eval(&c, 4).unwrap();
        println!(
            "{p}: first loss {first:.4}, validation loss after {} steps {v:.4}",
            cfg.steps
        );
        assert!(v < 0.8 * first, "{p} learns: {v} vs {first}");
        val.push(v);
    }
    let rel = (val[1] - val[0]).abs() / val[0];
    println!("bf16 vs f32 validation loss: {:.2} %", 100.0 * rel);
    assert!(rel < 0.05, "bf16 {} vs f32 {}", val[1], val[0]);
}

#[test]
fn layouts_bf16_cannot_run_yet_are_refused_by_name() {
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let bf16 = opts(Precision::Bf16, Recompute::None);
    let naive = RuntimeOptions {
        dp_algo: triaxis::collective::Algo::Naive,
        ..bf16.clone()
    };
    let mesh = tiny::mesh(2, 1, 1, 2);
    let e = Runtime::new(&gpus[..2], tiny::cfg(2), mesh, naive)
        .err()
        .expect("refused");
    println!("{e}");
    assert!(
        e.to_string().contains("naive all-reduce") && e.to_string().contains("--precision f32"),
        "{e}"
    );
    // an odd head size: two heads of one word each would share words
    let mut cfg = tiny::cfg(1);
    cfg.model.channels = 18; // 2 heads of 9
    let e = Runtime::new(&gpus[..1], cfg, tiny::mesh(1, 1, 1, 1), bf16)
        .err()
        .expect("odd head size refused");
    println!("{e}");
    assert!(e.to_string().contains("even head size"), "{e}");
}
