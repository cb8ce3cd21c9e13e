//! Packed-bf16 embedding kernels vs their twins (`cpu::packed::encoder`): forward output
//! poisoned first; the backward's accumulated dwte/dwpe pre-filled with random bf16. Both
//! directions compute each element in the twin's order with one rounding, so they must match
//! bit for bit (stricter than the 1-ulp rule of the other packed families); replays repeat;
//! odd c is refused.
mod common;
mod twins;
use common::packed::*;
use common::*;
use triaxis::cpu::pack_bf16;
use triaxis::kernels::encoder as k;
use triaxis::precision::Precision::Bf16 as BF16;
use triaxis::rng::Rng;
use twins::packed::encoder as t;

// (B, T, C, V, maxT), C even: one channel pair, odd word counts per row, maxT > T, big V
const SHAPES: [(usize, usize, usize, usize, usize); 10] = [
    (1, 1, 2, 1, 1),
    (1, 7, 8, 3, 9),
    (2, 7, 34, 5, 7),
    (3, 33, 66, 16, 40),
    (7, 1, 2, 300, 4),
    (1, 65, 300, 7, 65),
    (4, 65, 34, 300, 70),
    (8, 128, 64, 5000, 128),
    (3, 100, 4, 50, 100),
    (2, 3, 6, 4, 3),
];

#[test]
fn encoder_forward_backward_match_twin_exactly() {
    let Some(g) = test_device() else { return };
    println!("adapter: {} ({:?})", g.info.name, g.info.backend);
    let mut rng = Rng::new(121);
    let mut tally = Tally::default();
    for (b, t, c, v, max_t) in SHAPES {
        let n = b * t;
        // Skewed tokens: many repeats of a few ids plus a spread of others.
        let tokens: Vec<u32> = (0..n)
            .map(|_| {
                if rng.uniform() < 0.5 {
                    rng.below(v.min(3) as u64) as u32
                } else {
                    rng.below(v as u64) as u32
                }
            })
            .collect();
        let wte = packed(&mut rng, v * c, 1.0);
        let wpe = packed(&mut rng, max_t * c, 1.0);
        let (tb, wteb, wpeb) = (buf_u32(&g, &tokens), buf_u32(&g, &wte), buf_u32(&g, &wpe));
        let mut want = vec![0; n * c / 2];
        t::encoder_forward_bf16(&mut want, &tokens, &wte, &wpe, b, t, c);
        let name = format!("encoder bf16 B={b} T={t} C={c} V={v}");
        for _ in 0..2 {
            let out = poisoned_words(&g, n * c / 2);
            g.run(&k::encoder_forward(&g, BF16, &out, &tb, &wteb, &wpeb, b, t, c).unwrap())
                .unwrap();
            tally.exact(
                &format!("{name} forward"),
                &g.download::<u32>(&out).unwrap(),
                &want,
            );
        }

        let dout = packed(&mut rng, n * c, 1.0);
        let (mut dwte, mut dwpe) = (
            packed(&mut rng, v * c, 1.0),
            packed(&mut rng, max_t * c, 1.0),
        );
        let (dwteb, dwpeb, doutb) = (buf_u32(&g, &dwte), buf_u32(&g, &dwpe), buf_u32(&g, &dout));
        let ops = k::encoder_backward(&g, BF16, &dwteb, &dwpeb, &doutb, &tb, b, t, c, v).unwrap();
        assert_eq!(ops.len(), 2);
        // Twice: the ops replay, each run rounding once per element, as the twin run twice.
        g.run(&ops).unwrap();
        g.run(&ops).unwrap();
        for _ in 0..2 {
            t::encoder_backward_bf16(&mut dwte, &mut dwpe, &dout, &tokens, b, t, c);
        }
        tally.exact(
            &format!("{name} dwte"),
            &g.download::<u32>(&dwteb).unwrap(),
            &dwte,
        );
        tally.exact(
            &format!("{name} dwpe"),
            &g.download::<u32>(&dwpeb).unwrap(),
            &dwpe,
        );
        // New tokens into the same buffer: the replayed ops' scratch holds the old positions.
        let tokens2: Vec<u32> = (0..n).map(|i| ((i * 7 + 3) % v.min(5)) as u32).collect();
        g.upload(&tb, &tokens2).unwrap();
        g.run(&ops).unwrap();
        t::encoder_backward_bf16(&mut dwte, &mut dwpe, &dout, &tokens2, b, t, c);
        let got = g.download::<u32>(&dwteb).unwrap();
        tally.exact(&format!("{name} dwte, new tokens"), &got, &dwte);
        println!("{name}: forward, dwte, dwpe bit for bit");
    }
    tally.finish("encoder");
}

#[test]
fn odd_c_and_short_views_are_config_errors() {
    let Some(g) = test_device() else { return };
    let x = g.buffer("x", 64);
    let tok = g.buffer("tok", 8);
    for c in [1, 3, 7] {
        assert_config(
            "forward odd c",
            k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 2, 4, c),
            &["even", &format!("c = {c}")],
        );
        assert_config(
            "backward odd c",
            k::encoder_backward(&g, BF16, &x, &x, &x, &tok, 2, 4, c, 4),
            &["even"],
        );
    }
    assert_config(
        "c = 0",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 2, 4, 0),
        &["c = 0"],
    );
    assert_config(
        "t = 0",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 2, 0, 4),
        &["t = 0"],
    );
    assert_config(
        "tokens",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 3, 4, 4),
        &["encoder bf16 tokens"],
    ); // 12 > 8
    assert_config(
        "out",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 2, 4, 32),
        &["encoder bf16 out", "u32 words"],
    ); // 128 words > 64
    assert_config(
        "wte row",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 1, 4, 130),
        &["fewer than one row"],
    ); // 65 words per row > 64
    assert_config(
        "wpe",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &g.buffer("wpe", 7), 2, 4, 4),
        &["encoder bf16 wpe"],
    ); // 8 words > 7
    assert_config(
        "too big",
        k::encoder_forward(&g, BF16, &x, &tok, &x, &x, usize::MAX, 4, 4),
        &["exceeds u32"],
    );
    // V·C/2 = 34·4/2 = 68 words > 64
    assert_config(
        "dwte",
        k::encoder_backward(&g, BF16, &x, &x, &x, &tok, 2, 4, 4, 33),
        &["encoder bf16 dwte"],
    );
    assert_config(
        "dwpe",
        k::encoder_backward(&g, BF16, &x, &g.buffer("wpe", 7), &x, &tok, 2, 4, 4, 32),
        &["encoder bf16 dwpe"],
    );
    assert!(k::encoder_forward(&g, BF16, &x, &tok, &x, &x, 2, 4, 16).is_ok());
    assert!(k::encoder_backward(&g, BF16, &x, &x, &x, &tok, 2, 4, 4, 32).is_ok());
}

#[test]
fn encoder_token_out_of_range() {
    let Some(g) = test_device() else { return };
    let (b, t, c, v) = (1, 2, 4, 3);
    let tb = buf_u32(&g, &[1, 3]);
    let (wte, wpe) = (
        buf_u32(&g, &pack_bf16(&vec![1.0; v * c])),
        buf_u32(&g, &pack_bf16(&vec![2.0; t * c])),
    );
    let out = poisoned_words(&g, b * t * c / 2);
    g.run(&k::encoder_forward(&g, BF16, &out, &tb, &wte, &wpe, b, t, c).unwrap())
        .unwrap();
    let o = g.download::<u32>(&out).unwrap();
    assert_eq!(o[..2], pack_bf16(&[3.0; 4])[..], "valid token row");
    assert_eq!(o[2..], [0x7fc0_7fc0; 2], "token ≥ V: quiet-NaN row");
    // The backward skips it: dwte stays as it was, dwpe still accumulates.
    let (dwte, dwpe, dout) = (
        buf_u32(&g, &vec![0; v * c / 2]),
        buf_u32(&g, &vec![0; t * c / 2]),
        buf_u32(&g, &pack_bf16(&vec![1.0; b * t * c])),
    );
    g.run(&k::encoder_backward(&g, BF16, &dwte, &dwpe, &dout, &tb, b, t, c, v).unwrap())
        .unwrap();
    let one = pack_bf16(&[1.0, 1.0])[0];
    assert_eq!(g.download::<u32>(&dwte).unwrap(), [0, 0, one, one, 0, 0]);
    assert_eq!(g.download::<u32>(&dwpe).unwrap(), [one; 4]);
}
