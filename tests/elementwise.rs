//! Elementwise kernels vs their CPU twins on awkward sizes, outputs poisoned first.
mod common;
mod twins;
use common::*;
use triaxis::kernels::Dispatch;
use triaxis::precision::Precision::{self, Bf16, F32};
use triaxis::{gpu, kernels::elementwise as k, rng::Rng};
use twins as cpu;

const SIZES: [usize; 8] = [1, 7, 33, 64, 65, 257, 70_000, 70_001];

#[test]
fn gelu_forward_backward_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(1);
    for n in SIZES {
        let x = rng.vec(n, 4.0);
        let dy = rand(&mut rng, n);
        let (xb, dyb, out) = (buf(&g, &x), buf(&g, &dy), poisoned(&g, n));
        g.run(&k::gelu_forward(&g, F32, &out, &xb, n).unwrap())
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
        g.run(&k::gelu_backward(&g, F32, &dinp, &xb, &dyb, n).unwrap())
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
        g.run(&k::residual_forward(&g, F32, &out, &ab, &bb, n).unwrap())
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

/// The Quad entries (n % 4 == 0) and the word entries do the same arithmetic per element: the
/// ops over n = 4096 elements (Quads) and over the first 4095 (words) agree bit for bit on
/// those, in both precisions.
#[test]
fn quad_entries_match_word_entries_bit_for_bit() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(3);
    let n = 4096;
    // f32 words hold one element, bf16 words two (from random f32 bits, rounded down)
    for p in [F32, Bf16] {
        let words = p.words(n);
        let draw = |rng: &mut Rng, a: f32| -> Vec<u32> {
            let x = rng.vec(2 * words, a);
            match p {
                F32 => x[..words].iter().map(|v| v.to_bits()).collect(),
                Bf16 => x
                    .chunks(2)
                    .map(|c| (c[0].to_bits() >> 16) | (c[1].to_bits() & 0xffff_0000))
                    .collect(),
            }
        };
        let (x, dy) = (draw(&mut rng, 4.0), draw(&mut rng, 1.0));
        let (xb, dyb) = (buf_u32(&g, &x), buf_u32(&g, &dy));
        let ops: [(&str, ElementOp); 3] = [
            ("gelu_forward", &|g, p, o, n| {
                k::gelu_forward(g, p, o, &xb, n)
            }),
            ("gelu_backward", &|g, p, o, n| {
                k::gelu_backward(g, p, o, &xb, &dyb, n)
            }),
            ("residual_forward", &|g, p, o, n| {
                k::residual_forward(g, p, o, &xb, &dyb, n)
            }),
        ];
        for (name, op) in ops {
            let run = |m: usize| -> Vec<u32> {
                let out = poisoned(&g, words);
                g.run(&op(&g, p, &out, m).unwrap()).unwrap();
                g.download::<u32>(&out).unwrap()
            };
            let (quads, words_only) = (run(n), run(n - 1));
            // every element but the last: f32 words 0..n-1; bf16 words 0..last and the last
            // word's low half
            let last = words - 1;
            assert_eq!(
                quads[..n.min(last)],
                words_only[..n.min(last)],
                "{name} {p}"
            );
            if p == Bf16 {
                let low = |w: u32| w & 0xffff;
                assert_eq!(
                    low(quads[last]),
                    low(words_only[last]),
                    "{name} bf16: last word"
                );
            }
        }
    }
}

type ElementOp<'a> =
    &'a dyn Fn(&gpu::Gpu, Precision, &gpu::View, usize) -> triaxis::error::Result<Vec<Dispatch>>;
