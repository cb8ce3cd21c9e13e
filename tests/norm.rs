//! LayerNorm kernels vs their CPU twins on awkward shapes: forward outputs poisoned first,
//! backward's accumulated outputs (dinp, dweight, dbias) pre-filled with random values.
mod common;
use common::*;
use triaxis::precision::Precision::F32;
use triaxis::{cpu, gpu, kernels::norm as k, rng::Rng};

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
        assert_eq!(ops.len(), if n <= 256 { 2 } else { 3 });
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
