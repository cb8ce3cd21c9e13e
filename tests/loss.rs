//! Fused softmax + cross-entropy vs its CPU twin: losses and dlogits poisoned first.
mod common;
mod twins;
use common::*;
use triaxis::{gpu, kernels::loss as k, rng::Rng};
use twins as cpu;

// v % 4 == 0 takes the vec4 entry.
const SHAPES: [(usize, usize); 11] = [
    (1, 1),
    (1, 7),
    (7, 2),
    (33, 65),
    (65, 33),
    (300, 16),
    (7, 257),
    (5, 300),
    (9, 5000),
    (1, 4),
    (70, 256),
];

fn case(g: &triaxis::Gpu, rng: &mut Rng, n: usize, v: usize, in_place: bool) {
    let logits = rng.vec(n * v, 6.0);
    let targets: Vec<u32> = (0..n).map(|_| rng.below(v as u64) as u32).collect();
    let dloss = 1.0 / n as f32;
    let (lb, tb, losses) = (buf(g, &logits), buf_u32(g, &targets), poisoned(g, n));
    let dl = if in_place {
        lb.clone()
    } else {
        poisoned(g, n * v)
    };
    let ops = k::crossentropy_forward_backward(g, &losses, &dl, &lb, &tb, n, v, dloss).unwrap();
    assert_eq!(ops.len(), 1);
    g.run(&ops).unwrap();
    let (mut wl, mut wd) = (vec![0.0; n], vec![0.0; n * v]);
    cpu::crossentropy_forward_backward(&mut wl, &mut wd, &logits, &targets, n, v, dloss);
    let name = format!(
        "crossentropy n={n} v={v}{}",
        if in_place { " in place" } else { "" }
    );
    check(
        &format!("{name} losses"),
        &g.download::<f32>(&losses).unwrap(),
        &wl,
        1e-5,
    );
    check(
        &format!("{name} dlogits"),
        &g.download::<f32>(&dl).unwrap(),
        &wd,
        1e-5,
    );
}

#[test]
fn crossentropy_matches_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(31);
    for (n, v) in SHAPES {
        case(&g, &mut rng, n, v, false);
    }
    case(&g, &mut rng, 33, 300, true);
    case(&g, &mut rng, 3, 5000, true);
    case(&g, &mut rng, 5, 5001, true);
}

#[test]
fn crossentropy_repeats_bit_for_bit() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(32);
    let (n, v) = (16, 3000);
    let (lb, tb) = (
        buf(&g, &rng.vec(n * v, 8.0)),
        buf_u32(
            &g,
            &(0..n as u32).map(|i| i * 7 % v as u32).collect::<Vec<_>>(),
        ),
    );
    let (losses, dl) = (poisoned(&g, n), poisoned(&g, n * v));
    let ops = k::crossentropy_forward_backward(&g, &losses, &dl, &lb, &tb, n, v, 0.5).unwrap();
    g.run(&ops).unwrap();
    let (a, da) = (
        g.download::<u32>(&losses).unwrap(),
        g.download::<u32>(&dl).unwrap(),
    );
    g.run(&ops).unwrap();
    assert_eq!(a, g.download::<u32>(&losses).unwrap());
    assert_eq!(da, g.download::<u32>(&dl).unwrap());
}

#[test]
fn crossentropy_bad_sizes_are_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let x = g.buffer("x", 64);
    let t = g.buffer("t", 4);
    assert!(k::crossentropy_forward_backward(&g, &x, &x, &x, &t, 4, 0, 1.0).is_err());
    assert!(k::crossentropy_forward_backward(&g, &x, &x, &x, &t, 4, 17, 1.0).is_err());
    assert!(k::crossentropy_forward_backward(&g, &x, &x, &x, &t, 5, 8, 1.0).is_err());
    assert!(k::crossentropy_forward_backward(&g, &x, &x, &x, &t, usize::MAX, 8, 1.0).is_err());
    let l = g.buffer("l", 4);
    assert!(k::crossentropy_forward_backward(&g, &l, &x, &x, &t, 4, 16, 1.0).is_ok());
}

#[test]
fn crossentropy_target_out_of_range_is_nan() {
    let Some(g) = gpu::test_gpu() else { return };
    let (n, v) = (2, 7);
    let lb = buf(&g, &vec![0.5; n * v]);
    let tb = buf_u32(&g, &[3, 7]);
    let (losses, dl) = (poisoned(&g, n), poisoned(&g, n * v));
    g.run(&k::crossentropy_forward_backward(&g, &losses, &dl, &lb, &tb, n, v, 1.0).unwrap())
        .unwrap();
    let l = g.download::<f32>(&losses).unwrap();
    assert!(
        (l[0] - (v as f32).ln()).abs() < 1e-6,
        "uniform row: loss ln v, got {}",
        l[0]
    );
    assert!(l[1].is_nan(), "target ≥ v: NaN loss, got {}", l[1]);
}
