//! The whole model on the GPU against its CPU twin, training progress, determinism and
//! adapter errors. Tiny configs so the suite stays fast on the software adapter.
mod twins;
use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::gpu::{self, AdapterChoice, Gpu};
use triaxis::model::{gpu_model::GpuModel, GptConfig, Micro};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;
use triaxis::Error;
use twins::cpu_model;
use twins::cpu_step;

fn corpus() -> Corpus {
    Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 2000,
        val_problems: 100,
        seed: 3,
        reverse: true,
        pad: false,
    })
    .unwrap()
}

fn tiny(vocab: usize, steps: usize) -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab,
            ctx: 16,
            channels: 16,
            heads: 2,
            layers: 2,
        },
        micro: Micro { b: 4, t: 16 },
        grad_accum: 2,
        steps,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 2,
        min_lr_frac: 0.1,
        seed: 11,
    }
}

fn rel(a: f32, b: f32) -> f32 {
    (a - b).abs() / b.abs().max(1e-6)
}

#[test]
fn gradients_match_cpu_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let c = corpus();
    let cfg = tiny(c.vocab.size(), 1);
    let (x, y) = Batcher::new(1).next(&c.train, cfg.micro).unwrap();
    let dloss = 1.0 / cfg.micro.tokens() as f32;
    let m = GpuModel::new(&g, cfg.model, &cfg.model.blocks(), cfg.micro, dloss).unwrap();
    let layout = m.buffers.layout.clone();
    let params = cfg.model.init(&layout, 5);
    m.set_params(&params).unwrap();
    g.upload(&m.tokens, &x).unwrap();
    g.upload(&m.targets, &y).unwrap();
    let ops: Vec<_> = m.forward.iter().chain(&m.backward).cloned().collect();
    g.run(&ops).unwrap();
    let gpu_losses = m.losses().unwrap();
    let gpu_grads: Vec<f32> = g.download(&m.buffers.grads).unwrap();
    let mut cpu_grads = vec![0.0; layout.total];
    let cpu_losses = cpu_model::forward_backward(
        &cfg.model,
        &layout,
        &params,
        &mut cpu_grads,
        &x,
        &y,
        cfg.micro,
        dloss,
    )
    .unwrap();
    for (a, b) in gpu_losses.iter().zip(&cpu_losses) {
        assert!(rel(*a, *b) < 1e-4, "loss gpu {a} cpu {b}");
    }
    for t in &layout.tensors {
        let (gg, cg) = (
            layout.slice(&gpu_grads, &t.name).unwrap(),
            layout.slice(&cpu_grads, &t.name).unwrap(),
        );
        let scale = cg.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
        let err = gg
            .iter()
            .zip(cg)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "grad {:<12} max |Δ| {err:.2e} (max |g| {scale:.2e})",
            t.name
        );
        assert!(
            err <= 1e-4 * scale + 1e-7,
            "{}: gradient differs by {err} (scale {scale})",
            t.name
        );
    }
}

#[test]
fn loss_curve_matches_cpu_twin_and_drops() {
    let Some(g) = gpu::test_gpu() else { return };
    let c = corpus();
    let cfg = tiny(c.vocab.size(), 120);
    let mut tr = Trainer::new(&g, cfg.clone()).unwrap();
    let layout = tr.model.buffers.layout.clone();
    let mut params = cfg.model.init(&layout, cfg.seed);
    let (mut m, mut v) = (vec![0.0; layout.total], vec![0.0; layout.total]);
    let mut batcher = Batcher::new(9);
    let mut losses = Vec::new();
    for s in 0..cfg.steps {
        let batches: Vec<_> = (0..cfg.grad_accum)
            .map(|_| batcher.next(&c.train, cfg.micro).unwrap())
            .collect();
        let st = tr.step(&batches, s).unwrap();
        if s < 5 {
            let cs = cpu_step(&cfg, &mut params, &mut m, &mut v, &batches, s).unwrap();
            println!(
                "step {s}: gpu loss {:.6} cpu loss {:.6} | norm gpu {:.5} cpu {:.5}",
                st.loss, cs.loss, st.grad_norm, cs.grad_norm
            );
            assert!(
                rel(st.loss, cs.loss) < 1e-4,
                "step {s}: gpu loss {} vs cpu {}",
                st.loss,
                cs.loss
            );
            assert!(
                rel(st.grad_norm, cs.grad_norm) < 1e-3,
                "step {s}: grad norm"
            );
        }
        losses.push(st.loss);
    }
    let first = losses[..3].iter().sum::<f32>() / 3.0;
    let last = losses[losses.len() - 3..].iter().sum::<f32>() / 3.0;
    println!("loss {first:.3} → {last:.3}");
    assert!(
        last < first - 0.3,
        "loss must drop by at least 0.3 nats over {} steps: {first} → {last}",
        cfg.steps
    );
}

#[test]
fn same_seed_same_checksum() {
    let Some(g) = gpu::test_gpu() else { return };
    let c = corpus();
    let cfg = tiny(c.vocab.size(), 6);
    let run = || {
        let mut tr = Trainer::new(&g, cfg.clone()).unwrap();
        let mut b = Batcher::new(4);
        for s in 0..cfg.steps {
            let batches: Vec<_> = (0..cfg.grad_accum)
                .map(|_| b.next(&c.train, cfg.micro).unwrap())
                .collect();
            tr.step(&batches, s).unwrap();
        }
        tr.checksum().unwrap()
    };
    let (a, b) = (run(), run());
    println!("checksum {a}");
    assert_eq!(
        a, b,
        "two runs with one seed must give the same parameters bit for bit"
    );
    let mut other = cfg.clone();
    other.seed += 1;
    let tr = Trainer::new(&g, other).unwrap();
    assert_ne!(
        tr.checksum().unwrap(),
        Trainer::new(&g, cfg.clone()).unwrap().checksum().unwrap()
    );
}

#[test]
fn bad_model_and_adapter_inputs_are_errors() {
    let e = AdapterChoice::from_flags(Some("metall"), None, false).unwrap_err();
    assert!(matches!(e, Error::UnknownBackend(_)), "{e}");
    match Gpu::open(&AdapterChoice {
        backends: None,
        software: false,
        index: Some(999),
    }) {
        Err(Error::NoAdapter(msg)) => assert!(msg.contains("999"), "{msg}"),
        Err(e) => panic!("expected NoAdapter, got {e}"),
        Ok(_) => panic!("adapter 999 cannot exist"),
    }
    let Some(g) = gpu::test_gpu() else { return };
    let mut cfg = tiny(13, 1);
    cfg.model.heads = 3;
    let e = Trainer::new(&g, cfg)
        .err()
        .expect("heads not dividing channels must fail");
    assert!(e.to_string().contains("must divide channels"), "{e}");
    let mut cfg = tiny(13, 1);
    cfg.micro.t = 17;
    assert!(Trainer::new(&g, cfg).is_err());
}
