//! Megatron tensor parallelism of one transformer layer against the one-device layer
//! (`GpuModel` over `Block::Layer`): output, input gradient and every parameter gradient
//! (gathered back) agree to rounding for t ∈ {2, 4}; shard → gather round-trips bit for bit;
//! the ledger shows 2 forward + 2 backward ring all-reduces of n·C floats per microbatch; a
//! degree that does not divide the heads is refused.

use triaxis::collective::{ring_all_reduce_rank_bytes, Algo, Kind};
use triaxis::gpu;
use triaxis::model::gpu_model::GpuModel;
use triaxis::model::{Block, GptConfig, Micro};
use triaxis::parallel::tensor::{gather_layer, local_layout, shard_layer, TpLayer};
use triaxis::pipeline::simulate::Link;
use triaxis::rng::Rng;
use triaxis::Error;

const NAMES: [&str; 12] = [
    "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
    "fcprojw", "fcprojb",
];

/// Normwise relative error `max|a−b| / max|b|` (the row-parallel sums change the summation
/// order, so elements that cancel to near zero carry rounding of the tensor's scale). Prints
/// it with the element-wise maximum relative error and fails above `tol` or on non-finite.
fn close(name: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let (mut abs, mut rel, mut scale) = (0.0f32, 0.0f32, 0.0f32);
    for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
        assert!(
            a.is_finite(),
            "{name}: element {i} not finite: {a} (want {b})"
        );
        abs = abs.max((a - b).abs());
        rel = rel.max((a - b).abs() / b.abs().max(1e-6));
        scale = scale.max(b.abs());
    }
    let norm = abs / scale.max(1e-30);
    println!(
        "{name}: n={} max abs err {abs:.3e}, normwise rel {norm:.3e}, max elementwise rel {rel:.3e}",
        got.len()
    );
    assert!(
        norm <= tol,
        "{name}: normwise relative error {norm:.3e} > {tol:.0e}"
    );
}

fn cfg(layers: usize) -> GptConfig {
    GptConfig {
        vocab: 8,
        ctx: 8,
        channels: 32,
        heads: 4,
        layers,
    }
}

#[test]
fn shard_gather_round_trips_bit_for_bit() {
    let cfg = cfg(2);
    let layout = cfg.layout(&cfg.blocks());
    let flat = Rng::new(3).vec(layout.total, 1.0);
    for t in [1, 2, 4] {
        let shards = shard_layer(&cfg, &layout, &flat, 1, t).unwrap();
        assert_eq!(shards.len(), t);
        let mut back = vec![0.0f32; layout.total];
        gather_layer(&cfg, &layout, &mut back, 1, &shards).unwrap();
        for x in NAMES {
            let name = format!("h1.{x}");
            let (a, b) = (
                layout.slice(&flat, &name).unwrap(),
                layout.slice(&back, &name).unwrap(),
            );
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(a), bits(b), "{name} t={t}");
        }
        // rank r's first q row is row r·C/t of the full qkvw; its first k row is row C + r·C/t
        let (c, ct) = (cfg.channels, cfg.channels / t);
        let local = local_layout(&cfg, 1, t).unwrap();
        let full = layout.slice(&flat, "h1.qkvw").unwrap();
        for (r, s) in shards.iter().enumerate() {
            let q = local.slice(s, "h1.qkvw").unwrap();
            assert_eq!(q[..c], full[r * ct * c..(r * ct + 1) * c]);
            assert_eq!(
                q[ct * c..ct * c + c],
                full[(c + r * ct) * c..(c + r * ct + 1) * c]
            );
        }
    }
}

#[test]
fn degree_must_divide_heads() {
    let cfg = cfg(1);
    for t in [0, 3, 8] {
        match local_layout(&cfg, 0, t) {
            Err(Error::Config(m)) => {
                println!("t={t}: {m}");
                assert!(
                    m.contains(if t == 0 { "at least one rank" } else { "heads" }),
                    "{m}"
                );
            }
            other => panic!(
                "t={t}: expected a config error, got {:?}",
                other.map(|_| ())
            ),
        }
    }
}

#[test]
fn tp_layer_matches_one_device_layer() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    println!("adapter: {}", gpus[0].adapter_name());
    let cfg = cfg(1);
    let micro = Micro { b: 2, t: 8 };
    let (n, c) = (micro.tokens(), cfg.channels);
    let layout = cfg.layout(&[Block::Layer(0)]);
    let mut rng = Rng::new(11);
    let mut params = rng.vec(layout.total, 0.5);
    for x in ["ln1w", "ln2w"] {
        let w = layout.slice_mut(&mut params, &format!("h0.{x}")).unwrap();
        w.iter_mut().for_each(|v| *v += 1.0);
    }
    let x = rng.vec(n * c, 1.0);
    let dout = rng.vec(n * c, 1.0);

    // one device
    let g = &gpus[0];
    let m = GpuModel::new(g, cfg, &[Block::Layer(0)], micro, 1.0).unwrap();
    m.set_params(&params).unwrap();
    g.upload(&m.resid[0], &x).unwrap();
    g.run(&m.forward).unwrap();
    let out_ref: Vec<f32> = g.download(m.output()).unwrap();
    g.upload(&m.dresid, &dout).unwrap();
    g.run(&m.backward).unwrap();
    let dx_ref: Vec<f32> = g.download(&m.dresid).unwrap();
    let grads_ref: Vec<f32> = g.download(&m.buffers.grads).unwrap();

    for t in [2, 4] {
        let gs = &gpus[..t];
        let mut tp = TpLayer::new(gs, cfg, 0, micro, Algo::Ring, Link::pcie()).unwrap();
        tp.set_params(&shard_layer(&cfg, &layout, &params, 0, t).unwrap())
            .unwrap();
        tp.set_input(&x).unwrap();
        tp.forward().unwrap();
        assert_eq!(tp.ledger.calls, 2, "t={t}: forward all-reduces");
        let out = tp.output(0).unwrap();
        for r in 1..t {
            assert_eq!(tp.output(r).unwrap(), out, "t={t}: rank {r} output");
        }
        close(&format!("t={t} out"), &out, &out_ref, 1e-5);

        tp.set_dout(&dout).unwrap();
        tp.backward().unwrap();
        assert_eq!(tp.ledger.calls, 4, "t={t}: backward all-reduces");
        let dx = tp.dx(0).unwrap();
        for r in 1..t {
            assert_eq!(tp.dx(r).unwrap(), dx, "t={t}: rank {r} dx");
        }
        close(&format!("t={t} dx"), &dx, &dx_ref, 1e-5);

        let rank_grads = tp.grads().unwrap();
        // replicated tensors get identical gradients on every rank
        for x in ["ln1w", "ln1b", "attprojb", "ln2w", "ln2b", "fcprojb"] {
            let name = format!("h0.{x}");
            let g0 = tp.local.slice(&rank_grads[0], &name).unwrap();
            for (r, gr) in rank_grads.iter().enumerate().skip(1) {
                assert_eq!(
                    tp.local.slice(gr, &name).unwrap(),
                    g0,
                    "t={t} {name} rank {r}"
                );
            }
        }
        let mut grads = vec![0.0f32; layout.total];
        gather_layer(&cfg, &layout, &mut grads, 0, &rank_grads).unwrap();
        for x in NAMES {
            let name = format!("h0.{x}");
            close(
                &format!("t={t} d{name}"),
                layout.slice(&grads, &name).unwrap(),
                layout.slice(&grads_ref, &name).unwrap(),
                1e-5,
            );
        }

        // the ledger: reduce_from_tp ×2 forward, copy_to_tp ×2 backward, each a ring
        // all-reduce of n·C floats
        assert_eq!(
            tp.calls,
            [
                "reduce_from_tp.attproj",
                "reduce_from_tp.fcproj",
                "copy_to_tp.ln2",
                "copy_to_tp.ln1"
            ]
        );
        for call in 0..4 {
            for r in 0..t {
                let sent: u64 = tp
                    .ledger
                    .entries
                    .iter()
                    .filter(|e| e.call == call && e.rank == r && matches!(e.kind, Kind::Hop { .. }))
                    .map(|e| e.bytes)
                    .sum();
                assert_eq!(sent, ring_all_reduce_rank_bytes(n * c, t, r), "call {call}");
            }
            assert!(tp
                .ledger
                .entries
                .iter()
                .filter(|e| e.call == call)
                .all(|e| e.collective == "ring_all_reduce"));
        }
        println!("t={t}: ledger hop bytes {}", tp.ledger.hop_bytes());

        // a second microbatch: 4 more all-reduces, parameter gradients accumulate
        tp.set_input(&x).unwrap();
        tp.forward().unwrap();
        tp.set_dout(&dout).unwrap();
        tp.backward().unwrap();
        assert_eq!(tp.ledger.calls, 8);
        let again = tp.grads().unwrap();
        let mut twice = vec![0.0f32; layout.total];
        gather_layer(&cfg, &layout, &mut twice, 0, &again).unwrap();
        let doubled: Vec<f32> = grads.iter().map(|v| 2.0 * v).collect();
        close(&format!("t={t} 2 microbatches"), &twice, &doubled, 1e-5);
    }
}
