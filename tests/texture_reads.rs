//! The kernels that read their tensors from texture copies on CPU adapters
//! (`Gpu::texture_reads`) give, bit for bit, what the same kernels give reading the storage
//! buffers: layernorm forward (plain and after the residual add), its backward (dinp, and
//! dweight / dbias through the chunked partials), GELU forward and backward, the residual add,
//! the bias gradient, AdamW (in place under f32, on master weights under bf16) and (where
//! subgroups are 8 lanes) attention, in f32 and bf16. Shapes whose Quads fill several texel rows and end in
//! a partial one, and views at an offset into their buffer.
mod common;
use common::*;
use triaxis::gpu::{Gpu, View};
use triaxis::kernels::{
    attention as ka, elementwise as ke, matmul as km, norm as kn, optim as ko, Dispatch,
};
use triaxis::precision::Precision::{self, Bf16, F32};
use triaxis::rng::Rng;

// (rows, columns): 300·68/4 = 5,100 Quads = 19 texel rows of 256 and 236 over; 8 × 64 fits one
// partial row; 260 × 132 takes the chunked column sums (more than 256 rows)
const SHAPES: [(usize, usize); 3] = [(8, 64), (300, 68), (260, 132)];

/// Words of `p` for `elems` elements, random, uploaded at word `at` of a buffer of their own
/// (a storage binding's alignment), so the kernels see a view with an offset.
fn operand(g: &Gpu, rng: &mut Rng, p: Precision, elems: usize, at: usize) -> View {
    let x = rng.vec(elems, 1.0);
    let data: Vec<u32> = match p {
        F32 => x.iter().map(|v| v.to_bits()).collect(),
        Bf16 => x
            .chunks(2)
            .map(|c| (c[0].to_bits() >> 16) | (c[1].to_bits() & 0xffff_0000))
            .collect(),
    };
    let v = g.buffer("operand", at + data.len()).slice(at, data.len());
    g.upload(&v, &data).unwrap();
    v
}

/// The words of `outs` after running what `build` makes from the same inputs with texture
/// reads off and on; asserts that on copies (some op is a copy) and off does not.
fn both(g: &Gpu, outs: &[&View], build: &dyn Fn() -> Vec<Dispatch>) -> [Vec<Vec<u32>>; 2] {
    let start: Vec<Vec<u32>> = outs.iter().map(|v| g.download(v).unwrap()).collect();
    [false, true].map(|on| {
        g.set_texture_reads(on).unwrap();
        for (v, s) in outs.iter().zip(&start) {
            g.upload(v, s).unwrap();
        }
        let ops = build();
        assert_eq!(
            dispatches(&ops) < ops.len(),
            on,
            "texture reads {on}: copies"
        );
        g.run(&ops).unwrap();
        outs.iter().map(|v| g.download(v).unwrap()).collect()
    })
}

fn same(what: &str, [off, on]: [Vec<Vec<u32>>; 2]) {
    for (i, (a, b)) in off.iter().zip(&on).enumerate() {
        let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
        assert_eq!(
            differ,
            0,
            "{what}: output {i}: {differ} of {} words differ",
            a.len()
        );
    }
}

/// The test device with texture reads on, or `None` (with a line) where it has none.
fn texture_gpu() -> Option<Gpu> {
    let g = triaxis::gpu::test_gpu()?;
    if g.set_texture_reads(true).is_err() {
        eprintln!(
            "SKIP: {} is not a CPU adapter: no texture reads",
            g.adapter_name()
        );
        return None;
    }
    Some(g)
}

#[test]
fn texture_reads_give_the_buffer_bits() {
    let Some(g) = texture_gpu() else {
        return;
    };
    let mut rng = Rng::new(23);
    for p in [F32, Bf16] {
        for (n, c) in SHAPES {
            let what = |k: &str| format!("{k} {p} n={n} c={c}");
            let x = |rng: &mut Rng, elems| operand(&g, rng, p, elems, 64);
            let (a, b, w, bias) = (
                x(&mut rng, n * c),
                x(&mut rng, n * c),
                x(&mut rng, c),
                x(&mut rng, c),
            );
            let (out, sum) = (x(&mut rng, n * c), x(&mut rng, n * c));
            let (mean, rstd) = (g.buffer("mean", n), g.buffer("rstd", n));
            let outs = [&out, &mean, &rstd];
            same(
                &what("layernorm_forward"),
                both(&g, &outs, &|| {
                    kn::layernorm_forward(&g, p, &out, &mean, &rstd, &a, &w, &bias, n, c).unwrap()
                }),
            );
            let outs = [&out, &mean, &rstd, &sum];
            same(
                &what("residual_layernorm_forward"),
                both(&g, &outs, &|| {
                    kn::residual_layernorm_forward(
                        &g,
                        p,
                        &sum,
                        &out,
                        &mean,
                        &rstd,
                        (&a, &b),
                        &w,
                        &bias,
                        n,
                        c,
                    )
                    .unwrap()
                }),
            );
            // the backward from the forward's mean and rstd, into random accumulators
            let (dinp, dw, db) = (x(&mut rng, n * c), x(&mut rng, c), x(&mut rng, c));
            same(
                &what("layernorm_backward"),
                both(&g, &[&dinp, &dw, &db], &|| {
                    kn::layernorm_backward(&g, p, &dinp, &dw, &db, &b, &a, &w, &mean, &rstd, n, c)
                        .unwrap()
                }),
            );
            let e = n * c;
            same(
                &what("gelu_forward"),
                both(&g, &[&out], &|| {
                    ke::gelu_forward(&g, p, &out, &a, e).unwrap()
                }),
            );
            same(
                &what("gelu_backward"),
                both(&g, &[&out], &|| {
                    ke::gelu_backward(&g, p, &out, &a, &b, e).unwrap()
                }),
            );
            same(
                &what("residual_forward"),
                both(&g, &[&out], &|| {
                    ke::residual_forward(&g, p, &out, &a, &b, e).unwrap()
                }),
            );
            // dweight [c, c] += doutᵀ·inp, dbias [c] += Σ rows of dout (dout = b [n, c])
            let dweight = x(&mut rng, c * c);
            let layer = km::Linear::new(p);
            same(
                &what("matmul_backward_weight"),
                both(&g, &[&dweight, &db], &|| {
                    km::matmul_backward_weight(&g, layer, &dweight, Some(&db), &b, &a, n, c, c)
                        .unwrap()
                }),
            );
        }
    }
}

/// AdamW over 5,100 Quads (several texel rows and a partial one), weight decay on part of
/// them, clipping active.
#[test]
fn adamw_texture_reads_give_the_buffer_bits() {
    let Some(g) = texture_gpu() else {
        return;
    };
    adamw_both(&g, 20_400, &[0..3200, 6400..9600]);
}

/// AdamW over more than two slices: the slices' decay ranges and copies line up with one
/// dispatch over the range, and the copies' workspace is a slice's, not the range's.
#[test]
fn adamw_slices_give_the_buffer_bits_in_a_slice_of_workspace() {
    let Some(g) = texture_gpu() else {
        return;
    };
    let s = ko::ADAMW_SLICE;
    let n = 2 * s + 20_400;
    let before = g.memory().current.workspace;
    adamw_both(&g, n, &[0..3200, s - 64..s + 6400, 2 * s + 64..n]);
    let held = g.memory().current.workspace - before;
    // four f32 copies of a slice, and a quarter more (a row of padding each, the bf16
    // gradients' own texture); four of the whole range would be 16·n bytes
    let bound = (16 * s + 4 * s) as u64;
    assert!(held <= bound, "copies hold {held} bytes, over {bound}");
}

/// AdamW over `n` elements in both precisions (in place under f32, on master weights under
/// bf16), clipping active, weight decay on `decay`: the same words with texture reads off and
/// on, the latter in one dispatch per slice of `ko::ADAMW_SLICE`.
fn adamw_both(g: &Gpu, n: usize, decay: &[std::ops::Range<usize>]) {
    let mut rng = Rng::new(25);
    let h = triaxis::cpu::AdamW {
        t: 3,
        clip: 0.5,
        lr: 1e-2,
        weight_decay: 0.1,
        ..Default::default()
    };
    let (hp, norm_sq) = (g.buffer("hp", 8), g.buffer("norm_sq", 1));
    g.upload(&hp, &ko::hyper_words(&h)).unwrap();
    g.upload(&norm_sq, &[4.0f32]).unwrap();
    for p in [F32, Bf16] {
        let (params, grads) = (
            operand(g, &mut rng, p, n, 64),
            operand(g, &mut rng, p, n, 64),
        );
        let f32s = |rng: &mut Rng| operand(g, rng, F32, n, 64);
        let (m, v, master) = (f32s(&mut rng), f32s(&mut rng), f32s(&mut rng));
        let master = (p == Bf16).then_some(&master);
        let mut outs = vec![&params, &m, &v];
        outs.extend(master);
        same(
            &format!("adamw {p} over {n}"),
            both(g, &outs, &|| {
                let ops =
                    ko::adamw(g, p, &params, master, &grads, &m, &v, &hp, &norm_sq, decay).unwrap();
                if g.texture_reads() {
                    assert_eq!(dispatches(&ops), n.div_ceil(ko::ADAMW_SLICE), "slices");
                }
                ops
            }),
        );
    }
}

/// The attention kernels reading copies (the forward qkv; the backward att, qkv, dout and dpre)
/// against themselves reading buffers: out, att, rows, dqkv and dpre, on heads of 8 and 4
/// channels, T past one subgroup's 32 tokens; the tiled kernels everywhere, the subgroup ones
/// where subgroups are 8 lanes.
#[test]
fn attention_texture_reads_give_the_buffer_bits() {
    let Some(g) = texture_gpu() else {
        return;
    };
    let mut kernels = vec![ka::Kernel::Tiled];
    match g.subgroup_lanes() {
        Some(8) => kernels.push(ka::Kernel::Subgroup),
        _ => eprintln!(
            "SKIP (subgroup kernels only): {} has no 8-lane subgroups",
            g.adapter_name()
        ),
    }
    let mut rng = Rng::new(24);
    for (k, p) in kernels.into_iter().flat_map(|k| [(k, F32), (k, Bf16)]) {
        for (b, t, c, nh) in [(1, 34, 16, 2), (2, 40, 16, 4)] {
            let x = |rng: &mut Rng, elems| operand(&g, rng, p, elems, 64);
            let (qkv, dout, att) = (
                x(&mut rng, b * t * 3 * c),
                x(&mut rng, b * t * c),
                x(&mut rng, b * nh * t * t),
            );
            let dqkv = x(&mut rng, b * t * 3 * c);
            let rows = operand(&g, &mut rng, F32, b * nh * t * t, 64);
            let out = x(&mut rng, b * t * c);
            let probs = x(&mut rng, b * nh * t * t);
            let shape = format!("{k:?} {p} b={b} t={t} c={c} nh={nh}");
            same(
                &format!("attention_forward {shape}"),
                both(&g, &[&out, &probs, &rows], &|| {
                    ka::attention_forward_with(&g, k, p, &out, &probs, &rows, &qkv, b, t, c, nh)
                        .unwrap()
                }),
            );
            same(
                &format!("attention_backward {shape}"),
                both(&g, &[&dqkv, &rows], &|| {
                    ka::attention_backward_with(
                        &g, k, p, &dqkv, &rows, &dout, &qkv, &att, b, t, c, nh,
                    )
                    .unwrap()
                }),
            );
        }
    }
}
