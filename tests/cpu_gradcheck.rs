//! Every CPU backward twin (src/cpu.rs) against central finite differences of its forward.
//!
//! For a random projection r, L(x) = Σ out(x)·r (f32 outputs summed in f64); the analytic
//! gradient is the backward fed dout = r, the numeric one (L(x+h) − L(x−h)) / 2h per element of
//! every input. Accumulating gradients (+=) start from random values that are subtracted after,
//! assigned ones (=) from garbage, so the documented semantics are checked too. No GPU needed.
mod twins;

use triaxis::rng::Rng;
use twins as cpu;

/// Step and tolerances: |numeric − analytic| ≤ RTOL·|analytic| + ATOL·max|analytic|.
const H: f32 = 1e-2;
const RTOL: f64 = 2e-3;
const ATOL: f64 = 5e-4;
/// The value assigned gradient outputs start from (must be overwritten).
const GARBAGE: f32 = 1.0e3;

/// Σ out·r in f64.
fn project(out: &[f32], r: &[f32]) -> f64 {
    out.iter().zip(r).map(|(&o, &w)| o as f64 * w as f64).sum()
}

/// Central differences of `loss` at `x`, one element at a time.
fn numeric(x: &[f32], loss: impl Fn(&[f32]) -> f64) -> Vec<f64> {
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            xp[i] = x[i] + H;
            let (hi, lp) = (xp[i], loss(&xp));
            xp[i] = x[i] - H;
            let (lo, lm) = (xp[i], loss(&xp));
            xp[i] = x[i];
            (lp - lm) / (hi as f64 - lo as f64)
        })
        .collect()
}

/// Compares numeric and analytic gradients; prints and returns the worst error relative to
/// max|analytic|.
fn compare(name: &str, num: &[f64], ana: &[f32]) -> f64 {
    assert_eq!(num.len(), ana.len(), "{name}: length");
    let scale = ana.iter().fold(0.0f64, |m, &a| m.max(a.abs() as f64));
    assert!(scale > 0.0, "{name}: analytic gradient is all zero");
    let mut worst = 0.0f64;
    for (i, (&n, &a)) in num.iter().zip(ana).enumerate() {
        let a = a as f64;
        let err = (n - a).abs();
        assert!(
            err <= RTOL * a.abs() + ATOL * scale,
            "{name}[{i}]: numeric {n:.6e} analytic {a:.6e} (err {err:.2e}, max|grad| {scale:.2e})"
        );
        worst = worst.max(err / scale);
    }
    println!(
        "{name}: n={} max|grad| {scale:.3e}, max err / max|grad| {worst:.2e}",
        num.len()
    );
    worst
}

/// A gradient buffer prefilled with random values, and the function that recovers what the
/// backward added to it.
fn accumulator(rng: &mut Rng, n: usize) -> (Vec<f32>, impl Fn(&[f32]) -> Vec<f32>) {
    let start = rng.vec(n, 1.0);
    let s = start.clone();
    (start, move |after: &[f32]| {
        after.iter().zip(&s).map(|(a, b)| a - b).collect()
    })
}

#[test]
fn encoder_backward_matches_differences() {
    let mut rng = Rng::new(11);
    let (b, t, c, v) = (2, 3, 4, 5);
    let tokens = [1u32, 3, 1, 4, 1, 0]; // repeats: gradients of one row must add up
    let (wte, wpe) = (rng.vec(v * c, 1.0), rng.vec(t * c, 1.0));
    let r = rng.vec(b * t * c, 1.0);
    let fwd = |wte: &[f32], wpe: &[f32]| {
        let mut out = vec![0.0; b * t * c];
        cpu::encoder_forward(&mut out, &tokens, wte, wpe, b, t, c);
        project(&out, &r)
    };
    let (mut dwte, added_wte) = accumulator(&mut rng, v * c);
    let (mut dwpe, added_wpe) = accumulator(&mut rng, t * c);
    cpu::encoder_backward(&mut dwte, &mut dwpe, &r, &tokens, b, t, c);
    compare(
        "encoder dwte",
        &numeric(&wte, |x| fwd(x, &wpe)),
        &added_wte(&dwte),
    );
    compare(
        "encoder dwpe",
        &numeric(&wpe, |x| fwd(&wte, x)),
        &added_wpe(&dwpe),
    );
}

#[test]
fn layernorm_backward_matches_differences() {
    let mut rng = Rng::new(12);
    let (n, c) = (3, 5);
    let inp: Vec<f32> = rng.vec(n * c, 2.0).iter().map(|x| x + 0.5).collect();
    let (weight, bias) = (rng.vec(c, 1.5), rng.vec(c, 1.0));
    let r = rng.vec(n * c, 1.0);
    let fwd = |inp: &[f32], weight: &[f32], bias: &[f32]| {
        let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        cpu::layernorm_forward(&mut out, &mut mean, &mut rstd, inp, weight, bias, n, c);
        (project(&out, &r), mean, rstd)
    };
    let (_, mean, rstd) = fwd(&inp, &weight, &bias);
    let (mut dinp, added_inp) = accumulator(&mut rng, n * c);
    let (mut dweight, added_weight) = accumulator(&mut rng, c);
    let (mut dbias, added_bias) = accumulator(&mut rng, c);
    cpu::layernorm_backward(
        &mut dinp,
        &mut dweight,
        &mut dbias,
        &r,
        &inp,
        &weight,
        &mean,
        &rstd,
        n,
        c,
    );
    compare(
        "layernorm dinp",
        &numeric(&inp, |x| fwd(x, &weight, &bias).0),
        &added_inp(&dinp),
    );
    compare(
        "layernorm dweight",
        &numeric(&weight, |x| fwd(&inp, x, &bias).0),
        &added_weight(&dweight),
    );
    compare(
        "layernorm dbias",
        &numeric(&bias, |x| fwd(&inp, &weight, x).0),
        &added_bias(&dbias),
    );
}

#[test]
fn matmul_backward_matches_differences() {
    let mut rng = Rng::new(13);
    for (n, c, oc) in [(3, 4, 5), (1, 6, 2)] {
        let inp = rng.vec(n * c, 1.0);
        let weight = rng.vec(oc * c, 1.0);
        let bias = rng.vec(oc, 1.0);
        let r = rng.vec(n * oc, 1.0);
        let fwd = |inp: &[f32], weight: &[f32], bias: Option<&[f32]>| {
            let mut out = vec![0.0; n * oc];
            cpu::matmul_forward(&mut out, inp, weight, bias, n, c, oc);
            project(&out, &r)
        };
        // with bias
        let mut dinp = vec![GARBAGE; n * c];
        let (mut dweight, added_weight) = accumulator(&mut rng, oc * c);
        let (mut dbias, added_bias) = accumulator(&mut rng, oc);
        cpu::matmul_backward(
            &mut dinp,
            &mut dweight,
            Some(&mut dbias),
            &r,
            &inp,
            &weight,
            n,
            c,
            oc,
        );
        let name = format!("matmul n={n} c={c} oc={oc}");
        compare(
            &format!("{name} dinp"),
            &numeric(&inp, |x| fwd(x, &weight, Some(&bias))),
            &dinp,
        );
        compare(
            &format!("{name} dweight"),
            &numeric(&weight, |x| fwd(&inp, x, Some(&bias))),
            &added_weight(&dweight),
        );
        compare(
            &format!("{name} dbias"),
            &numeric(&bias, |x| fwd(&inp, &weight, Some(x))),
            &added_bias(&dbias),
        );
        // without bias: same dinp and dweight
        let mut dinp = vec![GARBAGE; n * c];
        let (mut dweight, added_weight) = accumulator(&mut rng, oc * c);
        cpu::matmul_backward(&mut dinp, &mut dweight, None, &r, &inp, &weight, n, c, oc);
        compare(
            &format!("{name} no bias dinp"),
            &numeric(&inp, |x| fwd(x, &weight, None)),
            &dinp,
        );
        compare(
            &format!("{name} no bias dweight"),
            &numeric(&weight, |x| fwd(&inp, x, None)),
            &added_weight(&dweight),
        );
    }
}

#[test]
fn attention_backward_matches_differences() {
    let mut rng = Rng::new(14);
    // (b, t, c, nh): hs = 3, 4, 1
    for (b, t, c, nh) in [(2, 4, 6, 2), (1, 5, 8, 2), (1, 3, 2, 2)] {
        let qkv = rng.vec(b * t * 3 * c, 1.5);
        let r = rng.vec(b * t * c, 1.0);
        let fwd = |qkv: &[f32]| {
            let mut out = vec![0.0; b * t * c];
            let mut att = vec![0.0; b * nh * t * t];
            cpu::attention_forward(&mut out, &mut att, qkv, b, t, c, nh);
            (project(&out, &r), att)
        };
        let (_, att) = fwd(&qkv);
        let mut dqkv = vec![GARBAGE; b * t * 3 * c];
        cpu::attention_backward(&mut dqkv, &r, &qkv, &att, b, t, c, nh);
        compare(
            &format!("attention b={b} t={t} c={c} nh={nh} dqkv"),
            &numeric(&qkv, |x| fwd(x).0),
            &dqkv,
        );
    }
}

#[test]
fn gelu_backward_matches_differences() {
    let mut rng = Rng::new(15);
    let n = 33;
    let inp = rng.vec(n, 4.0);
    let r = rng.vec(n, 1.0);
    let fwd = |inp: &[f32]| {
        let mut out = vec![0.0; n];
        cpu::gelu_forward(&mut out, inp);
        project(&out, &r)
    };
    let mut dinp = vec![GARBAGE; n];
    cpu::gelu_backward(&mut dinp, &inp, &r);
    compare("gelu dinp", &numeric(&inp, fwd), &dinp);
}

#[test]
fn crossentropy_backward_matches_differences() {
    let mut rng = Rng::new(16);
    let (n, v) = (3, 7);
    let logits = rng.vec(n * v, 3.0);
    let targets = [2u32, 0, 6];
    let dloss = 1.0 / n as f32; // L = mean loss
    let fwd = |logits: &[f32]| {
        let (mut losses, mut dlogits) = (vec![0.0; n], vec![0.0; n * v]);
        cpu::crossentropy_forward_backward(
            &mut losses,
            &mut dlogits,
            logits,
            &targets,
            n,
            v,
            dloss,
        );
        (losses, dlogits)
    };
    let (losses, dlogits) = fwd(&logits);
    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0));
    let mut assigned = vec![GARBAGE; n * v];
    let mut l2 = vec![0.0; n];
    cpu::crossentropy_forward_backward(&mut l2, &mut assigned, &logits, &targets, n, v, dloss);
    assert_eq!(assigned, dlogits, "dlogits must be assigned");
    let mean = |x: &[f32]| fwd(x).0.iter().map(|&l| l as f64).sum::<f64>() / n as f64;
    compare("crossentropy dlogits", &numeric(&logits, mean), &dlogits);
}
