//! Shared test helpers: random inputs, poisoned outputs, error reports.
// The norm and AdamW take lists of ranges; a list of one range is what these tests mean.
#![allow(clippy::single_range_in_vec_init)]
#![allow(dead_code)]

pub mod example;
pub mod packed;
pub mod steps;
pub mod tiny;

use triaxis::gpu::{Gpu, View};
use triaxis::kernels::matmul::Kernel;
use triaxis::pipeline::{
    dual_pipe_v, gpipe, interleaved, one_f_one_b, zero_bubble_h1, zero_bubble_v, Schedule,
};
use triaxis::rng::Rng;

/// A value no kernel writes: an unwritten output element fails every comparison.
pub const POISON: f32 = f32::NAN;

/// Weight-decay ranges for an AdamW test over `n` elements: for n > 64 the first 64-element
/// block, a gap, then from 128 to the end (a partial last block); for n ≤ 64 all or nothing.
pub fn decay_ranges(n: usize) -> Vec<std::ops::Range<usize>> {
    match n {
        0..=64 if n % 2 == 1 => vec![0..n],
        0..=64 => vec![],
        _ => vec![0..64, 128.min(n)..n],
    }
}

/// The compute dispatches among `ops` (not the copies that feed texture reads).
pub fn dispatches(ops: &[triaxis::kernels::Dispatch]) -> usize {
    use triaxis::gpu::Record;
    ops.iter().filter(|o| !o.is_copy()).count()
}

/// Uploads `data` into a fresh buffer.
pub fn buf(g: &Gpu, data: &[f32]) -> View {
    let v = g.buffer("test", data.len());
    g.upload(&v, data).unwrap();
    v
}

pub fn buf_u32(g: &Gpu, data: &[u32]) -> View {
    let v = g.buffer("test", data.len());
    g.upload(&v, data).unwrap();
    v
}

/// A buffer of `n` poisoned elements.
pub fn poisoned(g: &Gpu, n: usize) -> View {
    buf(g, &vec![POISON; n])
}

/// (kernel, shape) cases of a matmul test on `g`: the buffer kernel on every shape; the
/// portable texture kernel, and the subgroup one where `g`'s subgroups are 8 lanes, on the
/// first, third and last. (Mesa JIT-compiles a texture kernel again for new texture sizes, at
/// seconds a time: a few shapes keep the test fast.)
pub fn matmul_cases<S: Copy>(g: &Gpu, shapes: &[S]) -> Vec<(Kernel, S)> {
    let mut v: Vec<(Kernel, S)> = shapes.iter().map(|&s| (Kernel::Buffer, s)).collect();
    let picked = [0, 2, shapes.len() - 1];
    for k in textured_kernels(g) {
        v.extend(
            picked
                .iter()
                .filter_map(|&i| shapes.get(i))
                .map(|&s| (k, s)),
        );
    }
    v
}

/// The texture kernels `g` runs: the portable one, and the subgroup one where its subgroups are
/// 8 lanes.
pub fn textured_kernels(g: &Gpu) -> Vec<Kernel> {
    let mut v = vec![Kernel::Texture];
    if g.subgroup_lanes() == Some(8) {
        v.push(Kernel::Subgroup);
    }
    v
}

/// How many of a matmul's six texture operands (forward: inp, wᵀ; input gradient: dout, w;
/// weight gradient: doutᵀ, inp) a texture kernel copies instead of packing, for inputs of `c`
/// channels and outputs of `oc`: those whose rows are whole texel rows (a multiple of
/// `per_row` elements: 64 f32 or widened bf16 ones, 128 bf16 ones as stored), transposed ones
/// in a rows layout (one operand of a product at most: here never both).
pub fn copied_operands(c: usize, oc: usize, per_row: usize) -> usize {
    let rows = [
        (c, false),
        (c, true),
        (oc, false),
        (c, false),
        (oc, true),
        (c, false),
    ];
    rows.iter().filter(|&&(len, _)| len % per_row == 0).count()
}

pub fn rand(rng: &mut Rng, n: usize) -> Vec<f32> {
    rng.vec(n, 1.0)
}

/// Compares GPU output with the CPU twin; prints and returns (max abs, max rel) error.
/// Fails on NaN (poison left in place) or error above `tol` (abs or rel, whichever is looser).
pub fn check(name: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> (f32, f32) {
    assert_eq!(gpu.len(), cpu.len(), "{name}: length");
    let (mut abs, mut rel) = (0.0f32, 0.0f32);
    for (i, (&a, &b)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            a.is_finite(),
            "{name}: element {i} not written or not finite: {a} (cpu {b})"
        );
        let e = (a - b).abs();
        let r = e / b.abs().max(1e-6);
        assert!(
            e <= tol || r <= tol,
            "{name}: element {i}: gpu {a} cpu {b} (abs {e}, rel {r})"
        );
        abs = abs.max(e);
        rel = rel.max(r.min(e / tol.max(1e-12) * tol));
    }
    println!(
        "{name}: n={} max abs err {abs:.3e}, max rel err {rel:.3e}",
        gpu.len()
    );
    (abs, rel)
}

/// Every constructor over a grid of (p, m, v).
pub fn all_schedules() -> Vec<Schedule> {
    let mut out = Vec::new();
    for p in [1, 2, 3, 4, 8] {
        for m in [1, 2, 4, 8, 16, 64] {
            out.push(gpipe(p, m).unwrap());
            out.push(one_f_one_b(p, m).unwrap());
            out.push(zero_bubble_h1(p, m).unwrap());
            out.push(zero_bubble_v(p, m).unwrap());
            if m >= 2 * p {
                out.push(dual_pipe_v(p, m).unwrap());
            }
            for v in [1, 2, 3] {
                if m % p == 0 {
                    out.push(interleaved(p, m, v).unwrap());
                }
            }
        }
    }
    out
}

/// Microbatches of 2-digit addition for training tests: `steps` lists of `n` microbatches
/// of shape `micro`, drawn from a small corpus (`corpus_seed`) by a batcher (`batch_seed`).
pub fn addition_batches(
    corpus_seed: u64,
    batch_seed: u64,
    n: usize,
    steps: usize,
    micro: triaxis::model::Micro,
) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    let c = triaxis::data::Corpus::addition(triaxis::data::AdditionSpec {
        digits: 2,
        train_problems: 300,
        val_problems: 20,
        seed: corpus_seed,
        reverse: true,
        pad: false,
    })
    .unwrap();
    let mut b = triaxis::data::Batcher::new(batch_seed);
    (0..steps)
        .map(|_| {
            (0..n)
                .map(|_| c.train_batch(&mut b, micro).unwrap())
                .collect()
        })
        .collect()
}

/// Normwise relative error ‖a − b‖₂ / ‖b‖₂ (f64 sums).
pub fn l2_rel(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}
