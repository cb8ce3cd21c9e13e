//! Mixed-precision gradient norm and AdamW vs their twins: packed bf16 gradients, f32 master
//! weights and moments, packed bf16 parameters out — over several steps, with clipping on and
//! off, odd and even lengths, views at offsets inside one buffer.
// The norm and AdamW take lists of ranges; a list of one range is what these tests mean.
#![allow(clippy::single_range_in_vec_init)]
mod common;
mod twins;
use common::*;
use triaxis::kernels::optim as ko;
use triaxis::precision::Precision::Bf16 as BF16;
use triaxis::{gpu, rng::Rng};
use twins as cpu;
use twins::packed::optim as twin;

const LENS: [usize; 6] = [1, 2, 7, 65, 4097, 100_003];

/// A poisoned view of `words` u32 words.
fn words(g: &triaxis::Gpu, n: usize) -> triaxis::View {
    buf_u32(g, &vec![0x7f81_ff81; n])
}

#[test]
fn grad_norm_of_packed_gradients_matches_twin_and_repeats() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(43);
    for n in LENS {
        let x = cpu::pack_bf16(&rand(&mut rng, n));
        let xb = buf_u32(&g, &x);
        let out = poisoned(&g, 1);
        let scratch = poisoned(&g, ko::norm_scratch_len(BF16, &[0..n]));
        let ops = ko::grad_norm_squared(&g, BF16, &out, &scratch, &xb, &[0..n]).unwrap();
        g.run(&ops).unwrap();
        let got = g.download::<f32>(&out).unwrap();
        let want = twin::grad_norm_squared_bf16(&x, n) as f32;
        check(
            &format!("grad_norm_squared_bf16 n={n}"),
            &got,
            &[want],
            1e-5,
        );
        g.run(&ops).unwrap();
        assert_eq!(
            g.download::<f32>(&out).unwrap()[0].to_bits(),
            got[0].to_bits(),
            "n={n}: repeat"
        );
    }
    let bad = ko::grad_norm_squared(
        &g,
        BF16,
        &poisoned(&g, 1),
        &poisoned(&g, 1),
        &words(&g, 3),
        &[0..7],
    );
    assert!(bad.is_err(), "3 words cannot hold 7 elements");
    let odd = ko::grad_norm_squared(
        &g,
        BF16,
        &poisoned(&g, 2),
        &poisoned(&g, 2),
        &words(&g, 4),
        &[0..3, 3..8],
    );
    assert!(odd.is_err(), "a bf16 part starts on a word");
}

#[test]
fn adamw_on_master_weights_matches_twin_over_steps() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(44);
    for n in LENS {
        for clip in [0.0f32, 0.2] {
            let w = n.div_ceil(2);
            // master | m | v (f32) and params | grads (words) at 64-aligned offsets of one buffer
            let stride = n.next_multiple_of(64);
            let all = g.buffer("flat", 3 * stride + 2 * stride);
            let (master, m_v, v_v) = (
                all.slice(0, n),
                all.slice(stride, n),
                all.slice(2 * stride, n),
            );
            let (params, grads) = (all.slice(3 * stride, w), all.slice(4 * stride, w));
            g.upload(&params, &vec![0x7f81_ff81; w]).unwrap();
            let mut p = rand(&mut rng, n);
            let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
            g.upload(&master, &p).unwrap();
            g.upload(&m_v, &m).unwrap();
            g.upload(&v_v, &v).unwrap();
            let (hp, norm_sq) = (g.buffer("hp", 8), g.buffer("norm_sq", 1));
            let scratch = g.buffer("scratch", ko::norm_scratch_len(BF16, &[0..n]));
            let decay = decay_ranges(n);
            let mut ops =
                ko::grad_norm_squared(&g, BF16, &norm_sq, &scratch, &grads, &[0..n]).unwrap();
            ops.extend(
                ko::adamw(
                    &g,
                    BF16,
                    &params,
                    Some(&master),
                    &grads,
                    &m_v,
                    &v_v,
                    &hp,
                    &norm_sq,
                    &decay,
                )
                .unwrap(),
            );
            let mut clipped = false;
            for t in 1..=3 {
                let h = cpu::AdamW {
                    t,
                    clip,
                    lr: 1e-2,
                    ..Default::default()
                };
                let gw = cpu::pack_bf16(
                    &rand(&mut rng, n)
                        .iter()
                        .map(|x| x * 0.1)
                        .collect::<Vec<_>>(),
                );
                g.upload(&grads, &gw).unwrap();
                g.upload(&hp, &ko::hyper_words(&h)).unwrap();
                g.run(&ops).unwrap();
                let nsq = g.download::<f32>(&norm_sq).unwrap()[0];
                let scale = h.clip_scale(nsq.sqrt());
                clipped |= scale != 1.0;
                let want = twin::adamw_bf16(&mut p, &gw, &mut m, &mut v, &h, scale, &decay);
                let name = format!("adamw_bf16 n={n} clip={clip} t={t}");
                for (what, view, want) in
                    [("master", &master, &p), ("m", &m_v, &m), ("v", &v_v, &v)]
                {
                    check(
                        &format!("{name} {what}"),
                        &g.download::<f32>(view).unwrap(),
                        want,
                        1e-5,
                    );
                }
                // the parameters are the master weights rounded: within one bf16 step of the
                // twin's (a last-bit f32 difference may flip a rounding), bit-equal nearly always
                let got = g.download::<u32>(&params).unwrap();
                let gf = cpu::unpack_bf16(&got, n);
                let wf = cpu::unpack_bf16(&want, n);
                let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
                for (i, (a, b)) in gf.iter().zip(&wf).enumerate() {
                    let ulp = b.abs().max(1e-30) / 128.0;
                    assert!((a - b).abs() <= ulp, "{name}: param {i}: {a} vs {b}");
                }
                assert!(
                    same * 100 >= 99 * want.len(),
                    "{name}: {same} of {} words bit-equal",
                    want.len()
                );
                // and equal to packing the device's own master weights, bit for bit
                let own = cpu::pack_bf16(&g.download::<f32>(&master).unwrap());
                assert_eq!(got, own, "{name}: params = bf16(master)");
            }
            if n >= 65 {
                assert_eq!(clipped, clip == 0.2, "n={n} clip={clip}");
            }
        }
    }
}
