//! LayerNorm kernels vs their CPU twins on awkward shapes: forward outputs poisoned first,
//! backward's accumulated outputs (dinp, dweight, dbias) pre-filled with random values.
mod common;
mod twins;
use common::*;
use triaxis::precision::Precision::F32;
use triaxis::{gpu, kernels::norm as k, rng::Rng};
use twins as cpu;

// Covers scalar (c % 4 ≠ 0) and vec4 rows, direct (n ≤ 256) and chunked column sums.
const SHAPES: [(usize, usize); 12] = [
    (1, 1),
    (1, 7),
    (7, 1),
    (7, 33),
    (33, 65),
    (65, 7),
    (300, 33),
    (33, 300),
    (65, 768),
    (300, 64),
    (1000, 20),
    (257, 4),
];

#[test]
fn layernorm_forward_backward_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(11);
    for (n, c) in SHAPES {
        let x: Vec<f32> = rng.vec(n * c, 3.0).iter().map(|v| v + 0.5).collect();
        let w = rand(&mut rng, c);
        let bias = rand(&mut rng, c);
        let (xb, wb, bb) = (buf(&g, &x), buf(&g, &w), buf(&g, &bias));
        let (out, mean, rstd) = (poisoned(&g, n * c), poisoned(&g, n), poisoned(&g, n));
        g.run(&k::layernorm_forward(&g, F32, &out, &mean, &rstd, &xb, &wb, &bb, n, c).unwrap())
            .unwrap();
        let (mut o, mut m, mut s) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        cpu::layernorm_forward(&mut o, &mut m, &mut s, &x, &w, &bias, n, c);
        let name = format!("layernorm_forward n={n} c={c}");
        check(&name, &g.download::<f32>(&out).unwrap(), &o, 1e-4);
        check(
            &format!("{name} mean"),
            &g.download::<f32>(&mean).unwrap(),
            &m,
            1e-5,
        );
        check(
            &format!("{name} rstd"),
            &g.download::<f32>(&rstd).unwrap(),
            &s,
            1e-4,
        );

        // Backward from the CPU's mean/rstd, into random pre-filled accumulators.
        let dy = rand(&mut rng, n * c);
        let (mut di, mut dw, mut db) =
            (rand(&mut rng, n * c), rand(&mut rng, c), rand(&mut rng, c));
        let (dib, dwb, dbb) = (buf(&g, &di), buf(&g, &dw), buf(&g, &db));
        let (dyb, mb, sb) = (buf(&g, &dy), buf(&g, &m), buf(&g, &s));
        let ops = k::layernorm_backward(&g, F32, &dib, &dwb, &dbb, &dyb, &xb, &wb, &mb, &sb, n, c)
            .unwrap();
        assert_eq!(dispatches(&ops), if n <= 256 { 2 } else { 3 });
        g.run(&ops).unwrap();
        cpu::layernorm_backward(&mut di, &mut dw, &mut db, &dy, &x, &w, &m, &s, n, c);
        let name = format!("layernorm_backward n={n} c={c}");
        check(
            &format!("{name} dinp"),
            &g.download::<f32>(&dib).unwrap(),
            &di,
            1e-4,
        );
        check(
            &format!("{name} dweight"),
            &g.download::<f32>(&dwb).unwrap(),
            &dw,
            1e-4,
        );
        check(
            &format!("{name} dbias"),
            &g.download::<f32>(&dbb).unwrap(),
            &db,
            1e-5,
        );
    }
}

#[test]
fn layernorm_bad_sizes_are_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let v = g.buffer("x", 64);
    let small = g.buffer("s", 3);
    assert!(k::layernorm_forward(&g, F32, &v, &v, &v, &v, &v, &v, 4, 0).is_err());
    assert!(k::layernorm_forward(&g, F32, &v, &v, &v, &v, &v, &v, 9, 8).is_err());
    assert!(k::layernorm_forward(&g, F32, &v, &small, &v, &v, &v, &v, 4, 16).is_err());
    assert!(k::layernorm_forward(&g, F32, &v, &v, &v, &v, &small, &v, 2, 4).is_err());
    assert!(k::layernorm_forward(&g, F32, &v, &v, &v, &v, &v, &v, usize::MAX, 2).is_err());
    assert!(k::layernorm_backward(&g, F32, &v, &v, &v, &v, &v, &v, &v, &v, 4, 32).is_err());
    assert!(k::layernorm_backward(&g, F32, &v, &small, &v, &v, &v, &v, &v, &v, 4, 4).is_err());
    assert!(k::layernorm_backward(&g, F32, &v, &v, &v, &v, &v, &v, &v, &small, 4, 4).is_err());
    assert!(k::layernorm_backward(&g, F32, &v, &v, &v, &v, &v, &v, &v, &v, 4, 4).is_ok());
}

/// The residual add fused into the layernorm after it gives the bits of the two ops (residual
/// then layernorm) in both precisions, on scalar and vec4 rows, and the twins' values.
#[test]
fn residual_layernorm_gives_the_two_ops_bits() {
    use triaxis::kernels::elementwise as ke;
    use triaxis::precision::Precision;
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(12);
    for p in [F32, Precision::Bf16] {
        for (n, c) in [(1, 2), (7, 34), (65, 64), (300, 20), (33, 768)] {
            let words = |len: usize| p.words(len);
            let upload = |x: &[f32]| {
                let mut v = x.to_vec();
                p.round(&mut v);
                match p {
                    F32 => buf(&g, &v),
                    Precision::Bf16 => buf_u32(&g, &cpu::pack_bf16(&v)),
                }
            };
            let (a, b) = (rand(&mut rng, n * c), rand(&mut rng, n * c));
            let (w, bias) = (rand(&mut rng, c), rand(&mut rng, c));
            let (ab, bb, wb, biasb) = (upload(&a), upload(&b), upload(&w), upload(&bias));
            let mut got = Vec::new();
            for fused in [false, true] {
                let (sum, out) = (poisoned(&g, words(n * c)), poisoned(&g, words(n * c)));
                let (mean, rstd) = (poisoned(&g, n), poisoned(&g, n));
                let ops = if fused {
                    k::residual_layernorm_forward(
                        &g,
                        p,
                        &sum,
                        &out,
                        &mean,
                        &rstd,
                        (&ab, &bb),
                        &wb,
                        &biasb,
                        n,
                        c,
                    )
                    .unwrap()
                } else {
                    let mut ops = ke::residual_forward(&g, p, &sum, &ab, &bb, n * c).unwrap();
                    ops.extend(
                        k::layernorm_forward(&g, p, &out, &mean, &rstd, &sum, &wb, &biasb, n, c)
                            .unwrap(),
                    );
                    ops
                };
                assert_eq!(dispatches(&ops), if fused { 1 } else { 2 });
                g.run(&ops).unwrap();
                let read = |v: &triaxis::View| g.download::<u32>(v).unwrap();
                got.push([read(&sum), read(&out), read(&mean), read(&rstd)]);
            }
            for (i, what) in ["sum", "out", "mean", "rstd"].iter().enumerate() {
                assert!(
                    got[0][i] == got[1][i],
                    "{p} n={n} c={c}: {what} bits differ"
                );
            }
            if p == F32 {
                let mut sum = vec![0.0; n * c];
                cpu::residual_forward(&mut sum, &a, &b);
                let (mut o, mut m, mut s) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
                cpu::layernorm_forward(&mut o, &mut m, &mut s, &sum, &w, &bias, n, c);
                let out: Vec<f32> = got[1][1].iter().map(|&x| f32::from_bits(x)).collect();
                check(&format!("residual_layernorm n={n} c={c}"), &out, &o, 1e-4);
            }
        }
    }
}
