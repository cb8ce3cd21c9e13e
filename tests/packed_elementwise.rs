//! Packed-bf16 elementwise kernels vs their twins (`cpu::packed::elementwise`): random bf16
//! inputs at odd and even lengths (for an odd n the high half of the last input word holds junk
//! the kernels must ignore, and that of the output must come back 0), outputs poisoned first,
//! each result repeated bit for bit. GELU may differ from the twin by 1 ulp (tanh); residual,
//! add, fill and copy are single f32 operations and must match exactly.
mod common;
mod twins;
use common::packed::*;
use common::*;
use triaxis::kernels::elementwise as k;
use triaxis::precision::Precision::Bf16 as BF16;
use triaxis::rng::Rng;
use twins::packed::elementwise as t;

const SIZES: [usize; 8] = [1, 2, 7, 33, 64, 257, 4096, 70_001];

/// `n` packed values in [-a, a), with junk in the unused high half of an odd n's last word.
fn input(rng: &mut Rng, n: usize, a: f32) -> Vec<u32> {
    let mut w = packed(rng, n, a);
    if n % 2 == 1 {
        *w.last_mut().unwrap() |= 0x4049 << 16;
    }
    w
}

#[test]
fn gelu_forward_backward_match_twin() {
    let Some(g) = test_device() else { return };
    println!("adapter: {} ({:?})", g.info.name, g.info.backend);
    let mut rng = Rng::new(101);
    let mut tally = Tally::default();
    for n in SIZES {
        let w = n.div_ceil(2);
        let (x, dy) = (input(&mut rng, n, 4.0), input(&mut rng, n, 1.0));
        let (xb, dyb) = (buf_u32(&g, &x), buf_u32(&g, &dy));

        let mut want = vec![0; w];
        t::gelu_forward_bf16(&mut want, &x, n);
        let mut first = None;
        for _ in 0..2 {
            let out = poisoned_words(&g, w);
            g.run(&k::gelu_forward(&g, BF16, &out, &xb, n).unwrap())
                .unwrap();
            let got = g.download::<u32>(&out).unwrap();
            let first = first.get_or_insert_with(|| got.clone());
            assert_eq!(&got, first, "gelu_forward n={n}: repeat differs");
        }
        tally.check(&format!("gelu_forward_bf16 n={n}"), &first.unwrap(), &want);

        t::gelu_backward_bf16(&mut want, &x, &dy, n);
        let mut first = None;
        for _ in 0..2 {
            let dinp = poisoned_words(&g, w);
            g.run(&k::gelu_backward(&g, BF16, &dinp, &xb, &dyb, n).unwrap())
                .unwrap();
            let got = g.download::<u32>(&dinp).unwrap();
            let first = first.get_or_insert_with(|| got.clone());
            assert_eq!(&got, first, "gelu_backward n={n}: repeat differs");
        }
        tally.check(&format!("gelu_backward_bf16 n={n}"), &first.unwrap(), &want);
    }
    tally.finish("gelu");
}

#[test]
fn residual_add_copy_fill_match_twin_exactly() {
    let Some(g) = test_device() else { return };
    let mut rng = Rng::new(102);
    let mut tally = Tally::default();
    for n in SIZES {
        let w = n.div_ceil(2);
        let (a, b) = (input(&mut rng, n, 1.0), input(&mut rng, n, 3.0));
        let (ab, bb, out) = (buf_u32(&g, &a), buf_u32(&g, &b), poisoned_words(&g, w));
        g.run(&k::residual_forward(&g, BF16, &out, &ab, &bb, n).unwrap())
            .unwrap();
        let mut want = vec![0; w];
        t::residual_forward_bf16(&mut want, &a, &b, n);
        tally.exact(
            &format!("residual_forward_bf16 n={n}"),
            &g.download::<u32>(&out).unwrap(),
            &want,
        );

        // out += a twice over all halves (junk high half included: the same on both sides)
        let ops = [k::add(&g, BF16, &out, &ab).unwrap()];
        g.run(&ops).unwrap();
        g.run(&ops).unwrap();
        t::add_bf16(&mut want, &a);
        t::add_bf16(&mut want, &a);
        tally.exact(
            &format!("add_bf16 n={n}"),
            &g.download::<u32>(&out).unwrap(),
            &want,
        );

        // copy: raw words, signalling-NaN payloads and all
        let bits: Vec<u32> = (0..w).map(|_| rng.next_u64() as u32).collect();
        let (src, dst) = (buf_u32(&g, &bits), poisoned_words(&g, w));
        g.run(&[k::copy(&g, BF16, &dst, &src).unwrap()]).unwrap();
        let mut want = vec![0; w];
        t::copy_bf16(&mut want, &bits);
        assert_eq!(want, bits);
        tally.exact(
            &format!("copy_bf16 n={n}"),
            &g.download::<u32>(&dst).unwrap(),
            &want,
        );
    }
    // fill: exact values, a value that rounds, a tie to even, overflow to inf, tiny, negative zero
    let values = [
        3.25,
        0.1,
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::MAX,
        1e-40,
        -0.0,
        -7.3e5,
    ];
    for n in [1usize, 2, 33, 70_001] {
        let w = n.div_ceil(2);
        for value in values {
            let out = poisoned_words(&g, w);
            g.run(&[k::fill(&g, BF16, &out, value).unwrap()]).unwrap();
            let mut want = vec![0; w];
            t::fill_bf16(&mut want, value);
            tally.exact(
                &format!("fill_bf16 words={w} value={value:e}"),
                &g.download::<u32>(&out).unwrap(),
                &want,
            );
        }
    }
    tally.finish("residual/add/copy/fill");
}

#[test]
fn twin_known_values() {
    let mut w = [0u32; 1];
    t::fill_bf16(&mut w, 0.1);
    assert_eq!(w, [0x3dcd_3dcd]); // 0.1 = 0x3dcccccd rounds up
    t::fill_bf16(&mut w, f32::MAX);
    assert_eq!(w, [0x7f80_7f80]);
    let (a, b) = (
        triaxis::cpu::pack_bf16(&[1.0, -2.0]),
        triaxis::cpu::pack_bf16(&[2.0, 0.5]),
    );
    t::residual_forward_bf16(&mut w, &a, &b, 2);
    assert_eq!(triaxis::cpu::unpack_bf16(&w, 2), vec![3.0, -1.5]);
    // odd n: the junk high half is ignored and the output's is 0
    t::residual_forward_bf16(&mut w, &[0xffff_3f80], &[0xffff_3f80], 1);
    assert_eq!(w, [0x0000_4000]);
    // 1 + 2⁻⁸ is a tie between 1 and 1 + 2⁻⁷: rounds to even (1)
    let mut o = triaxis::cpu::pack_bf16(&[1.0, 1.0]);
    t::add_bf16(
        &mut o,
        &triaxis::cpu::pack_bf16(&[1.0 / 256.0, 3.0 / 256.0]),
    );
    assert_eq!(triaxis::cpu::unpack_bf16(&o, 2), vec![1.0, 1.015625]);
}

#[test]
fn short_views_are_config_errors() {
    let Some(g) = test_device() else { return };
    let (w2, w3) = (g.buffer("w2", 2), g.buffer("w3", 3));
    // n = 5 needs 3 words per operand
    assert_config(
        "gelu out",
        k::gelu_forward(&g, BF16, &w2, &w3, 5),
        &["gelu bf16 out", "3"],
    );
    assert_config(
        "gelu inp",
        k::gelu_forward(&g, BF16, &w3, &w2, 5),
        &["gelu bf16 inp"],
    );
    assert_config(
        "gelu dinp",
        k::gelu_backward(&g, BF16, &w2, &w3, &w3, 5),
        &["gelu bf16 dinp"],
    );
    assert_config(
        "gelu bwd inp",
        k::gelu_backward(&g, BF16, &w3, &w2, &w3, 5),
        &["gelu bf16 inp"],
    );
    assert_config(
        "gelu dout",
        k::gelu_backward(&g, BF16, &w3, &w3, &w2, 5),
        &["gelu bf16 dout"],
    );
    assert_config(
        "residual b",
        k::residual_forward(&g, BF16, &w3, &w3, &w2, 5),
        &["residual bf16 b"],
    );
    assert_config("add a", k::add(&g, BF16, &w3, &w2), &["add bf16 a"]);
    assert_config("copy a", k::copy(&g, BF16, &w3, &w2), &["copy bf16 a"]);
    assert!(k::gelu_forward(&g, BF16, &w3, &w3, 5).is_ok());
    assert!(k::gelu_forward(&g, BF16, &w3, &w3, 6).is_ok());
    assert!(k::gelu_backward(&g, BF16, &w3, &w3, &w3, 6).is_ok());
    assert!(k::residual_forward(&g, BF16, &w3, &w3, &w3, 5).is_ok());
    assert!(k::add(&g, BF16, &w2, &w3).is_ok());
    assert!(k::copy(&g, BF16, &w2, &w3).is_ok());
    assert!(k::fill(&g, BF16, &w2, 1.0).is_ok());
}
