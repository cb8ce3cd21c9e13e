//! Matmul kernels vs their CPU twins on awkward shapes (K larger than M and N, sizes smaller than
//! a tile, rows not a multiple of 4), with and without bias. Assigned outputs are poisoned first;
//! accumulated outputs (dweight, dbias) are pre-filled with random values to prove `+=`.
mod common;
mod twins;
use common::*;
use k::{Kernel, Linear};
use triaxis::gpu::{Gpu, View};
use triaxis::precision::Precision;
use triaxis::{gpu, kernels::matmul as k, rng::Rng};
use twins as cpu;

/// Every operand f32.
const F32: Linear = Linear::new(Precision::F32);
/// Every operand f32, the texture kernel forced.
const TEXTURE: Linear = F32.with(Kernel::Texture);
const KERNELS: [Kernel; 2] = [Kernel::Buffer, Kernel::Texture];

/// (n, c, oc). A workgroup of the buffer kernel covers 64 rows × 128 columns of the output,
/// the portable texture kernel's 128 × 128, the subgroup kernel's 32 × 64; the last shapes span
/// several workgroups on both axes.
const SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (7, 33, 65),
    (65, 7, 33),
    (33, 65, 7),
    (3, 200, 5),
    (64, 64, 64),
    (130, 96, 72),
    (9, 4, 12),
    (17, 300, 2),
    (150, 36, 260),
];

const TOL: f32 = 1e-4;

fn forward(g: &Gpu, kernel: Kernel, rng: &mut Rng, shape: (usize, usize, usize), bias: bool) {
    let ((n, c, oc), with_bias) = (shape, bias);
    let (x, w, b) = (rand(rng, n * c), rand(rng, oc * c), rand(rng, oc));
    let (xb, wb, bb, out) = (buf(g, &x), buf(g, &w), buf(g, &b), poisoned(g, n * oc));
    let bias = with_bias.then_some(&bb);
    g.run(&k::matmul_forward(g, F32.with(kernel), &out, &xb, &wb, bias, n, c, oc).unwrap())
        .unwrap();
    let mut want = vec![0.0; n * oc];
    cpu::matmul_forward(&mut want, &x, &w, with_bias.then_some(&b[..]), n, c, oc);
    check(
        &format!("matmul_forward {kernel:?} n={n} c={c} oc={oc} bias={with_bias}"),
        &g.download::<f32>(&out).unwrap(),
        &want,
        TOL,
    );
}

fn backward(g: &Gpu, kernel: Kernel, rng: &mut Rng, shape: (usize, usize, usize), bias: bool) {
    let ((n, c, oc), with_bias) = (shape, bias);
    let (dy, x, w) = (rand(rng, n * oc), rand(rng, n * c), rand(rng, oc * c));
    let (dw0, db0) = (rand(rng, oc * c), rand(rng, oc));
    let (dyb, xb, wb) = (buf(g, &dy), buf(g, &x), buf(g, &w));
    let (dinp, dwb, dbb) = (poisoned(g, n * c), buf(g, &dw0), buf(g, &db0));
    let dbias = with_bias.then_some(&dbb);
    g.run(
        &k::matmul_backward(
            g,
            F32.with(kernel),
            &dinp,
            &dwb,
            dbias,
            &dyb,
            &xb,
            &wb,
            n,
            c,
            oc,
        )
        .unwrap(),
    )
    .unwrap();
    let (mut want_dx, mut want_dw, mut want_db) = (vec![0.0; n * c], dw0.clone(), db0.clone());
    let db_cpu = with_bias.then_some(&mut want_db[..]);
    cpu::matmul_backward(&mut want_dx, &mut want_dw, db_cpu, &dy, &x, &w, n, c, oc);
    let name = format!("{kernel:?} n={n} c={c} oc={oc} bias={with_bias}");
    check(
        &format!("matmul_backward dinp {name}"),
        &g.download::<f32>(&dinp).unwrap(),
        &want_dx,
        TOL,
    );
    check(
        &format!("matmul_backward dweight {name}"),
        &g.download::<f32>(&dwb).unwrap(),
        &want_dw,
        TOL,
    );
    let got_db = g.download::<f32>(&dbb).unwrap();
    if with_bias {
        check(
            &format!("matmul_backward dbias {name}"),
            &got_db,
            &want_db,
            TOL,
        );
    } else {
        assert_eq!(got_db, db0, "dbias touched without a bias");
    }
}

#[test]
fn forward_matches_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(11);
    for (kernel, shape) in matmul_cases(&g, &SHAPES) {
        for bias in [false, true] {
            forward(&g, kernel, &mut rng, shape, bias);
        }
    }
}

#[test]
fn backward_matches_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(12);
    for (kernel, shape) in matmul_cases(&g, &SHAPES) {
        for bias in [false, true] {
            backward(&g, kernel, &mut rng, shape, bias);
        }
    }
}

/// Views at 64-aligned offsets inside larger buffers (as the flat parameter buffer gives them).
#[test]
fn offset_views_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(13);
    let (n, c, oc) = (10, 12, 6);
    let (x, w, b) = (
        rand(&mut rng, n * c),
        rand(&mut rng, oc * c),
        rand(&mut rng, oc),
    );
    let mut host = vec![f32::NAN; 64 + 192 + 128];
    host[64..64 + oc * c].copy_from_slice(&w);
    host[256..256 + oc].copy_from_slice(&b);
    let params = buf(&g, &host);
    let (wv, bv) = (params.slice(64, oc * c), params.slice(256, oc));
    let acts = poisoned(&g, 128 + n * oc + 64);
    let out = acts.slice(128, n * oc);
    let xb = buf(&g, &x);
    let mut want = vec![0.0; n * oc];
    cpu::matmul_forward(&mut want, &x, &w, Some(&b), n, c, oc);
    for kernel in KERNELS {
        let ops = k::matmul_forward(&g, F32.with(kernel), &out, &xb, &wv, Some(&bv), n, c, oc);
        g.run(&ops.unwrap()).unwrap();
        check(
            &format!("matmul_forward {kernel:?} offset views"),
            &g.download::<f32>(&out).unwrap(),
            &want,
            TOL,
        );
        let rest = g.download::<f32>(&acts).unwrap();
        assert!(
            rest[..128]
                .iter()
                .chain(&rest[128 + n * oc..])
                .all(|v| v.is_nan()),
            "{kernel:?} wrote outside its view"
        );
    }
}

/// Two runs of the same ops give bit-identical results (no scheduling-dependent order).
#[test]
fn deterministic() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(14);
    let (n, c, oc) = (130, 97, 72);
    let (dy, x, w) = (
        rand(&mut rng, n * oc),
        rand(&mut rng, n * c),
        rand(&mut rng, oc * c),
    );
    let (dyb, xb, wb) = (buf(&g, &dy), buf(&g, &x), buf(&g, &w));
    let bb = buf(&g, &rand(&mut rng, oc));
    for kernel in KERNELS {
        let mut results = Vec::new();
        for _ in 0..2 {
            let (out, dinp) = (poisoned(&g, n * oc), poisoned(&g, n * c));
            let (dw, db) = (buf(&g, &vec![0.0; oc * c]), buf(&g, &vec![0.0; oc]));
            let mut ops =
                k::matmul_forward(&g, F32.with(kernel), &out, &xb, &wb, Some(&bb), n, c, oc)
                    .unwrap();
            ops.extend(
                k::matmul_backward(
                    &g,
                    F32.with(kernel),
                    &dinp,
                    &dw,
                    Some(&db),
                    &dyb,
                    &xb,
                    &wb,
                    n,
                    c,
                    oc,
                )
                .unwrap(),
            );
            g.run(&ops).unwrap();
            let bits: Vec<u32> = [&out, &dinp, &dw, &db]
                .iter()
                .flat_map(|v| g.download::<u32>(v).unwrap())
                .collect();
            results.push(bits);
        }
        assert!(results[0] == results[1], "{kernel:?}: two runs differ");
    }
}

#[test]
fn bad_arguments_are_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let (a, small) = (g.buffer("a", 64), g.buffer("small", 3));
    assert!(k::matmul_forward(&g, F32, &a, &a, &a, None, 0, 4, 4).is_err());
    assert!(k::matmul_forward(&g, F32, &a, &a, &a, None, 2, 4, 4).is_ok());
    let bf16_io = Linear {
        io: Precision::Bf16,
        ..F32
    };
    assert!(k::matmul_forward(&g, bf16_io, &a, &a, &a, None, 2, 4, 4).is_err());
    assert!(k::matmul_forward(&g, F32, &small, &a, &a, None, 2, 4, 4).is_err());
    assert!(k::matmul_backward(&g, F32, &a, &a, Some(&small), &a, &a, &a, 2, 4, 4).is_err());
    assert!(k::matmul_backward(&g, F32, &a, &small, None, &a, &a, &a, 2, 4, 4).is_err());
}

/// The default entry points (`Kernel::Auto`) agree bit for bit with the kernel they pick.
#[test]
fn auto_matches_explicit_kernels() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(15);
    let (n, c, oc) = (256, 132, 130);
    let (x, w) = (rand(&mut rng, n * c), rand(&mut rng, oc * c));
    let (xb, wb) = (buf(&g, &x), buf(&g, &w));
    let mut got = Vec::new();
    for kernel in [Kernel::Auto, Kernel::Buffer, Kernel::Texture] {
        let out = poisoned(&g, n * oc);
        g.run(&k::matmul_forward(&g, F32.with(kernel), &out, &xb, &wb, None, n, c, oc).unwrap())
            .unwrap();
        got.push(g.download::<f32>(&out).unwrap());
    }
    let mut want = vec![0.0; n * oc];
    cpu::matmul_forward(&mut want, &x, &w, None, n, c, oc);
    check("matmul_forward Auto 256×132×130", &got[0], &want, TOL);
    assert!(
        got[0] == got[1] || got[0] == got[2],
        "Auto matches neither kernel"
    );
}

/// Random dout [n,oc], inp [n,c], weight [oc,c] and bias [oc] of a linear layer, on the host and
/// uploaded.
fn operands(
    g: &Gpu,
    rng: &mut Rng,
    (n, c, oc): (usize, usize, usize),
) -> ([Vec<f32>; 4], [View; 4]) {
    let host = [n * oc, n * c, oc * c, oc].map(|len| rand(rng, len));
    let dev = [0, 1, 2, 3].map(|i| buf(g, &host[i]));
    (host, dev)
}

/// The subgroup kernel gives the portable texture kernel's bits (same sums in the same order),
/// forward and backward, where the device has 8-lane subgroups; elsewhere it is refused; the
/// buffer kernel gives them too. Both stores of C: a Quad at a time (every N a multiple of 4,
/// edge tiles in both directions and the weight gradient accumulating) and element by element
/// (N = 262 and 38).
#[test]
fn subgroup_kernel_gives_texture_bits() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(17);
    let sub = F32.with(Kernel::Subgroup);
    for (n, c, oc) in [(150, 36, 260), (150, 38, 262)] {
        subgroup_bits(&g, &mut rng, sub, (n, c, oc));
    }
}

fn subgroup_bits(g: &Gpu, rng: &mut Rng, sub: Linear, (n, c, oc): (usize, usize, usize)) {
    let g = g.clone();
    let (_, [dyb, xb, wb, bb]) = operands(&g, rng, (n, c, oc));
    let out = poisoned(&g, n * oc);
    if g.subgroup_lanes() != Some(8) {
        let Err(e) = k::matmul_forward(&g, sub, &out, &xb, &wb, None, n, c, oc) else {
            panic!("the subgroup kernel accepted a device without 8-lane subgroups");
        };
        assert!(e.to_string().contains("8 lanes"), "{e}");
        println!(
            "{}: no 8-lane subgroups; the refusal checked",
            g.adapter_name()
        );
        return;
    }
    let bits: Vec<_> = [F32.with(Kernel::Buffer), TEXTURE, sub]
        .map(|l| layer_bits(&g, l, (n, c, oc), [&dyb, &xb, &wb, &bb]))
        .to_vec();
    for (i, name) in ["out", "dinp", "dweight", "dbias"].iter().enumerate() {
        for (k, kernel) in [(1, "texture"), (2, "subgroup")] {
            assert!(
                bits[0][i] == bits[k][i],
                "{name}: {kernel} bits differ from the buffer kernel's at n, c, oc = {n}, {c}, {oc}"
            );
        }
    }
}

/// The weight gradient binding the texture the forward packed its input into: one pack fewer
/// and the bits of packing it again, where the texture's size fits (n a whole number of tile
/// rows, c/4 of tile columns); elsewhere it packs its own and still gives those bits.
#[test]
fn weight_gradient_reuses_the_forwards_packed_input() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(18);
    for (l, (n, c, oc), reused) in [
        (TEXTURE, (64, 64, 40), true),
        (TEXTURE, (40, 36, 30), false),
    ] {
        let (dy, x, w) = (
            rand(&mut rng, n * oc),
            rand(&mut rng, n * c),
            rand(&mut rng, oc * c),
        );
        let (dyb, xb, wb) = (buf(&g, &dy), buf(&g, &x), buf(&g, &w));
        let mut bits = Vec::new();
        let mut counts = Vec::new();
        for keep in [false, true] {
            let (out, dw) = (poisoned(&g, n * oc), buf(&g, &vec![0.5; oc * c]));
            let mut packs = k::Packs::default();
            let (fwd, back) = if keep {
                let f =
                    k::matmul_forward_keeping(&g, l, &out, &xb, &wb, None, (n, c, oc), &mut packs);
                let b = k::matmul_backward_weight_packed(
                    &g,
                    l,
                    &dw,
                    None,
                    &dyb,
                    &xb,
                    (n, c, oc),
                    &packs,
                );
                (f.unwrap(), b.unwrap())
            } else {
                let f = k::matmul_forward(&g, l, &out, &xb, &wb, None, n, c, oc);
                let b = k::matmul_backward_weight(&g, l, &dw, None, &dyb, &xb, n, c, oc);
                (f.unwrap(), b.unwrap())
            };
            assert_eq!(
                packs.len(),
                usize::from(keep),
                "the forward keeps its input's texture"
            );
            counts.push(back.len());
            g.run(&fwd).unwrap();
            g.run(&back).unwrap();
            bits.push(g.download::<u32>(&dw).unwrap());
        }
        assert!(
            bits[0] == bits[1],
            "({n}, {c}, {oc}): dweight bits differ when reused"
        );
        let saved = if reused { 1 } else { 0 };
        assert_eq!(
            counts[1] + saved,
            counts[0],
            "({n}, {c}, {oc}): dispatches {counts:?}"
        );
    }
}

/// Operands beyond the texture size limit: the texture kernel refuses with an error, the default
/// falls back to the buffer kernel.
#[test]
fn texture_limit_falls_back() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(16);
    // Large enough for Auto to want textures on every CPU adapter.
    let (n, c, oc) = (g.limits.max_texture_dimension_2d as usize + 1, 64, 128);
    assert!(k::texture_min_flops(&g).is_none_or(|min| 2 * n * c * oc >= min));
    let (x, w) = (rand(&mut rng, n * c), rand(&mut rng, oc * c));
    let (xb, wb, out) = (buf(&g, &x), buf(&g, &w), poisoned(&g, n * oc));
    let tex = k::matmul_forward(&g, TEXTURE, &out, &xb, &wb, None, n, c, oc);
    assert!(tex.is_err());
    g.run(&k::matmul_forward(&g, F32, &out, &xb, &wb, None, n, c, oc).unwrap())
        .unwrap();
    let mut want = vec![0.0; n * oc];
    cpu::matmul_forward(&mut want, &x, &w, None, n, c, oc);
    check(
        &format!("matmul_forward Auto n={n} (past the texture limit)"),
        &g.download::<f32>(&out).unwrap(),
        &want,
        TOL,
    );
}

/// The texture kernel's packed operands are device memory too: the ledger holds their 16 bytes
/// per texel as workspace while the op lives (A' = ⌈K/4⌉ × M rounded to 16 rows, B' = ⌈N/4⌉
/// rounded to 4 × 4·⌈K/4⌉ texels) and releases them with it.
#[test]
fn texture_operands_are_in_the_memory_ledger() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(16);
    let (n, c, oc) = (40, 36, 30);
    let (xb, wb) = (
        buf(&g, &rand(&mut rng, n * c)),
        buf(&g, &rand(&mut rng, oc * c)),
    );
    let out = poisoned(&g, n * oc);
    let before = g.memory().current.workspace;
    let ops = k::matmul_forward(&g, TEXTURE, &out, &xb, &wb, None, n, c, oc).unwrap();
    let kt = c.div_ceil(4);
    let texels = kt * n.next_multiple_of(16) + oc.div_ceil(4).next_multiple_of(4) * 4 * kt;
    assert_eq!(
        g.memory().current.workspace - before,
        16 * texels as u64,
        "{texels} texels"
    );
    g.run(&ops).unwrap();
    drop(ops);
    assert_eq!(g.memory().current.workspace, before, "released with the op");
}

/// An f32 operand whose stored rows are whole texel rows (rows of a multiple of 64 elements) is
/// copied into its texture, not packed by a shader, by every texture kernel: untransposed (the
/// forward's input, both operands of the input gradient, the weight gradient's input) in the
/// packed layout, transposed (wᵀ of the forward, doutᵀ of the weight gradient) in a rows
/// layout. The products match the twins, every layout gives the buffer kernel's bits, and a
/// timed pass that starts with a copy still reads its duration.
#[test]
fn row_operands_are_copied_into_textures() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(19);
    let kernels: Vec<_> = textured_kernels(&g)
        .into_iter()
        .map(|k| F32.with(k))
        .collect();
    // (n, c, oc): every operand copied; rows not a multiple of 4 or 32 (the rows layouts' pads);
    // oc not a multiple of 64 (dout and doutᵀ packed)
    for (n, c, oc) in [(40, 64, 128), (37, 128, 64), (130, 64, 72)] {
        let ([dy, x, w, b], [dyb, xb, wb, bb]) = operands(&g, &mut rng, (n, c, oc));
        // the forward and backward ops of `l` and their outputs: out, dinp, dw, db
        let build = |l: Linear| {
            let (out, dinp) = (poisoned(&g, n * oc), poisoned(&g, n * c));
            let (dw, db) = (buf(&g, &vec![0.5; oc * c]), buf(&g, &vec![0.5; oc]));
            let mut ops = k::matmul_forward(&g, l, &out, &xb, &wb, Some(&bb), n, c, oc).unwrap();
            let back = k::matmul_backward(&g, l, &dinp, &dw, Some(&db), &dyb, &xb, &wb, n, c, oc);
            ops.extend(back.unwrap());
            (ops, [out, dinp, dw, db])
        };
        let words = |outs: &[View; 4]| outs.each_ref().map(|v| g.download::<u32>(v).unwrap());
        let mut bits = Vec::new();
        for &l in &kernels {
            let (ops, outs) = build(l);
            let [out, dinp, dw, _] = &outs;
            let copied = copied_operands(c, oc, 64);
            let count = |label: &str| ops.iter().filter(|o| o.label.starts_with(label)).count();
            let what = format!("{:?} ({n}, {c}, {oc})", l.kernel);
            assert_eq!(count("matmul_copy"), copied, "{what}");
            assert_eq!(count("matmul_pack"), 6 - copied, "{what}");
            assert_eq!(ops[0].label, "matmul_copy");
            g.run_timed(&ops).unwrap();
            let mut want = vec![0.0; n * oc];
            cpu::matmul_forward(&mut want, &x, &w, Some(&b), n, c, oc);
            check(&what, &g.download::<f32>(out).unwrap(), &want, TOL);
            let (mut wdinp, mut wdw, mut wdb) =
                (vec![0.0; n * c], vec![0.5; oc * c], vec![0.5; oc]);
            let wdb_ = Some(&mut wdb[..]);
            cpu::matmul_backward(&mut wdinp, &mut wdw, wdb_, &dy, &x, &w, n, c, oc);
            check(&what, &g.download::<f32>(dinp).unwrap(), &wdinp, TOL);
            check(&what, &g.download::<f32>(dw).unwrap(), &wdw, TOL);
            bits.push(words(&outs));
        }
        let (ops, outs) = build(F32.with(Kernel::Buffer));
        g.run(&ops).unwrap();
        let want = words(&outs);
        for (b, l) in bits.iter().zip(&kernels) {
            assert!(
                *b == want,
                "({n}, {c}, {oc}): the {:?} kernel's bits differ from the buffer kernel's",
                l.kernel
            );
        }
    }
}

/// The bias gradient reads eight columns an invocation where an f32 row holds whole pairs of
/// Quads and four elsewhere, with each column summed over the rows in the same order: columns
/// 0..72 of a 76-column gradient (four a time) and of a 72-column one (eight a time) over the
/// same rows agree bit for bit.
#[test]
fn bias_gradient_bits_do_not_depend_on_columns_per_invocation() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(19);
    let (n, c) = (150, 8);
    let wide = rand(&mut rng, n * 76);
    let narrow: Vec<f32> = wide.chunks(76).flat_map(|r| r[..72].to_vec()).collect();
    let x = rand(&mut rng, n * c);
    let db0 = rand(&mut rng, 76);
    let mut got = Vec::new();
    for (dy, oc) in [(&narrow, 72), (&wide, 76)] {
        let (dyb, xb, wb) = (buf(&g, dy), buf(&g, &x), buf(&g, &vec![0.5; oc * c]));
        let (dinp, dw, db) = (
            poisoned(&g, n * c),
            poisoned(&g, oc * c),
            buf(&g, &db0[..oc]),
        );
        let l = F32.with(Kernel::Auto);
        let ops = k::matmul_backward(&g, l, &dinp, &dw, Some(&db), &dyb, &xb, &wb, n, c, oc);
        g.run(&ops.unwrap()).unwrap();
        got.push(g.download::<u32>(&db).unwrap());
    }
    assert_eq!(got[0][..72], got[1][..72], "dbias columns 0..72");
}

/// A product stored a Quad at a time gives the bits of the same elements stored one by one:
/// the layer at (n, c, oc) = (150, 36, 260), where every N is a multiple of 4, against the
/// leading block of the same layer widened to (150, 38, 262) (N = 262 and 38: element stores),
/// its extra inputs zero and its extra outputs ignored. A zero term leaves an f32 sum as it
/// was, so the shared elements must agree bit for bit: forward, input gradient and the
/// accumulating weight and bias gradients, on every kernel.
#[test]
fn quad_stores_give_the_bits_of_element_stores() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(19);
    let (n, c, oc) = (150, 36, 260);
    let (c2, oc2) = (c + 2, oc + 2);
    let [dy, x, w, b] = [n * oc, n * c, oc * c, oc].map(|len| rand(&mut rng, len));
    // the widened layer: x and w gain zero columns, dout zero columns, w and b extra rows
    let widen = |m: &[f32], rows: usize, cols: usize, rows2: usize, cols2: usize| {
        let mut out = vec![0.0; rows2 * cols2];
        for r in 0..rows {
            out[r * cols2..r * cols2 + cols].copy_from_slice(&m[r * cols..(r + 1) * cols]);
        }
        out
    };
    let mut w2 = widen(&w, oc, c, oc2, c2);
    w2[oc * c2..].iter_mut().for_each(|v| *v = 0.75);
    let mut b2 = b.clone();
    b2.extend([0.25, -0.5]);
    let (dy2, x2) = (widen(&dy, n, oc, n, oc2), widen(&x, n, c, n, c2));
    // the leading block of an [rows, cols2] result
    let lead = |m: &[u32], rows: usize, cols: usize, cols2: usize| -> Vec<u32> {
        (0..rows)
            .flat_map(|r| m[r * cols2..r * cols2 + cols].to_vec())
            .collect()
    };
    let run = |l: Linear, (c, oc): (usize, usize), host: [&[f32]; 4]| {
        let [dyb, xb, wb, bb] = host.map(|h| buf(&g, h));
        layer_bits(&g, l, (n, c, oc), [&dyb, &xb, &wb, &bb])
    };
    let mut kernels = vec![Kernel::Buffer];
    kernels.extend(textured_kernels(&g));
    for kernel in kernels {
        let l = F32.with(kernel);
        let quads = run(l, (c, oc), [&dy, &x, &w, &b]);
        let words = run(l, (c2, oc2), [&dy2, &x2, &w2, &b2]);
        let shared = [
            ("out", lead(&words[0], n, oc, oc2)),
            ("dinp", lead(&words[1], n, c, c2)),
            ("dweight", lead(&words[2], oc, c, c2)),
            ("dbias", words[3][..oc].to_vec()),
        ];
        for (i, (name, want)) in shared.iter().enumerate() {
            assert!(
                quads[i] == *want,
                "{kernel:?} {name}: Quad stores differ from element stores"
            );
        }
    }
}

/// The bits of a linear layer's forward and backward with `l` on dout, inp, weight and bias
/// `views` ([n,oc], [n,c], [oc,c], [oc]): out, dinp, and dweight and dbias accumulated onto 0.5.
fn layer_bits(
    g: &Gpu,
    l: Linear,
    (n, c, oc): (usize, usize, usize),
    views: [&View; 4],
) -> [Vec<u32>; 4] {
    let [dyb, xb, wb, bb] = views;
    let (out, dinp) = (poisoned(g, n * oc), poisoned(g, n * c));
    let (dw, db) = (buf(g, &vec![0.5; oc * c]), buf(g, &vec![0.5; oc]));
    let mut ops = k::matmul_forward(g, l, &out, xb, wb, Some(bb), n, c, oc).unwrap();
    let back = k::matmul_backward(g, l, &dinp, &dw, Some(&db), dyb, xb, wb, n, c, oc);
    ops.extend(back.unwrap());
    g.run(&ops).unwrap();
    [&out, &dinp, &dw, &db].map(|v| g.download::<u32>(v).unwrap())
}
