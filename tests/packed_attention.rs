//! Attention in bf16 vs its twins (the f32 twins on unpacked values), compared as bf16 values:
//! at least 99 % bit-identical and every element within 1 bf16 ulp (see `check_bf16` for the
//! near-zero floor). Shapes cover both paths (register-tiled, hs % 4 == 0; scalar, hs = 2, 6),
//! T = 2, odd T, T not a multiple of 4 (the tile) nor of the workgroups, rows spilling past one
//! workgroup, a partial chunk tile and GPT-2's heads. Outputs and the f32 rows scratch are
//! poisoned first; views inside larger buffers; a bit-identical repeat; odd head sizes and short
//! views are refused.
mod common;
mod twins;
use common::*;
use triaxis::precision::Precision;
use triaxis::{gpu, kernels::attention as k, rng::Rng, Error, View};
use twins as cpu;
use twins::packed::attention as twin;

const P: Precision = Precision::Bf16;

/// A word no kernel writes: both halves are signalling NaNs, which no rounding produces.
const POISON_WORD: u32 = 0x7f81_ff81;

/// (b, t, c, nh): hs = c / nh, even.
const SHAPES: [(usize, usize, usize, usize); 16] = [
    (1, 2, 2, 1),      // T = 2, hs 2
    (2, 2, 8, 2),      // T = 2, hs 4
    (1, 4, 4, 2),      // hs 2
    (2, 6, 12, 3),     // hs 4, T not a multiple of 4
    (1, 34, 16, 2),    // hs 8
    (3, 10, 64, 4),    // hs 16
    (2, 66, 6, 3),     // hs 2
    (2, 100, 96, 2),   // hs 48
    (1, 258, 64, 1),   // rows past one workgroup, hs 64
    (1, 514, 8, 2),    // rows past one workgroup, two heads
    (2, 7, 12, 3),     // odd T, hs 4
    (1, 33, 6, 3),     // odd T, hs 2 (scalar path)
    (1, 128, 768, 12), // GPT-2 small heads
    (2, 18, 12, 2),    // hs 6 (scalar path)
    (1, 514, 4, 2),    // hs 2, rows past one workgroup (scalar path)
    (3, 14, 24, 1),    // hs 24: 6 chunks, a partial chunk tile
];

fn words(g: &gpu::Gpu, data: &[u32]) -> View {
    buf_u32(g, data)
}

fn poisoned_words(g: &gpu::Gpu, n: usize) -> View {
    buf_u32(g, &vec![POISON_WORD; n])
}

/// `n` (even) random bf16 uniform in [-a, a), packed.
fn rand_bf16(rng: &mut Rng, n: usize, a: f32) -> Vec<u32> {
    cpu::pack_bf16(&rng.vec(n, a))
}

/// bf16 bits → a key ordered like the values (±0 both 0), so adjacent bf16 differ by 1.
fn key(h: u16) -> i32 {
    let m = (h & 0x7fff) as i32;
    if h & 0x8000 != 0 {
        -m
    } else {
        m
    }
}

/// GPU vs twin packed words, element by element as bf16: at least 99 % bit-identical, none NaN
/// where the twin has none, and every element within 1 ulp, or, for results that cancel to
/// near zero, within an f32-noise floor of 1e-6 × the tensor's largest |value| (the f32 sums of
/// GPU and twin differ by a few f32 ulps of the terms, which can be many bf16 ulps of a
/// cancelled result: e.g. out −6.8e-6 in a tensor of |out| ≤ 2 came out 2 ulps apart).
fn check_bf16(name: &str, gpu: &[u32], cpu: &[u32]) {
    assert_eq!(gpu.len(), cpu.len(), "{name}: word count");
    let n = 2 * gpu.len();
    let half_at = |w: &[u32], i: usize| (w[i / 2] >> (16 * (i % 2))) as u16;
    let value = |h: u16| half::bf16::from_bits(h).to_f32();
    let nan = |h: u16| h & 0x7fff > 0x7f80;
    let scale = (0..n)
        .map(|i| value(half_at(cpu, i)).abs())
        .fold(0.0f32, f32::max);
    let floor = 1e-6 * scale;
    let (mut same, mut worst, mut floored) = (0usize, 0i32, 0usize);
    for i in 0..n {
        let (a, b) = (half_at(gpu, i), half_at(cpu, i));
        assert!(!nan(b), "{name}: twin element {i} is NaN");
        assert!(
            !nan(a),
            "{name}: element {i} not written or NaN: {a:#06x} (twin {b:#06x})"
        );
        let ulps = (key(a) - key(b)).abs();
        let diff = (value(a) - value(b)).abs();
        assert!(
            ulps <= 1 || diff <= floor,
            "{name}: element {i}: gpu {a:#06x} ({}) twin {b:#06x} ({}), {ulps} ulp apart \
             (floor {floor:e})",
            value(a),
            value(b)
        );
        same += usize::from(a == b);
        floored += usize::from(ulps > 1);
        worst = worst.max(ulps);
    }
    let frac = same as f64 / n as f64;
    println!(
        "{name}: n={n} bit-identical {:.4} %, max {worst} ulp, {floored} past 1 ulp under the \
         {floor:.1e} floor",
        100.0 * frac
    );
    assert!(
        frac >= 0.99,
        "{name}: only {:.3} % bit-identical",
        100.0 * frac
    );
}

struct Case {
    qkv: Vec<u32>,
    dout: Vec<u32>,
    out: Vec<u32>,
    att: Vec<u32>,
    dqkv: Vec<u32>,
}

/// Random packed inputs (scores spread enough that softmax rows are far from uniform) and the
/// twins' outputs; the backward twin reads the twin's packed att.
fn case(rng: &mut Rng, (b, t, c, nh): (usize, usize, usize, usize)) -> Case {
    let qkv = rand_bf16(rng, b * t * 3 * c, 2.0);
    let dout = rand_bf16(rng, b * t * c, 1.0);
    let mut out = vec![0; b * t * c / 2];
    let mut att = vec![0; (b * nh * t * t).div_ceil(2)];
    twin::attention_forward_bf16(&mut out, &mut att, &qkv, b, t, c, nh);
    let mut dqkv = vec![0; b * t * 3 * c / 2];
    twin::attention_backward_bf16(&mut dqkv, &dout, &qkv, &att, b, t, c, nh);
    Case {
        qkv,
        dout,
        out,
        att,
        dqkv,
    }
}

#[test]
fn forward_backward_match_twin() {
    let Some(g) = gpu::test_gpus(1).map(|mut v| v.remove(0)) else {
        return;
    };
    println!("adapter: {} ({:?})", g.info.name, g.info.backend);
    let mut rng = Rng::new(17);
    for (b, t, c, nh) in SHAPES {
        let want = case(&mut rng, (b, t, c, nh));
        let name = format!("attention_bf16 b={b} t={t} c={c} nh={nh}");
        let qkv = words(&g, &want.qkv);
        let dout = words(&g, &want.dout);
        let out = poisoned_words(&g, want.out.len());
        let att = poisoned_words(&g, want.att.len());
        let rows = buf(&g, &vec![f32::NAN; b * nh * t * t]);
        g.run(&k::attention_forward(&g, P, &out, &att, &rows, &qkv, b, t, c, nh).unwrap())
            .unwrap();
        let got_att = g.download::<u32>(&att).unwrap();
        check_bf16(
            &format!("{name} out"),
            &g.download::<u32>(&out).unwrap(),
            &want.out,
        );
        check_bf16(&format!("{name} att"), &got_att, &want.att);
        // The backward on the twin's att, so its check does not inherit the forward's flips.
        let att = words(&g, &want.att);
        let dqkv = poisoned_words(&g, want.dqkv.len());
        let scratch = buf(&g, &vec![f32::NAN; b * nh * t * t]);
        let ops = k::attention_backward(&g, P, &dqkv, &scratch, &dout, &qkv, &att, b, t, c, nh);
        g.run(&ops.unwrap()).unwrap();
        check_bf16(
            &format!("{name} dqkv"),
            &g.download::<u32>(&dqkv).unwrap(),
            &want.dqkv,
        );
    }
}

/// Views at non-zero (64-aligned) offsets inside larger buffers, poison around them: the
/// kernels touch only their own ranges.
#[test]
fn views_inside_larger_buffers() {
    let Some(g) = gpu::test_gpus(1).map(|mut v| v.remove(0)) else {
        return;
    };
    let mut rng = Rng::new(18);
    for (b, t, c, nh) in [(2, 6, 12, 3), (1, 34, 6, 3)] {
        let want = case(&mut rng, (b, t, c, nh));
        let inside = |data: &[u32]| {
            let mut v = vec![POISON_WORD; 64 + data.len() + 64];
            v[64..64 + data.len()].copy_from_slice(data);
            words(&g, &v).slice(64, data.len() + 7)
        };
        let outside = |n: usize| poisoned_words(&g, 64 + n + 64).slice(64, n + 64);
        let qkv = inside(&want.qkv);
        let dout = inside(&want.dout);
        let out = outside(want.out.len());
        let att = outside(want.att.len());
        let dqkv = outside(want.dqkv.len());
        let rows = outside(b * nh * t * t);
        let mut ops = k::attention_forward(&g, P, &out, &att, &rows, &qkv, b, t, c, nh).unwrap();
        ops.extend(
            k::attention_backward(&g, P, &dqkv, &rows, &dout, &qkv, &att, b, t, c, nh).unwrap(),
        );
        g.run(&ops).unwrap();
        let name = format!("attention_bf16 offset b={b} t={t} c={c} nh={nh}");
        let got = |v: &View, n: usize| {
            let all = g.download::<u32>(v).unwrap();
            assert!(
                all[n..].iter().all(|&w| w == POISON_WORD),
                "{name}: wrote past its range"
            );
            all[..n].to_vec()
        };
        check_bf16(
            &format!("{name} out"),
            &got(&out, want.out.len()),
            &want.out,
        );
        let got_att = got(&att, want.att.len());
        check_bf16(&format!("{name} att"), &got_att, &want.att);
        // The GPU backward read the GPU att; the twin of that.
        let mut dqkv_want = vec![0; want.dqkv.len()];
        twin::attention_backward_bf16(&mut dqkv_want, &want.dout, &want.qkv, &got_att, b, t, c, nh);
        got(&rows, b * nh * t * t);
        check_bf16(
            &format!("{name} dqkv"),
            &got(&dqkv, want.dqkv.len()),
            &dqkv_want,
        );
    }
}

#[test]
fn repeat_is_bit_identical() {
    let Some(g) = gpu::test_gpus(1).map(|mut v| v.remove(0)) else {
        return;
    };
    let mut rng = Rng::new(19);
    for (b, t, c, nh) in [(2, 70, 64, 4), (1, 41, 6, 3)] {
        let qkv = words(&g, &rand_bf16(&mut rng, b * t * 3 * c, 2.0));
        let dout = words(&g, &rand_bf16(&mut rng, b * t * c, 1.0));
        let run = || {
            let out = poisoned_words(&g, b * t * c / 2);
            let att = poisoned_words(&g, (b * nh * t * t).div_ceil(2));
            let dqkv = poisoned_words(&g, b * t * 3 * c / 2);
            let rows = poisoned_words(&g, b * nh * t * t);
            let mut ops =
                k::attention_forward(&g, P, &out, &att, &rows, &qkv, b, t, c, nh).unwrap();
            ops.extend(
                k::attention_backward(&g, P, &dqkv, &rows, &dout, &qkv, &att, b, t, c, nh).unwrap(),
            );
            g.run(&ops).unwrap();
            [out, att, dqkv].map(|v| g.download::<u32>(&v).unwrap())
        };
        assert!(
            run() == run(),
            "attention_bf16 b={b} t={t} c={c} nh={nh}: not bit-identical"
        );
    }
}

#[test]
fn bad_shapes_are_errors() {
    let Some(g) = gpu::test_gpus(1).map(|mut v| v.remove(0)) else {
        return;
    };
    let big = g.buffer("big", 1024);
    let fwd = |out: &View, att: &View, rows: &View, qkv: &View, t, c, nh| {
        k::attention_forward(&g, P, out, att, rows, qkv, 1, t, c, nh).err()
    };
    let bwd = |views: [&View; 5], t, c, nh| {
        let [dqkv, rows, dout, qkv, att] = views;
        k::attention_backward(&g, P, dqkv, rows, dout, qkv, att, 1, t, c, nh).err()
    };
    let config = |e: Option<Error>, what: &str| match e {
        Some(Error::Config(m)) if m.contains(what) => {}
        other => panic!("expected a Config error naming {what:?}, got {other:?}"),
    };
    // odd head size, heads not dividing C: refused by both directions
    for (t, c, nh, what) in [
        (4, 6, 2, "must be even"),
        (4, 3, 1, "must be even"),
        (4, 12, 5, "multiple"),
    ] {
        config(fwd(&big, &big, &big, &big, t, c, nh), what);
        config(bwd([&big; 5], t, c, nh), what);
    }
    // b=1, t=4, c=12, nh=3: out 24 words, att 24, qkv 72; rows 48 f32
    let (t, c, nh) = (4, 12, 3);
    let exact = |n: usize| big.slice(0, n);
    let short = |n: usize| big.slice(0, n - 1);
    assert!(fwd(&exact(24), &exact(24), &exact(48), &exact(72), t, c, nh).is_none());
    config(
        fwd(&short(24), &big, &big, &big, t, c, nh),
        "attention out:",
    );
    config(
        fwd(&big, &short(24), &big, &big, t, c, nh),
        "attention att:",
    );
    config(
        fwd(&big, &big, &short(48), &big, t, c, nh),
        "attention rows:",
    );
    config(
        fwd(&big, &big, &big, &short(72), t, c, nh),
        "attention qkv:",
    );
    let sizes = [72, 48, 24, 72, 24];
    let names = [
        "attention dqkv:",
        "attention rows:",
        "attention dout:",
        "attention qkv:",
        "attention att:",
    ];
    let views: Vec<View> = sizes.iter().map(|&n| exact(n)).collect();
    assert!(bwd(
        [&views[0], &views[1], &views[2], &views[3], &views[4]],
        t,
        c,
        nh
    )
    .is_none());
    for i in 0..5 {
        let mut v = views.clone();
        v[i] = short(sizes[i]);
        config(bwd([&v[0], &v[1], &v[2], &v[3], &v[4]], t, c, nh), names[i]);
    }
}
