//! The matmul family in bf16 (`Linear::new(Precision::Bf16)`, and `.head()` for the LM head's
//! f32 logits / dlogits) vs its twins (`cpu::packed::matmul`) on awkward shapes: n = 1, sizes
//! smaller than a tile, edges that are not multiples of the 8×16 tile, rows whose length is not
//! a multiple of 4 (padded) or is odd (inputs whose rows start mid-word), with and without bias.
//!
//! Packed results are compared as bf16 values and must be bit-identical to the twin's, as
//! docs/precision.md claims: measured so on lavapipe and llvmpipe GL (111,256 forward and
//! 111,434 backward elements of each variant). Products of two bf16 factors are exact in f32
//! and every sum runs in the twin's order; a mismatch reports its distance in bf16 ulps.
//! Assigned outputs are poisoned first; `+=` outputs start random and the ops run twice (twin
//! called twice) to prove accumulation. The texture kernels (bf16 widened exactly as it is
//! packed) must give the same bits; they run on a few shapes only (`texture_kernels_match_twin`).
mod common;
mod twins;
use common::*;
use triaxis::error::Error;
use triaxis::gpu::{Gpu, View};
use triaxis::kernels::matmul::{self as k, Kernel, Linear};
use triaxis::precision::Precision;
use twins::packed::matmul as twin;

/// Every operand bf16.
const BF16: Linear = Linear::new(Precision::Bf16);
/// The LM head: bf16 weights and input, f32 logits / dlogits.
const HEAD: Linear = BF16.head();
use triaxis::kernels::Dispatch;
use triaxis::{gpu, rng::Rng};
use twins as cpu;

/// A word no kernel writes: both halves are signalling-NaN bf16, which no sum of finite
/// inputs rounds to.
const POISON_WORD: u32 = 0x7f81_ff81;
/// The f32 family test's tolerance (tests/matmul.rs), for f32 outputs.
const TOL: f32 = 1e-4;

fn open() -> Option<Gpu> {
    gpu::test_gpus(1).map(|mut v| v.remove(0))
}

/// `len` random normals, packed: `⌈len/2⌉` words.
fn packed(rng: &mut Rng, len: usize) -> Vec<u32> {
    cpu::pack_bf16(&rand(rng, len))
}

fn poisoned_words(g: &Gpu, len: usize) -> View {
    buf_u32(g, &vec![POISON_WORD; len.div_ceil(2)])
}

fn half_of(words: &[u32], i: usize) -> u16 {
    (words[i / 2] >> (16 * (i % 2))) as u16
}

/// bf16 bits on a line where adjacent values differ by 1 (±0 both at 0).
fn ordered(h: u16) -> i32 {
    let mag = (h & 0x7fff) as i32;
    if h & 0x8000 != 0 {
        -mag
    } else {
        mag
    }
}

/// Bit-identical and total element counts over one test.
#[derive(Default)]
struct Tally {
    same: usize,
    total: usize,
}

impl Tally {
    /// GPU vs twin packed words holding `len` elements: each element within 1 bf16 ulp (no
    /// NaN: poison left in place fails), the padding half of an odd last word as the twin's.
    fn packed(&mut self, name: &str, gpu: &[u32], cpu: &[u32], len: usize) {
        assert_eq!(gpu.len(), len.div_ceil(2), "{name}: word count");
        assert_eq!(gpu.len(), cpu.len(), "{name}: word count");
        let mut same = 0;
        for i in 0..len {
            let (a, b) = (half_of(gpu, i), half_of(cpu, i));
            assert!(
                a & 0x7fff <= 0x7f80,
                "{name}: element {i} not written or NaN: {a:#06x} (twin {b:#06x})"
            );
            let ulps = (ordered(a) - ordered(b)).abs();
            assert!(
                ulps <= 1,
                "{name}: element {i}: gpu {a:#06x} twin {b:#06x} ({ulps} bf16 ulps apart)"
            );
            same += usize::from(a == b);
        }
        if len % 2 == 1 {
            let (a, b) = (gpu[len / 2] >> 16, cpu[len / 2] >> 16);
            assert_eq!(a, b, "{name}: high half of the last word");
        }
        println!("{name}: {same}/{len} bit-identical");
        self.same += same;
        self.total += len;
    }

    fn finish(&self, name: &str) {
        println!("{name}: {}/{} bit-identical overall", self.same, self.total);
        assert_eq!(
            self.same, self.total,
            "{name}: only {}/{} elements bit-identical",
            self.same, self.total
        );
    }
}

/// (n, c, oc) for the bf16-output forward: oc even unless n = 1; c any (odd c: rows of inp and
/// weight start mid-word). A workgroup covers 64 rows × 128 columns of the output.
const FORWARD_SHAPES: [(usize, usize, usize); 11] = [
    (1, 1, 1),
    (1, 7, 33),
    (7, 33, 66),
    (66, 7, 34),
    (34, 65, 8),
    (3, 200, 6),
    (64, 64, 64),
    (130, 96, 72),
    (9, 4, 12),
    (17, 300, 2),
    (150, 36, 260),
];

/// (n, c, oc) for the f32-output forward: any oc.
const F32OUT_SHAPES: [(usize, usize, usize); 6] = [
    (1, 1, 1),
    (7, 33, 65),
    (65, 7, 33),
    (130, 96, 72),
    (33, 64, 7),
    (150, 36, 261),
];

/// (n, c, oc) for the backward: c even (dinp and dweight rows) unless n = oc = 1; oc any
/// (odd oc: rows of dout start mid-word).
const BACKWARD_SHAPES: [(usize, usize, usize); 11] = [
    (1, 1, 1),
    (1, 8, 5),
    (7, 34, 65),
    (65, 6, 33),
    (33, 66, 7),
    (3, 200, 5),
    (64, 64, 64),
    (130, 96, 72),
    (9, 4, 12),
    (17, 300, 2),
    (150, 36, 260),
];

/// Random packed input, weight and bias of a forward of `shape`, and their buffers on `g`.
fn operands(
    g: &Gpu,
    rng: &mut Rng,
    (n, c, oc): (usize, usize, usize),
) -> ([Vec<u32>; 3], [View; 3]) {
    let host = [packed(rng, n * c), packed(rng, oc * c), packed(rng, oc)];
    let views = [0, 1, 2].map(|i| buf_u32(g, &host[i]));
    (host, views)
}

fn forward(
    g: &Gpu,
    kernel: Kernel,
    tally: &mut Tally,
    rng: &mut Rng,
    shape: (usize, usize, usize),
    bias: bool,
) {
    let (n, c, oc) = shape;
    let ([x, w, b], [xb, wb, bb]) = operands(g, rng, shape);
    let out = poisoned_words(g, n * oc);
    let gb = bias.then_some(&bb);
    g.run(&k::matmul_forward(g, BF16.with(kernel), &out, &xb, &wb, gb, n, c, oc).unwrap())
        .unwrap();
    let mut want = vec![0; (n * oc).div_ceil(2)];
    twin::matmul_forward_bf16(&mut want, &x, &w, bias.then_some(&b[..]), n, c, oc);
    let name = format!("matmul_forward_bf16 {kernel:?} n={n} c={c} oc={oc} bias={bias}");
    tally.packed(&name, &g.download::<u32>(&out).unwrap(), &want, n * oc);
}

#[test]
fn forward_matches_twin() {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(21);
    let mut tally = Tally::default();
    for shape in FORWARD_SHAPES {
        for bias in [false, true] {
            forward(&g, Kernel::Buffer, &mut tally, &mut rng, shape, bias);
        }
    }
    tally.finish("matmul_forward_bf16");
}

#[test]
fn forward_f32out_matches_twin() {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(22);
    for shape in F32OUT_SHAPES {
        for bias in [false, true] {
            forward_f32out(&g, Kernel::Buffer, &mut rng, shape, bias);
        }
    }
}

fn forward_f32out(
    g: &Gpu,
    kernel: Kernel,
    rng: &mut Rng,
    shape: (usize, usize, usize),
    bias: bool,
) {
    let (n, c, oc) = shape;
    let ([x, w, b], [xb, wb, bb]) = operands(g, rng, shape);
    let out = poisoned(g, n * oc);
    let gb = bias.then_some(&bb);
    let ops = k::matmul_forward(g, HEAD.with(kernel), &out, &xb, &wb, gb, n, c, oc).unwrap();
    g.run(&ops).unwrap();
    let mut want = vec![0.0; n * oc];
    let tb = bias.then_some(&b[..]);
    twin::matmul_forward_bf16_f32out(&mut want, &x, &w, tb, n, c, oc);
    check(
        &format!("matmul_forward_bf16_f32out {kernel:?} n={n} c={c} oc={oc} bias={bias}"),
        &g.download::<f32>(&out).unwrap(),
        &want,
        TOL,
    );
}

/// Inputs of one backward test: dout (packed or f32), inp, weight, and the starting dweight
/// and dbias.
struct BackwardCase {
    n: usize,
    c: usize,
    oc: usize,
    dout: Vec<u32>,
    f32dout: bool,
    x: Vec<u32>,
    w: Vec<u32>,
    dw0: Vec<u32>,
    db0: Vec<u32>,
}

impl BackwardCase {
    fn new(rng: &mut Rng, (n, c, oc): (usize, usize, usize), f32dout: bool) -> BackwardCase {
        let dout = if f32dout {
            rand(rng, n * oc).iter().map(|v| v.to_bits()).collect()
        } else {
            packed(rng, n * oc)
        };
        BackwardCase {
            n,
            c,
            oc,
            dout,
            f32dout,
            x: packed(rng, n * c),
            w: packed(rng, oc * c),
            dw0: packed(rng, oc * c),
            db0: packed(rng, oc),
        }
    }

    /// The twin run `runs` times: (dinp, dweight, dbias) packed.
    fn twin(&self, bias: bool, runs: usize) -> [Vec<u32>; 3] {
        let (n, c, oc) = (self.n, self.c, self.oc);
        let mut dx = vec![0; (n * c).div_ceil(2)];
        let (mut dw, mut db) = (self.dw0.clone(), self.db0.clone());
        for _ in 0..runs {
            let dbias = bias.then_some(&mut db[..]);
            if self.f32dout {
                let dy: Vec<f32> = self.dout.iter().map(|&b| f32::from_bits(b)).collect();
                twin::matmul_backward_bf16_f32dout(
                    &mut dx, &mut dw, dbias, &dy, &self.x, &self.w, n, c, oc,
                );
            } else {
                twin::matmul_backward_bf16(
                    &mut dx, &mut dw, dbias, &self.dout, &self.x, &self.w, n, c, oc,
                );
            }
        }
        [dx, dw, db]
    }

    /// Runs the backward on `g`, unsplit or as the input half then the weight half, `runs`
    /// times: (dinp, dweight, dbias) packed.
    fn gpu(&self, g: &Gpu, kernel: Kernel, bias: bool, split: bool, runs: usize) -> [Vec<u32>; 3] {
        let (n, c, oc) = (self.n, self.c, self.oc);
        let (bf16, head) = (BF16.with(kernel), HEAD.with(kernel));
        let (dyb, xb, wb) = (
            buf_u32(g, &self.dout),
            buf_u32(g, &self.x),
            buf_u32(g, &self.w),
        );
        let (dinp, dwb, dbb) = (
            poisoned_words(g, n * c),
            buf_u32(g, &self.dw0),
            buf_u32(g, &self.db0),
        );
        let db = bias.then_some(&dbb);
        let ops: Vec<Dispatch> = match (split, self.f32dout) {
            (false, false) => {
                k::matmul_backward(g, bf16, &dinp, &dwb, db, &dyb, &xb, &wb, n, c, oc).unwrap()
            }
            (false, true) => {
                k::matmul_backward(g, head, &dinp, &dwb, db, &dyb, &xb, &wb, n, c, oc).unwrap()
            }
            (true, false) => {
                let mut ops =
                    k::matmul_backward_input(g, bf16, &dinp, &dyb, &wb, n, c, oc).unwrap();
                ops.extend(
                    k::matmul_backward_weight(g, bf16, &dwb, db, &dyb, &xb, n, c, oc).unwrap(),
                );
                ops
            }
            (true, true) => {
                let mut ops =
                    k::matmul_backward_input(g, head, &dinp, &dyb, &wb, n, c, oc).unwrap();
                ops.extend(
                    k::matmul_backward_weight(g, head, &dwb, db, &dyb, &xb, n, c, oc).unwrap(),
                );
                ops
            }
        };
        for _ in 0..runs {
            g.run(&ops).unwrap();
        }
        [&dinp, &dwb, &dbb].map(|v| g.download::<u32>(v).unwrap())
    }
}

/// GPU vs twin after two runs of the backward, for every shape, with and without bias.
fn backward_matches_twin(f32dout: bool, seed: u64) {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    for shape in BACKWARD_SHAPES {
        for bias in [false, true] {
            backward(
                &g,
                Kernel::Buffer,
                &mut tally,
                &mut rng,
                shape,
                bias,
                f32dout,
            );
        }
    }
    tally.finish(&format!("matmul_backward_bf16{}", variant(f32dout)));
}

fn variant(f32dout: bool) -> &'static str {
    if f32dout {
        "_f32dout"
    } else {
        ""
    }
}

/// One backward case run twice on `g` with `kernel`, against the twin run twice.
fn backward(
    g: &Gpu,
    kernel: Kernel,
    tally: &mut Tally,
    rng: &mut Rng,
    shape: (usize, usize, usize),
    bias: bool,
    f32dout: bool,
) {
    let (n, c, oc) = shape;
    let case = BackwardCase::new(rng, shape, f32dout);
    let [dx, dw, db] = case.gpu(g, kernel, bias, false, 2);
    let [want_dx, want_dw, want_db] = case.twin(bias, 2);
    let v = variant(f32dout);
    let name = format!("matmul_backward_bf16{v} {kernel:?} n={n} c={c} oc={oc} bias={bias}");
    tally.packed(&format!("{name} dinp"), &dx, &want_dx, n * c);
    tally.packed(&format!("{name} dweight"), &dw, &want_dw, oc * c);
    if bias {
        tally.packed(&format!("{name} dbias"), &db, &want_db, oc);
    } else {
        assert_eq!(db, case.db0, "{name}: dbias touched without a bias");
    }
}

#[test]
fn backward_matches_twin_accumulating() {
    backward_matches_twin(false, 23);
}

#[test]
fn backward_f32dout_matches_twin_accumulating() {
    backward_matches_twin(true, 24);
}

/// The texture kernels give the twin's bits too: each bf16 operand is widened exactly as it is
/// packed and the sums run in the same order. Cold, Mesa compiles a texture kernel again for
/// each new texture size, so they run on three shapes: a square one, whose products all pack
/// the same sizes, in every variant; one with odd rows (starting mid-word) in the forward; and
/// one whose rows are 64 and 128 elements long, so its operands are widened into f32 rows and
/// copied (`bf16_row_operands_are_widened_and_copied`), the transposed ones too for the
/// subgroup kernel.
#[test]
fn texture_kernels_match_twin() {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(28);
    let mut tally = Tally::default();
    for kernel in textured_kernels(&g) {
        forward(&g, kernel, &mut tally, &mut rng, (7, 33, 66), true);
        forward(&g, kernel, &mut tally, &mut rng, (66, 66, 66), true);
        forward_f32out(&g, kernel, &mut rng, (66, 66, 66), true);
        forward(&g, kernel, &mut tally, &mut rng, (37, 64, 128), true);
        forward_f32out(&g, kernel, &mut rng, (37, 64, 128), true);
        for (shape, f32dout) in [((66, 66, 66), false), ((66, 66, 66), true)]
            .into_iter()
            .chain([((37, 64, 128), false), ((37, 64, 128), true)])
        {
            backward(&g, kernel, &mut tally, &mut rng, shape, true, f32dout);
        }
    }
    tally.finish("texture kernels");
}

/// A bf16 operand whose rows are whole texel rows of a copy (256 bytes) is copied into its
/// texture instead of packed by a shader; transposed (wᵀ of the forward, doutᵀ of the weight
/// gradient) into a rows layout. Where the device writes rg32uint textures the texels
/// are packed bf16, so rows of 128 elements or a multiple are copied as stored; elsewhere (GL)
/// the texels are f32 and rows of 64 or a multiple are widened into f32 rows (`unpack`) first.
/// The bits are `texture_kernels_match_twin`'s.
#[test]
fn bf16_row_operands_are_copied() {
    let Some(g) = open() else { return };
    // c whole rows either way; oc = 192 only of f32 texels
    let (n, c, oc) = (37, 128, 192);
    let v = |len: usize| g.buffer("operand", Precision::Bf16.words(len));
    let (x, w, dout, out) = (v(n * c), v(oc * c), v(n * oc), v(n * oc));
    let (dinp, dw) = (v(n * c), v(oc * c));
    let words = g.has_word_textures();
    let per_row = if words { 128 } else { 64 };
    for kernel in textured_kernels(&g) {
        let l = BF16.with(kernel);
        let mut ops = k::matmul_forward(&g, l, &out, &x, &w, None, n, c, oc).unwrap();
        let back = k::matmul_backward(&g, l, &dinp, &dw, None, &dout, &x, &w, n, c, oc);
        ops.extend(back.unwrap());
        let copied = copied_operands(c, oc, per_row);
        let count = |label: &str| ops.iter().filter(|o| o.label == label).count();
        assert_eq!(count("matmul_copy"), copied, "{kernel:?}");
        let widened = if words { 0 } else { copied };
        assert_eq!(count("unpack"), widened, "{kernel:?}: widenings");
        assert_eq!(
            ops.iter()
                .filter(|o| o.label.starts_with("matmul_pack"))
                .count(),
            6 - copied,
            "{kernel:?}"
        );
    }
}

/// The zero-bubble split (input half, then weight half) gives the unsplit backward's bits.
#[test]
fn split_matches_unsplit_bits() {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(25);
    for f32dout in [false, true] {
        for shape in [(1, 8, 5), (7, 34, 65), (130, 96, 72)] {
            let case = BackwardCase::new(&mut rng, shape, f32dout);
            let unsplit = case.gpu(&g, Kernel::Buffer, true, false, 2);
            let split = case.gpu(&g, Kernel::Buffer, true, true, 2);
            assert!(
                unsplit == split,
                "split backward differs from unsplit: {shape:?} f32dout={f32dout}"
            );
        }
    }
}

/// Two runs of the same ops give bit-identical results, forward and backward.
#[test]
fn deterministic() {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(26);
    let (n, c, oc) = (130, 97, 72);
    let (x, w, b) = (
        packed(&mut rng, n * c),
        packed(&mut rng, oc * c),
        packed(&mut rng, oc),
    );
    let (xb, wb, bb) = (buf_u32(&g, &x), buf_u32(&g, &w), buf_u32(&g, &b));
    let mut results = Vec::new();
    for _ in 0..2 {
        let (out, logits) = (poisoned_words(&g, n * oc), poisoned(&g, n * oc));
        let mut ops = k::matmul_forward(&g, BF16, &out, &xb, &wb, Some(&bb), n, c, oc).unwrap();
        ops.extend(k::matmul_forward(&g, HEAD, &logits, &xb, &wb, Some(&bb), n, c, oc).unwrap());
        g.run(&ops).unwrap();
        let mut bits = g.download::<u32>(&out).unwrap();
        bits.extend(g.download::<u32>(&logits).unwrap());
        results.push(bits);
    }
    assert!(results[0] == results[1], "forward: two runs differ");
    for f32dout in [false, true] {
        let case = BackwardCase::new(&mut rng, (130, 96, 73), f32dout);
        let first = case.gpu(&g, Kernel::Buffer, true, false, 1);
        assert!(
            first == case.gpu(&g, Kernel::Buffer, true, false, 1),
            "backward f32dout={f32dout}: two runs differ"
        );
    }
}

/// Views at 64-aligned offsets inside larger buffers (as the flat parameter buffer gives them);
/// nothing outside the output view is written.
#[test]
fn offset_views_match_twin() {
    let Some(g) = open() else { return };
    let mut rng = Rng::new(27);
    let (n, c, oc) = (10, 13, 6);
    let (x, w, b) = (
        packed(&mut rng, n * c),
        packed(&mut rng, oc * c),
        packed(&mut rng, oc),
    );
    let mut host = vec![POISON_WORD; 64 + 192 + 64];
    host[64..64 + w.len()].copy_from_slice(&w);
    host[256..256 + b.len()].copy_from_slice(&b);
    let params = buf_u32(&g, &host);
    let (wv, bv) = (params.slice(64, w.len()), params.slice(256, b.len()));
    let words = (n * oc).div_ceil(2);
    let acts = buf_u32(&g, &vec![POISON_WORD; 128 + words + 64]);
    let out = acts.slice(128, words);
    let xb = buf_u32(&g, &x);
    g.run(&k::matmul_forward(&g, BF16, &out, &xb, &wv, Some(&bv), n, c, oc).unwrap())
        .unwrap();
    let mut want = vec![0; words];
    twin::matmul_forward_bf16(&mut want, &x, &w, Some(&b), n, c, oc);
    let mut tally = Tally::default();
    let got = g.download::<u32>(&acts).unwrap();
    tally.packed("offset views", &got[128..128 + words], &want, n * oc);
    tally.finish("offset views");
    assert!(
        got[..128]
            .iter()
            .chain(&got[128 + words..])
            .all(|&v| v == POISON_WORD),
        "wrote outside its view"
    );
}

fn config_error(r: triaxis::error::Result<Vec<Dispatch>>) -> Option<String> {
    match r {
        Err(Error::Config(m)) => Some(m),
        _ => None,
    }
}

/// Packed outputs of several rows need an even row length; the f32-logits forward does not.
#[test]
fn odd_output_rows_are_refused() {
    let Some(g) = open() else { return };
    let a = g.buffer("a", 256);
    let even = |r| config_error(r).is_some_and(|m| m.contains("bf16 matmul needs an even"));
    assert!(even(k::matmul_forward(&g, BF16, &a, &a, &a, None, 2, 4, 3)));
    assert!(even(k::matmul_backward(
        &g, BF16, &a, &a, None, &a, &a, &a, 2, 3, 4
    )));
    assert!(even(k::matmul_backward(
        &g, BF16, &a, &a, None, &a, &a, &a, 1, 3, 4
    )));
    assert!(even(k::matmul_backward(
        &g, HEAD, &a, &a, None, &a, &a, &a, 4, 5, 2
    )));
    assert!(even(k::matmul_backward_input(
        &g, BF16, &a, &a, &a, 2, 3, 1
    )));
    assert!(even(k::matmul_backward_weight(
        &g, BF16, &a, None, &a, &a, 1, 3, 2
    )));
    // a single row, and f32 logits, may have any length
    assert!(k::matmul_forward(&g, BF16, &a, &a, &a, None, 1, 4, 3).is_ok());
    assert!(k::matmul_forward(&g, HEAD, &a, &a, &a, None, 5, 4, 3).is_ok());
    assert!(k::matmul_backward_input(&g, BF16, &a, &a, &a, 1, 3, 2).is_ok());
    assert!(k::matmul_backward_weight(&g, BF16, &a, None, &a, &a, 2, 3, 1).is_ok());
}

#[test]
fn bad_arguments_are_errors() {
    let Some(g) = open() else { return };
    let (a, small) = (g.buffer("a", 64), g.buffer("small", 3));
    let err = |r| config_error(r).is_some();
    assert!(err(k::matmul_forward(&g, BF16, &a, &a, &a, None, 0, 4, 4)));
    // out [2,4] packed needs 4 words, f32 needs 8
    assert!(k::matmul_forward(&g, BF16, &g.buffer("o", 4), &a, &a, None, 2, 4, 4).is_ok());
    assert!(err(k::matmul_forward(
        &g, BF16, &small, &a, &a, None, 2, 4, 4
    )));
    assert!(err(k::matmul_forward(
        &g,
        HEAD,
        &g.buffer("o", 7),
        &a,
        &a,
        None,
        2,
        4,
        4
    )));
    assert!(err(k::matmul_forward(
        &g, BF16, &a, &small, &a, None, 2, 4, 4
    )));
    assert!(err(k::matmul_forward(
        &g, BF16, &a, &a, &small, None, 2, 4, 4
    )));
    assert!(err(k::matmul_forward(
        &g,
        BF16,
        &a,
        &a,
        &a,
        Some(&g.buffer("b", 1)),
        2,
        4,
        4
    )));
    assert!(err(k::matmul_backward(
        &g,
        BF16,
        &a,
        &a,
        Some(&g.buffer("b", 1)),
        &a,
        &a,
        &a,
        2,
        4,
        4
    )));
    assert!(err(k::matmul_backward(
        &g, BF16, &a, &small, None, &a, &a, &a, 2, 4, 4
    )));
    assert!(err(k::matmul_backward(
        &g, BF16, &small, &a, None, &a, &a, &a, 2, 4, 4
    )));
    assert!(err(k::matmul_backward(
        &g,
        HEAD,
        &a,
        &a,
        None,
        &g.buffer("d", 7),
        &a,
        &a,
        2,
        4,
        4
    )));
    assert!(err(k::matmul_backward(
        &g, BF16, &a, &a, None, &a, &a, &small, 2, 4, 4
    )));
}
