//! LayerNorm in bf16 vs its twin (`cpu::packed::norm`) on awkward even-c shapes: forward
//! outputs poisoned first (out as poisoned words, mean/rstd as f32 NaN); the backward's
//! accumulated dinp, dweight, dbias pre-filled with random bf16. bf16 outputs bit-identical to
//! the twin's, as docs/precision.md claims (465,760 of 465,760 on lavapipe and llvmpipe GL);
//! mean/rstd within the f32 family's tolerances; every result repeated bit for bit; odd c
//! refused.
mod common;
mod twins;
use common::packed::*;
use common::*;
use triaxis::cpu::{pack_bf16, unpack_bf16};
use triaxis::kernels::norm as k;
use triaxis::memory::Category;
use triaxis::precision::Precision::Bf16;
use triaxis::rng::Rng;
use twins::packed::norm as t;

// direct (n ≤ 256) and chunked column sums, a partial last chunk, c = 2 up to 768
const SHAPES: [(usize, usize); 13] = [
    (1, 2),
    (1, 8),
    (7, 2),
    (7, 34),
    (33, 66),
    (65, 6),
    (256, 10),
    (300, 34),
    (33, 300),
    (65, 768),
    (300, 64),
    (1000, 20),
    (257, 2),
];

#[test]
fn layernorm_forward_backward_match_twin() {
    let Some(g) = test_device() else { return };
    println!("adapter: {} ({:?})", g.info.name, g.info.backend);
    let mut rng = Rng::new(111);
    let mut tally = Tally::default();
    for (n, c) in SHAPES {
        let (nw, cw) = (n * c / 2, c / 2);
        let xf: Vec<f32> = rng.vec(n * c, 3.0).iter().map(|v| v + 0.5).collect();
        let (x, w, bias) = (
            pack_bf16(&xf),
            packed(&mut rng, c, 1.0),
            packed(&mut rng, c, 1.0),
        );
        let (xb, wb, bb) = (buf_u32(&g, &x), buf_u32(&g, &w), buf_u32(&g, &bias));
        let (mut o, mut m, mut s) = (vec![0; nw], vec![0.0; n], vec![0.0; n]);
        t::layernorm_forward_bf16(&mut o, &mut m, &mut s, &x, &w, &bias, n, c);
        let name = format!("layernorm_forward_bf16 n={n} c={c}");
        let mut first: Option<(Vec<u32>, Vec<f32>, Vec<f32>)> = None;
        for _ in 0..2 {
            let (out, mean, rstd) = (poisoned_words(&g, nw), poisoned(&g, n), poisoned(&g, n));
            g.run(
                &k::layernorm_forward(&g, Bf16, &out, &mean, &rstd, &xb, &wb, &bb, n, c).unwrap(),
            )
            .unwrap();
            let got = (
                g.download::<u32>(&out).unwrap(),
                g.download::<f32>(&mean).unwrap(),
                g.download::<f32>(&rstd).unwrap(),
            );
            match &first {
                None => first = Some(got),
                Some(f) => assert!(
                    f.0 == got.0 && bits(&f.1) == bits(&got.1) && bits(&f.2) == bits(&got.2),
                    "{name}: repeat differs"
                ),
            }
        }
        let (go, gm, gs) = first.unwrap();
        tally.exact(&name, &go, &o);
        check(&format!("{name} mean"), &gm, &m, 1e-5);
        check(&format!("{name} rstd"), &gs, &s, 1e-4);

        // Backward from the twin's mean/rstd, into random pre-filled accumulators.
        let dy = packed(&mut rng, n * c, 1.0);
        let (di0, dw0, db0) = (
            packed(&mut rng, n * c, 1.0),
            packed(&mut rng, c, 1.0),
            packed(&mut rng, c, 1.0),
        );
        let (dyb, mb, sb) = (buf_u32(&g, &dy), buf(&g, &m), buf(&g, &s));
        let (dib, dwb, dbb) = (buf_u32(&g, &di0), buf_u32(&g, &dw0), buf_u32(&g, &db0));
        let backward =
            || k::layernorm_backward(&g, Bf16, &dib, &dwb, &dbb, &dyb, &xb, &wb, &mb, &sb, n, c);
        if n > 256 {
            // the f32 partials [2, ⌈n/64⌉, c] are allocated in the workspace category (read
            // from the buffers: texture copies would be workspace too)
            let reads = g.texture_reads();
            g.set_texture_reads(false).unwrap();
            g.reset_memory_peaks();
            let before = g.memory().current.get(Category::Workspace);
            drop(backward().unwrap());
            let part = (2 * n.div_ceil(64) * c * 4) as u64;
            assert_eq!(g.memory().peak.get(Category::Workspace) - before, part);
            g.set_texture_reads(reads).unwrap();
        }
        let ops = backward().unwrap();
        assert_eq!(dispatches(&ops), if n <= 256 { 2 } else { 3 });
        let name = format!("layernorm_backward_bf16 n={n} c={c}");
        let mut first: Option<[Vec<u32>; 3]> = None;
        for _ in 0..2 {
            g.upload(&dib, &di0).unwrap();
            g.upload(&dwb, &dw0).unwrap();
            g.upload(&dbb, &db0).unwrap();
            g.run(&ops).unwrap();
            let got = [&dib, &dwb, &dbb].map(|v| g.download::<u32>(v).unwrap());
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(f, &got, "{name}: repeat differs"),
            }
        }
        let (mut di, mut dw, mut db) = (di0.clone(), dw0.clone(), db0.clone());
        t::layernorm_backward_bf16(&mut di, &mut dw, &mut db, &dy, &x, &w, &m, &s, n, c);
        let [gi, gw, gb] = first.unwrap();
        tally.exact(&format!("{name} dinp"), &gi, &di);
        tally.exact(&format!("{name} dweight"), &gw, &dw);
        tally.exact(&format!("{name} dbias"), &gb, &db);
        assert_eq!(gi.len(), nw);
        assert_eq!((gw.len(), gb.len()), (cw, cw));
    }
    tally.finish("layernorm");
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn twin_rounds_the_f32_twin() {
    // c = 2, one row [1, 3]: mean 2, var 1, norm ±(1 − ε/2…); weight 1, bias 0.5
    let (x, w, b) = (
        pack_bf16(&[1.0, 3.0]),
        pack_bf16(&[1.0, 1.0]),
        pack_bf16(&[0.5, 0.5]),
    );
    let (mut o, mut m, mut s) = ([0u32], [0.0f32], [0.0f32]);
    t::layernorm_forward_bf16(&mut o, &mut m, &mut s, &x, &w, &b, 1, 2);
    assert_eq!(m, [2.0]);
    let mut of = [0.0; 2];
    let (mut mf, mut sf) = ([0.0], [0.0]);
    twins::layernorm_forward(
        &mut of,
        &mut mf,
        &mut sf,
        &[1.0, 3.0],
        &[1.0; 2],
        &[0.5; 2],
        1,
        2,
    );
    assert_eq!(o.to_vec(), pack_bf16(&of));
    assert_eq!(unpack_bf16(&o, 2), vec![-0.5, 1.5]);
    assert_eq!((s[0].to_bits()), sf[0].to_bits());
}

#[test]
fn odd_c_and_short_views_are_config_errors() {
    let Some(g) = test_device() else { return };
    let v = g.buffer("x", 64);
    let small = g.buffer("s", 3);
    for c in [1, 7, 33] {
        assert_config(
            "forward odd c",
            k::layernorm_forward(&g, Bf16, &v, &v, &v, &v, &v, &v, 2, c),
            &["even", &format!("c = {c}")],
        );
        assert_config(
            "backward odd c",
            k::layernorm_backward(&g, Bf16, &v, &v, &v, &v, &v, &v, &v, &v, 2, c),
            &["even"],
        );
    }
    assert_config(
        "c = 0",
        k::layernorm_forward(&g, Bf16, &v, &v, &v, &v, &v, &v, 4, 0),
        &["c"],
    );
    // n·c/2 = 72 words > 64
    assert_config(
        "out words",
        k::layernorm_forward(&g, Bf16, &v, &v, &v, &v, &v, &v, 9, 16),
        &["layernorm bf16 out", "u32 words"],
    );
    assert_config(
        "mean",
        k::layernorm_forward(&g, Bf16, &v, &small, &v, &v, &v, &v, 4, 16),
        &["layernorm bf16 mean"],
    );
    // weight of c = 8 needs 4 words
    assert_config(
        "weight",
        k::layernorm_forward(&g, Bf16, &v, &v, &v, &v, &small, &v, 2, 8),
        &["layernorm bf16 weight"],
    );
    assert!(k::layernorm_forward(&g, Bf16, &v, &v, &v, &v, &small, &v, 2, 6).is_ok());
    assert_config(
        "too big",
        k::layernorm_forward(&g, Bf16, &v, &v, &v, &v, &v, &v, usize::MAX, 2),
        &["exceeds u32"],
    );
    assert_config(
        "dweight",
        k::layernorm_backward(&g, Bf16, &v, &small, &v, &v, &v, &v, &v, &v, 4, 8),
        &["layernorm bf16 dweight"],
    );
    assert_config(
        "rstd",
        k::layernorm_backward(&g, Bf16, &v, &v, &v, &v, &v, &v, &v, &small, 4, 8),
        &["layernorm bf16 rstd"],
    );
    assert_config(
        "dout words",
        k::layernorm_backward(&g, Bf16, &v, &v, &v, &small, &v, &v, &v, &v, 4, 8),
        &["layernorm bf16 dout"],
    );
    assert!(k::layernorm_backward(&g, Bf16, &v, &v, &v, &v, &v, &v, &v, &v, 4, 8).is_ok());
    assert!(k::layernorm_backward(&g, Bf16, &v, &v, &v, &v, &v, &v, &v, &v, 8, 16).is_ok());
}
