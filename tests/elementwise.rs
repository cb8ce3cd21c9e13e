//! Elementwise kernels vs their CPU twins on awkward sizes, outputs poisoned first.
mod common;
mod twins;
use common::*;
use triaxis::precision::Precision::F32;
use triaxis::{gpu, kernels::elementwise as k, rng::Rng};
use twins as cpu;

const SIZES: [usize; 6] = [1, 7, 33, 65, 257, 70_001];

#[test]
fn gelu_forward_backward_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(1);
    for n in SIZES {
        let x = rng.vec(n, 4.0);
        let dy = rand(&mut rng, n);
        let (xb, dyb, out) = (buf(&g, &x), buf(&g, &dy), poisoned(&g, n));
        g.run(&[k::gelu_forward(&g, F32, &out, &xb, n).unwrap()])
            .unwrap();
        let mut want = vec![0.0; n];
        cpu::gelu_forward(&mut want, &x);
        check(
            &format!("gelu_forward n={n}"),
            &g.download::<f32>(&out).unwrap(),
            &want,
            1e-5,
        );
        let dinp = poisoned(&g, n);
        g.run(&[k::gelu_backward(&g, F32, &dinp, &xb, &dyb, n).unwrap()])
            .unwrap();
        cpu::gelu_backward(&mut want, &x, &dy);
        check(
            &format!("gelu_backward n={n}"),
            &g.download::<f32>(&dinp).unwrap(),
            &want,
            1e-5,
        );
    }
}

#[test]
fn residual_fill_scale_add_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(2);
    for n in SIZES {
        let (a, b) = (rand(&mut rng, n), rand(&mut rng, n));
        let (ab, bb, out) = (buf(&g, &a), buf(&g, &b), poisoned(&g, n));
        g.run(&[k::residual_forward(&g, F32, &out, &ab, &bb, n).unwrap()])
            .unwrap();
        let mut want = vec![0.0; n];
        cpu::residual_forward(&mut want, &a, &b);
        check(
            &format!("residual n={n}"),
            &g.download::<f32>(&out).unwrap(),
            &want,
            0.0,
        );
        // out = a + b, then out *= 0.5, then out += a, then fill
        g.run(&[
            k::scale(&g, F32, &out, 0.5).unwrap(),
            k::add(&g, F32, &out, &ab).unwrap(),
        ])
        .unwrap();
        cpu::scale(&mut want, 0.5);
        cpu::add(&mut want, &a);
        check(
            &format!("scale+add n={n}"),
            &g.download::<f32>(&out).unwrap(),
            &want,
            0.0,
        );
        let copied = poisoned(&g, n);
        g.run(&[k::copy(&g, F32, &copied, &out).unwrap()]).unwrap();
        check(
            &format!("copy n={n}"),
            &g.download::<f32>(&copied).unwrap(),
            &want,
            0.0,
        );
        g.run(&[k::fill(&g, F32, &out, 3.25).unwrap()]).unwrap();
        cpu::fill(&mut want, 3.25);
        check(
            &format!("fill n={n}"),
            &g.download::<f32>(&out).unwrap(),
            &want,
            0.0,
        );
    }
}
