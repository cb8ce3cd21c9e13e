//! Attention kernels vs their CPU twins on awkward shapes (both the vec4 path, hs % 4 == 0, and
//! the scalar path, hs = 1, 2, 3), outputs and scratch poisoned first; a bit-identical repeat;
//! bad shapes give errors.
mod common;
mod twins;
use common::*;
use triaxis::precision::Precision;
use triaxis::{gpu, kernels::attention as k, rng::Rng, Error, View};
use twins as cpu;

/// f32 writes its probabilities straight into att: the rows argument is unused.
const P: Precision = Precision::F32;

/// (b, t, c, nh): hs = c / nh.
const SHAPES: [(usize, usize, usize, usize); 12] = [
    (1, 1, 4, 1),      // one token, hs 4
    (2, 7, 12, 3),     // hs 4
    (1, 33, 16, 2),    // hs 8
    (1, 65, 8, 4),     // hs 2 (scalar path)
    (3, 5, 64, 4),     // hs 16
    (2, 9, 3, 3),      // hs 1
    (1, 4, 1, 1),      // c = 1
    (2, 17, 9, 3),     // hs 3
    (1, 1, 5, 5),      // one token, hs 1
    (2, 100, 96, 2),   // hs 48
    (1, 257, 64, 1),   // T past one workgroup, hs 64
    (1, 128, 768, 12), // GPT-2 small heads
];

struct Case {
    qkv: Vec<f32>,
    dout: Vec<f32>,
    out: Vec<f32>,
    att: Vec<f32>,
    dqkv: Vec<f32>,
}

/// Random inputs (scores spread enough that softmax rows are far from uniform) and the twins.
fn case(rng: &mut Rng, (b, t, c, nh): (usize, usize, usize, usize)) -> Case {
    let qkv = rng.vec(b * t * 3 * c, 2.0);
    let dout = rng.vec(b * t * c, 1.0);
    let mut out = vec![0.0; b * t * c];
    let mut att = vec![0.0; b * nh * t * t];
    cpu::attention_forward(&mut out, &mut att, &qkv, b, t, c, nh);
    let mut dqkv = vec![0.0; b * t * 3 * c];
    cpu::attention_backward(&mut dqkv, &dout, &qkv, &att, b, t, c, nh);
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
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(7);
    for (b, t, c, nh) in SHAPES {
        let want = case(&mut rng, (b, t, c, nh));
        let name = format!("attention b={b} t={t} c={c} nh={nh}");
        let qkv = buf(&g, &want.qkv);
        let dout = buf(&g, &want.dout);
        let out = poisoned(&g, b * t * c);
        let att = poisoned(&g, b * nh * t * t);
        g.run(&k::attention_forward(&g, P, &out, &att, &att, &qkv, b, t, c, nh).unwrap())
            .unwrap();
        check(
            &format!("{name} out"),
            &g.download::<f32>(&out).unwrap(),
            &want.out,
            1e-4,
        );
        check(
            &format!("{name} att"),
            &g.download::<f32>(&att).unwrap(),
            &want.att,
            1e-4,
        );
        let dqkv = poisoned(&g, b * t * 3 * c);
        let scratch = poisoned(&g, b * nh * t * t);
        let ops = k::attention_backward(&g, P, &dqkv, &scratch, &dout, &qkv, &att, b, t, c, nh);
        g.run(&ops.unwrap()).unwrap();
        check(
            &format!("{name} dqkv"),
            &g.download::<f32>(&dqkv).unwrap(),
            &want.dqkv,
            1e-4,
        );
    }
}

/// Views at non-zero (64-aligned) offsets inside larger buffers, with poison around them: the
/// kernels touch only their own ranges.
#[test]
fn views_inside_larger_buffers() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(8);
    for (b, t, c, nh) in [(2, 7, 12, 3), (1, 33, 6, 3)] {
        let want = case(&mut rng, (b, t, c, nh));
        let (n_out, n_att, n_qkv) = (b * t * c, b * nh * t * t, b * t * 3 * c);
        let inside = |data: &[f32]| {
            let mut v = vec![POISON; 64 + data.len() + 64];
            v[64..64 + data.len()].copy_from_slice(data);
            buf(&g, &v).slice(64, data.len() + 7)
        };
        let qkv = inside(&want.qkv);
        let dout = inside(&want.dout);
        let out = poisoned(&g, 64 + n_out + 64).slice(64, n_out + 64);
        let att = poisoned(&g, 64 + n_att + 64).slice(64, n_att + 64);
        let dqkv = poisoned(&g, 64 + n_qkv + 64).slice(64, n_qkv + 64);
        let scratch = poisoned(&g, 64 + n_att + 64).slice(64, n_att + 64);
        let mut ops = k::attention_forward(&g, P, &out, &att, &att, &qkv, b, t, c, nh).unwrap();
        ops.extend(
            k::attention_backward(&g, P, &dqkv, &scratch, &dout, &qkv, &att, b, t, c, nh).unwrap(),
        );
        g.run(&ops).unwrap();
        let name = format!("attention offset b={b} t={t} c={c} nh={nh}");
        let got = |v: &View, n: usize| {
            let all = g.download::<f32>(v).unwrap();
            assert!(
                all[n..].iter().all(|x| x.is_nan()),
                "{name}: wrote past its range"
            );
            all[..n].to_vec()
        };
        check(&format!("{name} out"), &got(&out, n_out), &want.out, 1e-4);
        check(&format!("{name} att"), &got(&att, n_att), &want.att, 1e-4);
        check(
            &format!("{name} dqkv"),
            &got(&dqkv, n_qkv),
            &want.dqkv,
            1e-4,
        );
    }
}

#[test]
fn repeat_is_bit_identical() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(9);
    for (b, t, c, nh) in [(2, 70, 64, 4), (1, 40, 6, 3)] {
        let qkv = buf(&g, &rng.vec(b * t * 3 * c, 2.0));
        let dout = buf(&g, &rng.vec(b * t * c, 1.0));
        let run = || {
            let out = poisoned(&g, b * t * c);
            let att = poisoned(&g, b * nh * t * t);
            let dqkv = poisoned(&g, b * t * 3 * c);
            let scratch = poisoned(&g, b * nh * t * t);
            let mut ops = k::attention_forward(&g, P, &out, &att, &att, &qkv, b, t, c, nh).unwrap();
            ops.extend(
                k::attention_backward(&g, P, &dqkv, &scratch, &dout, &qkv, &att, b, t, c, nh)
                    .unwrap(),
            );
            g.run(&ops).unwrap();
            [out, att, dqkv].map(|v| {
                let x = g.download::<f32>(&v).unwrap();
                x.iter().map(|f| f.to_bits()).collect::<Vec<u32>>()
            })
        };
        assert!(
            run() == run(),
            "attention b={b} t={t} c={c} nh={nh}: not bit-identical"
        );
    }
}

/// Where subgroups are 8 lanes, the subgroup kernels give the tiled kernels' bits, in both
/// precisions: out, att (and under bf16 the f32 probabilities), dqkv and dpre, on shapes
/// where T is not a multiple of the 32 tokens of a subgroup, below one subgroup, and past
/// several, with head sizes of 1, 2, 3, 12 and 16 Quads (a partial chunk tile at 3).
#[test]
fn subgroup_kernels_give_the_tiled_bits() {
    let Some(g) = gpu::test_gpu() else { return };
    if g.subgroup_lanes() != Some(8) {
        eprintln!(
            "SKIP subgroup_kernels_give_the_tiled_bits: {} has no 8-lane subgroups (the tiled \
             kernels run there)",
            g.adapter_name()
        );
        return;
    }
    let mut rng = Rng::new(21);
    let shapes = [
        (1, 1, 4, 1),
        (2, 7, 8, 1),
        (1, 45, 24, 2),
        (3, 33, 48, 1),
        (1, 70, 128, 2),
    ];
    for p in [Precision::F32, Precision::Bf16] {
        for (b, t, c, nh) in shapes {
            let mut words = |n: usize, a: f32| match p {
                Precision::F32 => rng.vec(n, a).iter().map(|x| x.to_bits()).collect(),
                Precision::Bf16 => triaxis::cpu::pack_bf16(&rng.vec(n, a)),
            };
            let qkv = buf_u32(&g, &words(b * t * 3 * c, 2.0));
            let dout = buf_u32(&g, &words(b * t * c, 1.0));
            let run = |kernel| {
                let w = |n: usize| poisoned(&g, p.words(n));
                let (out, att, dqkv) = (w(b * t * c), w(b * nh * t * t), w(b * t * 3 * c));
                let (probs, scratch) = (poisoned(&g, b * nh * t * t), poisoned(&g, b * nh * t * t));
                let mut ops =
                    k::attention_forward_with(&g, kernel, p, &out, &att, &probs, &qkv, b, t, c, nh)
                        .unwrap();
                ops.extend(
                    k::attention_backward_with(
                        &g, kernel, p, &dqkv, &scratch, &dout, &qkv, &att, b, t, c, nh,
                    )
                    .unwrap(),
                );
                g.run(&ops).unwrap();
                [out, att, probs, dqkv, scratch].map(|v| g.download::<u32>(&v).unwrap())
            };
            let (tiled, subgroup) = (run(k::Kernel::Tiled), run(k::Kernel::Subgroup));
            for (i, what) in ["out", "att", "probabilities", "dqkv", "dpre"]
                .iter()
                .enumerate()
            {
                assert!(
                    tiled[i] == subgroup[i],
                    "{p:?} b={b} t={t} c={c} nh={nh}: the subgroup kernels' {what} differs from \
                     the tiled kernels'"
                );
            }
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let (b, t, c) = (1, 4, 12);
    let big = g.buffer("big", 1024);
    let small = g.buffer("small", 8);
    let fwd = |out: &View, att: &View, qkv: &View, nh| {
        k::attention_forward(&g, P, out, att, att, qkv, b, t, c, nh).err()
    };
    let bwd = |dqkv: &View, scratch: &View, nh| {
        k::attention_backward(&g, P, dqkv, scratch, &big, &big, &big, b, t, c, nh).err()
    };
    for nh in [0, 5, 24] {
        let e = fwd(&big, &big, &big, nh).expect("bad nh accepted by forward");
        assert!(
            matches!(&e, Error::Config(m) if m.contains("multiple")),
            "{e}"
        );
        assert!(matches!(bwd(&big, &big, nh), Some(Error::Config(_))));
    }
    assert!(matches!(fwd(&small, &big, &big, 3), Some(Error::Config(_))));
    assert!(matches!(fwd(&big, &small, &big, 3), Some(Error::Config(_))));
    assert!(matches!(fwd(&big, &big, &small, 3), Some(Error::Config(_))));
    assert!(matches!(bwd(&small, &big, 3), Some(Error::Config(_))));
    assert!(matches!(bwd(&big, &small, 3), Some(Error::Config(_))));
    assert!(fwd(&big, &big, &big, 3).is_none());
}
