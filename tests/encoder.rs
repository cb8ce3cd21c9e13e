//! Embedding kernels vs their CPU twins: forward output poisoned first; the backward's
//! accumulated dwte/dwpe pre-filled with random values. The backward sums in the twin's order,
//! so it must match bit for bit.
mod common;
mod twins;
use common::*;
use triaxis::precision::Precision::F32;
use triaxis::{gpu, kernels::encoder as k, rng::Rng};
use twins as cpu;

// (B, T, C, V, maxT): odd, prime, one-element and tile-crossing shapes
const SHAPES: [(usize, usize, usize, usize, usize); 9] = [
    (1, 1, 1, 1, 1),
    (1, 7, 7, 3, 9),
    (2, 7, 33, 5, 7),
    (3, 33, 65, 16, 40),
    (7, 1, 7, 300, 4),
    (1, 65, 300, 7, 65),
    (4, 65, 33, 300, 70),
    (8, 128, 64, 5000, 128),
    (3, 100, 4, 50, 100),
];

#[test]
fn encoder_forward_backward_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(21);
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
        let wte = rand(&mut rng, v * c);
        let wpe = rand(&mut rng, max_t * c);
        let (tb, wteb, wpeb, out) = (
            buf_u32(&g, &tokens),
            buf(&g, &wte),
            buf(&g, &wpe),
            poisoned(&g, n * c),
        );
        g.run(&k::encoder_forward(&g, F32, &out, &tb, &wteb, &wpeb, b, t, c).unwrap())
            .unwrap();
        let mut want = vec![0.0; n * c];
        cpu::encoder_forward(&mut want, &tokens, &wte, &wpe, b, t, c);
        let name = format!("encoder B={b} T={t} C={c} V={v}");
        check(
            &format!("{name} forward"),
            &g.download::<f32>(&out).unwrap(),
            &want,
            0.0,
        );

        let dout = rand(&mut rng, n * c);
        let (mut dwte, mut dwpe) = (rand(&mut rng, v * c), rand(&mut rng, max_t * c));
        let (dwteb, dwpeb, doutb) = (buf(&g, &dwte), buf(&g, &dwpe), buf(&g, &dout));
        let ops = k::encoder_backward(&g, F32, &dwteb, &dwpeb, &doutb, &tb, b, t, c, v).unwrap();
        assert_eq!(ops.len(), 2);
        // Twice: the ops replay, and the result repeats.
        g.run(&ops).unwrap();
        g.run(&ops).unwrap();
        for _ in 0..2 {
            cpu::encoder_backward(&mut dwte, &mut dwpe, &dout, &tokens, b, t, c);
        }
        check(
            &format!("{name} dwte"),
            &g.download::<f32>(&dwteb).unwrap(),
            &dwte,
            0.0,
        );
        check(
            &format!("{name} dwpe"),
            &g.download::<f32>(&dwpeb).unwrap(),
            &dwpe,
            0.0,
        );
        // New tokens into the same buffer: the replayed ops' scratch holds the old positions.
        let tokens2: Vec<u32> = (0..n).map(|i| ((i * 7 + 3) % v.min(5)) as u32).collect();
        g.upload(&tb, &tokens2).unwrap();
        g.run(&ops).unwrap();
        cpu::encoder_backward(&mut dwte, &mut dwpe, &dout, &tokens2, b, t, c);
        let got = g.download::<f32>(&dwteb).unwrap();
        check(&format!("{name} dwte, new tokens"), &got, &dwte, 0.0);
    }
}

#[test]
fn encoder_bad_sizes_are_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let x = g.buffer("x", 64);
    let tok = g.buffer("tok", 8);
    assert!(k::encoder_forward(&g, F32, &x, &tok, &x, &x, 2, 4, 0).is_err());
    assert!(k::encoder_forward(&g, F32, &x, &tok, &x, &x, 2, 0, 4).is_err());
    assert!(k::encoder_forward(&g, F32, &x, &tok, &x, &x, 3, 4, 4).is_err()); // tokens 12 > 8
    assert!(k::encoder_forward(&g, F32, &x, &tok, &x, &x, 2, 4, 16).is_err()); // out 128 > 64
    assert!(k::encoder_forward(&g, F32, &x, &tok, &x, &x, 1, 4, 80).is_err()); // wte < one row
    assert!(k::encoder_forward(&g, F32, &x, &tok, &x, &x, usize::MAX, 4, 4).is_err());
    assert!(k::encoder_backward(&g, F32, &x, &x, &x, &tok, 2, 4, 4, 17).is_err()); // dwte 68 > 64
    assert!(k::encoder_backward(&g, F32, &x, &x, &x, &tok, 2, 4, 4, 16).is_ok());
}

#[test]
fn encoder_token_out_of_range() {
    let Some(g) = gpu::test_gpu() else { return };
    let (b, t, c, v) = (1, 2, 4, 3);
    let tb = buf_u32(&g, &[1, 3]);
    let (wte, wpe) = (buf(&g, &vec![1.0; v * c]), buf(&g, &vec![2.0; t * c]));
    let out = poisoned(&g, b * t * c);
    g.run(&k::encoder_forward(&g, F32, &out, &tb, &wte, &wpe, b, t, c).unwrap())
        .unwrap();
    let o = g.download::<f32>(&out).unwrap();
    assert!(o[..c].iter().all(|&x| x == 3.0), "valid token row: {o:?}");
    assert!(
        o[c..].iter().all(|x| x.is_nan()),
        "token ≥ V: NaN row: {o:?}"
    );
    // The backward skips it: dwte stays as it was, dwpe still accumulates.
    let (dwte, dwpe, dout) = (
        buf(&g, &vec![0.0; v * c]),
        buf(&g, &vec![0.0; t * c]),
        buf(&g, &vec![1.0; b * t * c]),
    );
    g.run(&k::encoder_backward(&g, F32, &dwte, &dwpe, &dout, &tb, b, t, c, v).unwrap())
        .unwrap();
    let dw = g.download::<f32>(&dwte).unwrap();
    assert_eq!(
        dw,
        [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(g.download::<f32>(&dwpe).unwrap(), vec![1.0; t * c]);
}
