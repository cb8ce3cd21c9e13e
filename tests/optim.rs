//! Gradient norm and AdamW vs their CPU twins: the norm on awkward lengths (bit-identical on
//! repeat), many parts in one call (each with the bits of the part alone), AdamW over several
//! steps with clipping active and inactive, a weight-decay gap mid-range, views at non-zero
//! offsets inside one shared buffer.
// The norm and AdamW take lists of ranges; a list of one range is what these tests mean.
#![allow(clippy::single_range_in_vec_init)]
mod common;
mod twins;
use common::*;
use triaxis::precision::Precision::{self, F32};
use triaxis::{gpu, kernels::optim as k, rng::Rng, View};
use twins as cpu;

const LENS: [usize; 8] = [1, 3, 4, 7, 65, 4097, 100_003, 300_000];

#[test]
fn grad_norm_squared_matches_twin_and_repeats() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(41);
    for n in LENS {
        let x = rand(&mut rng, n);
        let xb = buf(&g, &x);
        let out = poisoned(&g, 1);
        let scratch = poisoned(&g, k::norm_scratch_len(F32, &[0..n]));
        let ops = k::grad_norm_squared(&g, F32, &out, &scratch, &xb, &[0..n]).unwrap();
        assert_eq!(ops.len(), 2);
        g.run(&ops).unwrap();
        let got = g.download::<f32>(&out).unwrap();
        let want = cpu::grad_norm(&x);
        check(
            &format!("grad_norm_squared n={n}"),
            &got,
            &[want * want],
            1e-5,
        );
        for _ in 0..2 {
            g.run(&ops).unwrap();
            let again = g.download::<f32>(&out).unwrap();
            assert_eq!(
                got[0].to_bits(),
                again[0].to_bits(),
                "n={n}: not bit-identical"
            );
        }
    }
    // Empty gradient: norm 0.
    let (out, scratch, empty) = (poisoned(&g, 1), poisoned(&g, 1), g.buffer("e", 0));
    g.run(&k::grad_norm_squared(&g, F32, &out, &scratch, &empty, &[0..0]).unwrap())
        .unwrap();
    assert_eq!(g.download::<f32>(&out).unwrap(), vec![0.0]);
}

#[test]
fn grad_norm_squared_of_many_parts_gives_each_part_alone() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(45);
    let n = 310_000;
    let x = rand(&mut rng, n);
    let xb = buf(&g, &x);
    // awkward starts and lengths, an empty part, a gap, one part past 4096 partials' worth
    let parts = [0..3, 3..10, 10..10, 10..4107, 5000..5065, 5065..305_065];
    let out = poisoned(&g, parts.len());
    let scratch = poisoned(&g, k::norm_scratch_len(F32, &parts));
    let ops = k::grad_norm_squared(&g, F32, &out, &scratch, &xb, &parts).unwrap();
    assert_eq!(ops.len(), 2, "two dispatches for any number of parts");
    g.run(&ops).unwrap();
    let got = g.download::<f32>(&out).unwrap();
    for (i, r) in parts.iter().enumerate() {
        let want = cpu::grad_norm(&x[r.clone()]);
        check(&format!("part {r:?}"), &got[i..i + 1], &[want * want], 1e-5);
        let (one, s1) = (
            poisoned(&g, 1),
            poisoned(&g, k::norm_scratch_len(F32, std::slice::from_ref(r))),
        );
        g.run(&k::grad_norm_squared(&g, F32, &one, &s1, &xb, std::slice::from_ref(r)).unwrap())
            .unwrap();
        let alone = g.download::<f32>(&one).unwrap()[0];
        assert_eq!(
            got[i].to_bits(),
            alone.to_bits(),
            "part {r:?}: not its bits alone"
        );
    }
}

/// Like `check`, without the report line: asserts and returns the max abs error.
fn close(name: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> f32 {
    assert_eq!(gpu.len(), cpu.len(), "{name}: length");
    let mut worst = 0.0f32;
    for (i, (&a, &b)) in gpu.iter().zip(cpu).enumerate() {
        let e = (a - b).abs();
        assert!(
            a.is_finite() && (e <= tol || e <= tol * b.abs()),
            "{name}: element {i}: gpu {a} cpu {b}"
        );
        worst = worst.max(e);
    }
    worst
}

/// One flat buffer holding params | grads | m | v at 64-aligned offsets, as the model lays it out.
struct Flat {
    params: View,
    grads: View,
    m: View,
    v: View,
}

fn flat(g: &triaxis::Gpu, n: usize) -> Flat {
    let stride = n.next_multiple_of(64);
    let all = g.buffer("flat", 4 * stride);
    Flat {
        params: all.slice(0, n),
        grads: all.slice(stride, n),
        m: all.slice(2 * stride, n),
        v: all.slice(3 * stride, n),
    }
}

#[test]
fn adamw_matches_twin_over_steps() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(42);
    for n in [1, 4, 7, 65, 1000, 100_003] {
        for clip in [0.0f32, 1e9, 0.2] {
            let f = flat(&g, n);
            let mut p = rand(&mut rng, n);
            let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
            g.upload(&f.params, &p).unwrap();
            g.upload(&f.m, &m).unwrap();
            g.upload(&f.v, &v).unwrap();
            let (hp, norm_sq) = (g.buffer("hp", 8), g.buffer("norm_sq", 1));
            let scratch = g.buffer("scratch", k::norm_scratch_len(F32, &[0..n]));
            let decay = decay_ranges(n);
            let mut ops =
                k::grad_norm_squared(&g, F32, &norm_sq, &scratch, &f.grads, &[0..n]).unwrap();
            ops.extend(
                k::adamw(
                    &g, F32, &f.params, None, &f.grads, &f.m, &f.v, &hp, &norm_sq, &decay,
                )
                .unwrap(),
            );
            let (mut clipped, mut worst) = (false, 0.0f32);
            for t in 1..=4 {
                let h = cpu::AdamW {
                    t,
                    clip,
                    lr: 1e-2,
                    ..Default::default()
                };
                let grads: Vec<f32> = rand(&mut rng, n).iter().map(|x| x * 0.1).collect();
                g.upload(&f.grads, &grads).unwrap();
                g.upload(&hp, &k::hyper_words(&h)).unwrap();
                g.run(&ops).unwrap();
                // The twin takes the norm the device computed, so both clip identically.
                let nsq = g.download::<f32>(&norm_sq).unwrap()[0];
                let scale = h.clip_scale(nsq.sqrt());
                clipped |= scale != 1.0;
                cpu::adamw(&mut p, &grads, &mut m, &mut v, &h, scale, &decay);
                let name = format!("adamw n={n} clip={clip} t={t}");
                for (what, view, want) in
                    [("params", &f.params, &p), ("m", &f.m, &m), ("v", &f.v, &v)]
                {
                    let e = close(
                        &format!("{name} {what}"),
                        &g.download::<f32>(view).unwrap(),
                        want,
                        1e-5,
                    );
                    worst = worst.max(e);
                }
            }
            println!("adamw n={n} clip={clip}: t=1..4, max abs err {worst:.3e} (params, m, v)");
            // |g| < 0.1 per element: clip 0.2 clips n ≥ 65 (norm ≈ 0.058·√n) but never n ≤ 4;
            // 0 and 1e9 never clip.
            if n >= 65 || n <= 4 {
                assert_eq!(clipped, clip == 0.2 && n >= 65, "n={n} clip={clip}");
            }
        }
    }
}

#[test]
fn hyper_words_layout() {
    let h = cpu::AdamW {
        lr: 0.5,
        beta1: 0.25,
        beta2: 0.125,
        eps: 2.0,
        weight_decay: 4.0,
        t: 7,
        clip: 8.0,
    };
    let w = k::hyper_words(&h);
    assert_eq!(w[0], 0.5f32.to_bits());
    assert_eq!(w[4], 4.0f32.to_bits());
    assert_eq!(w[5], 7);
    assert_eq!(w[6], 8.0f32.to_bits());
    assert_eq!(w[7], 0);
}

#[test]
fn optim_bad_sizes_are_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let x = g.buffer("x", 1000);
    let y = g.buffer("y", 999);
    let one = g.buffer("one", 1);
    let none = g.buffer("none", 0);
    let hp = g.buffer("hp", 8);
    let short = g.buffer("short", 7);
    let all = [0..1000];
    assert!(k::grad_norm_squared(&g, F32, &none, &one, &x, &all).is_err()); // out empty
    assert!(k::grad_norm_squared(&g, F32, &one, &one, &x, &all).is_err()); // scratch 1 < 16
    assert!(k::grad_norm_squared(&g, F32, &one, &hp, &y, &[0..999]).is_err()); // scratch 8 < 16
    assert!(k::grad_norm_squared(&g, F32, &one, &hp, &x, &[990..1001]).is_err()); // past grads
    let d = [0..64];
    assert!(k::adamw(&g, F32, &x, None, &y, &x, &x, &hp, &one, &d).is_err());
    assert!(k::adamw(&g, F32, &x, None, &x, &x, &y, &hp, &one, &d).is_err());
    assert!(k::adamw(&g, F32, &x, None, &x, &x, &x, &short, &one, &d).is_err());
    assert!(k::adamw(&g, F32, &x, None, &x, &x, &x, &hp, &none, &d).is_err());
    // decay ranges start and end on 64-element blocks, or at the end
    assert!(k::adamw(&g, F32, &x, None, &x, &x, &x, &hp, &one, &[0..10]).is_err());
    assert!(k::adamw(&g, F32, &x, None, &x, &x, &x, &hp, &one, &[64..2000]).is_err());
    assert!(k::adamw(&g, F32, &x, None, &x, &x, &x, &hp, &one, &[64..1000]).is_ok());
    // f32 updates its parameters in place; bf16 needs f32 master weights
    assert!(k::adamw(&g, F32, &x, Some(&x), &x, &x, &x, &hp, &one, &d).is_err());
    let w = g.buffer("w", 500);
    assert!(k::adamw(&g, Precision::Bf16, &w, None, &w, &x, &x, &hp, &one, &d).is_err());
    assert!(k::adamw(&g, Precision::Bf16, &w, Some(&x), &w, &x, &x, &hp, &one, &d).is_ok());
}
