// Matmul family: C[M,N] (= or +=) Σ_k A(m,k)·B(k,n) (+ bias[n]), register-tiled, for the three
// products of a linear layer (all matrices row-major), one source for both precisions behind
// the storage prelude (store_f32.wgsl, or bf16_bits.wgsl + store_bf16.wgsl):
//
//   matmul_nt   C = A[M,K] · B[N,K]ᵀ    forward   out      = inp · weightᵀ + bias
//   matmul_nn   C = A[M,K] · B[K,N]     backward  dinp     = dout · weight
//   matmul_tn   C = A[K,M]ᵀ · B[K,N]    backward  dweight += doutᵀ · inp
//
// Each invocation owns an 8×16 tile of C in 32 vec4 registers c{i}_{J} = C[m0+i, n0+4J .. +3];
// a workgroup of 8×8 invocations covers 64×128 of C. Operands are read four elements at a time
// (a `Quad`: four f32 words, or two words of bf16 pairs) along their contiguous axis (the host
// pads a matrix whose row length is not a multiple of 4 into a zero-filled copy with
// `matmul_pad`). One k-step of 4 loads 4×4 blocks and does 128 chained fma, in the same form
// for every layout:
//
//              n0 ......... n0+15
//            ┌─────┬─────┬─────┬─────┐    B{J} = mat4x4: column c = B(k+c, n0+4J .. n0+4J+3)
//     m0+i → │ c_0 │ c_1 │ c_2 │ c_3 │    α_i  = vec4:   A(m0+i, k .. k+3)
//            └─────┴─────┴─────┴─────┘    c{i}_{J} = mac(c{i}_{J}, α_i, B{J})
//      (8 rows)                               = c + α.x·B[0] + α.y·B[1] + α.z·B[2] + α.w·B[3]
//
// Loads cost most on CPU adapters (a storage load with a per-lane address is a loop over the
// lanes), so the tile is large, every loop body is unrolled by hand, and edge tiles clamp their
// row/column indices into range instead of branching in the k loop; the store skips elements
// outside C (unrolled, the k loop runs ~6× faster on lavapipe than with loops over arrays).
// Every element sums its products in f32, in k order from the bias, so results are
// deterministic; operands are widened exactly on load, and a bf16 C is rounded (to nearest
// even) only when stored; an accumulated bf16 C widens the old value, adds the finished sum and
// rounds. Under bf16, A may be f32 (A_F32: the LM head's dlogits) and C f32 (C_F32: its
// logits). A bf16 row of C starts on a word boundary (the host requires N even, or M = 1), so
// each invocation writes whole words; the last word of an odd single row gets a zero high half.
//
// After the three buffer kernels come the texture path that large f32 products take on
// lavapipe (matmul_pack, matmul_pack4, matmul_tex), then matmul_pad, matmul_pad_f32 and
// matmul_bias_backward.

struct Dims {
    m: u32,     // rows of C
    n: u32,     // columns of C (= its row stride, in elements)
    k: u32,     // reduction length
    sa: u32,    // A row stride in Quads (4 elements)
    sb: u32,    // B row stride in Quads
    flags: u32, // ACCUMULATE | BIAS | A_F32 | C_F32
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<storage, read_write> c_out: array<u32>;
@group(0) @binding(2) var<storage, read> av: array<Quad>;
@group(0) @binding(3) var<storage, read> bv: array<Quad>;
@group(0) @binding(4) var<storage, read> bias: array<u32>;
// The pad, pack and bias kernels read binding 2 word by word.
@group(0) @binding(2) var<storage, read> aw: array<u32>;

const ACCUMULATE: u32 = 1u; // C += A·B (else C = A·B)
const BIAS: u32 = 2u;       // start every row of C at bias[n]
const A_F32: u32 = 4u;      // bf16 only: A holds f32 words
const C_F32: u32 = 8u;      // bf16 only: C holds f32 words

// A(4q .. 4q+3) along its stored row: Quad index q (an f32 A under bf16: words 4q .. 4q+3).
fn lda(q: u32) -> vec4<f32> {
    if (LANES == 2u && (d.flags & A_F32) != 0u) {
        return quad_f32(av[LANES * q], av[LANES * q + LANES - 1u]);
    }
    return quad(av[q]);
}

// B(4q .. 4q+3) along its stored row.
fn ldb(q: u32) -> vec4<f32> {
    return quad(bv[q]);
}

// Element e of an array of the run's precision, widened.
fn elem(words: u32, e: u32) -> f32 {
    return lane(words, e % LANES);
}

// c + a.x·b[0] + a.y·b[1] + a.z·b[2] + a.w·b[3], one fma chain.
fn mac(c: vec4<f32>, a: vec4<f32>, b: mat4x4<f32>) -> vec4<f32> {
    return fma(vec4<f32>(a.w), b[3], fma(vec4<f32>(a.z), b[2], fma(vec4<f32>(a.y), b[1], fma(vec4<f32>(a.x), b[0], c))));
}

// Index r clamped into [0, rows): edge tiles read valid data and discard it at the store.
fn row(r: u32, rows: u32) -> u32 {
    return min(r, rows - 1u);
}

// Quad index of column n in a row of s4 Quads, clamped into the row.
fn col4(n: u32, s4: u32) -> u32 {
    return min(n / 4u, s4 - 1u);
}

fn bias_at(n: u32) -> f32 {
    let e = row(n, d.n);
    return elem(bias[e / LANES], e);
}

// bias[n .. n+3] (clamped) when BIAS is set, else zero: the start value of a tile row, as the
// CPU twin starts its sums at the bias.
fn bias4(n: u32) -> vec4<f32> {
    if ((d.flags & BIAS) == 0u) { return vec4<f32>(0.0); }
    return vec4<f32>(bias_at(n), bias_at(n + 1u), bias_at(n + 2u), bias_at(n + 3u));
}

// Writes C[m, n .. n+3] (n a multiple of 4) from v, skipping elements outside C; adds the old
// value first if ACCUMULATE. bf16: two whole words, (n, n+1) and (n+2, n+3).
fn store4(m: u32, n: u32, v: vec4<f32>) {
    if (m >= d.m) { return; }
    let acc = (d.flags & ACCUMULATE) != 0u;
    if (LANES == 1u || (d.flags & C_F32) != 0u) {
        for (var j = 0u; j < 4u; j++) {
            let col = n + j;
            if (col >= d.n) { return; }
            let i = m * d.n + col;
            var x = v[j];
            if (acc) { x += bitcast<f32>(c_out[i]); }
            c_out[i] = bitcast<u32>(x);
        }
        return;
    }
    for (var j = 0u; j < 4u; j += 2u) {
        let col = n + j;
        if (col >= d.n) { return; }
        let w = (m * d.n + col) / 2u; // m·N + col is even (N even, or m = 0)
        var x = vec2<f32>(v[j], v[j + 1u]);
        if (acc) {
            let old = c_out[w];
            x += vec2<f32>(lane(old, 0u), lane(old, 1u));
        }
        c_out[w] = word(w, x, d.m * d.n);
    }
}

// ---- matmul_nt(c, a, b, bias): A[M,K], B[N,K], both padded along K (sa = sb = ⌈K/4⌉) ----
@compute @workgroup_size(8, 8)
fn matmul_nt(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 16u;
    if (m0 >= d.m || n0 >= d.n) { return; }
    let z0 = bias4(n0 + 0u);
    let z1 = bias4(n0 + 4u);
    let z2 = bias4(n0 + 8u);
    let z3 = bias4(n0 + 12u);
    var c0_0 = z0; var c0_1 = z1; var c0_2 = z2; var c0_3 = z3;
    var c1_0 = z0; var c1_1 = z1; var c1_2 = z2; var c1_3 = z3;
    var c2_0 = z0; var c2_1 = z1; var c2_2 = z2; var c2_3 = z3;
    var c3_0 = z0; var c3_1 = z1; var c3_2 = z2; var c3_3 = z3;
    var c4_0 = z0; var c4_1 = z1; var c4_2 = z2; var c4_3 = z3;
    var c5_0 = z0; var c5_1 = z1; var c5_2 = z2; var c5_3 = z3;
    var c6_0 = z0; var c6_1 = z1; var c6_2 = z2; var c6_3 = z3;
    var c7_0 = z0; var c7_1 = z1; var c7_2 = z2; var c7_3 = z3;
    let ra0 = row(m0 + 0u, d.m) * d.sa; let ra1 = row(m0 + 1u, d.m) * d.sa; let ra2 = row(m0 + 2u, d.m) * d.sa; let ra3 = row(m0 + 3u, d.m) * d.sa;
    let ra4 = row(m0 + 4u, d.m) * d.sa; let ra5 = row(m0 + 5u, d.m) * d.sa; let ra6 = row(m0 + 6u, d.m) * d.sa; let ra7 = row(m0 + 7u, d.m) * d.sa;
    let rb0 = row(n0 + 0u, d.n) * d.sb; let rb1 = row(n0 + 1u, d.n) * d.sb; let rb2 = row(n0 + 2u, d.n) * d.sb; let rb3 = row(n0 + 3u, d.n) * d.sb;
    let rb4 = row(n0 + 4u, d.n) * d.sb; let rb5 = row(n0 + 5u, d.n) * d.sb; let rb6 = row(n0 + 6u, d.n) * d.sb; let rb7 = row(n0 + 7u, d.n) * d.sb;
    let rb8 = row(n0 + 8u, d.n) * d.sb; let rb9 = row(n0 + 9u, d.n) * d.sb; let rb10 = row(n0 + 10u, d.n) * d.sb; let rb11 = row(n0 + 11u, d.n) * d.sb;
    let rb12 = row(n0 + 12u, d.n) * d.sb; let rb13 = row(n0 + 13u, d.n) * d.sb; let rb14 = row(n0 + 14u, d.n) * d.sb; let rb15 = row(n0 + 15u, d.n) * d.sb;
    for (var t = 0u; t < d.sa; t++) {
        // α_i = A(m0+i, 4t .. 4t+3) is a loaded row; B{J} transposes four loaded rows of B.
        let a0 = lda(ra0 + t); let a1 = lda(ra1 + t); let a2 = lda(ra2 + t); let a3 = lda(ra3 + t);
        let a4 = lda(ra4 + t); let a5 = lda(ra5 + t); let a6 = lda(ra6 + t); let a7 = lda(ra7 + t);
        let B0 = transpose(mat4x4<f32>(ldb(rb0 + t), ldb(rb1 + t), ldb(rb2 + t), ldb(rb3 + t)));
        let B1 = transpose(mat4x4<f32>(ldb(rb4 + t), ldb(rb5 + t), ldb(rb6 + t), ldb(rb7 + t)));
        let B2 = transpose(mat4x4<f32>(ldb(rb8 + t), ldb(rb9 + t), ldb(rb10 + t), ldb(rb11 + t)));
        let B3 = transpose(mat4x4<f32>(ldb(rb12 + t), ldb(rb13 + t), ldb(rb14 + t), ldb(rb15 + t)));
        c0_0 = mac(c0_0, a0, B0); c0_1 = mac(c0_1, a0, B1); c0_2 = mac(c0_2, a0, B2); c0_3 = mac(c0_3, a0, B3);
        c1_0 = mac(c1_0, a1, B0); c1_1 = mac(c1_1, a1, B1); c1_2 = mac(c1_2, a1, B2); c1_3 = mac(c1_3, a1, B3);
        c2_0 = mac(c2_0, a2, B0); c2_1 = mac(c2_1, a2, B1); c2_2 = mac(c2_2, a2, B2); c2_3 = mac(c2_3, a2, B3);
        c3_0 = mac(c3_0, a3, B0); c3_1 = mac(c3_1, a3, B1); c3_2 = mac(c3_2, a3, B2); c3_3 = mac(c3_3, a3, B3);
        c4_0 = mac(c4_0, a4, B0); c4_1 = mac(c4_1, a4, B1); c4_2 = mac(c4_2, a4, B2); c4_3 = mac(c4_3, a4, B3);
        c5_0 = mac(c5_0, a5, B0); c5_1 = mac(c5_1, a5, B1); c5_2 = mac(c5_2, a5, B2); c5_3 = mac(c5_3, a5, B3);
        c6_0 = mac(c6_0, a6, B0); c6_1 = mac(c6_1, a6, B1); c6_2 = mac(c6_2, a6, B2); c6_3 = mac(c6_3, a6, B3);
        c7_0 = mac(c7_0, a7, B0); c7_1 = mac(c7_1, a7, B1); c7_2 = mac(c7_2, a7, B2); c7_3 = mac(c7_3, a7, B3);
    }
    put_c(m0 + 0u, n0 + 0u, c0_0); put_c(m0 + 0u, n0 + 4u, c0_1); put_c(m0 + 0u, n0 + 8u, c0_2); put_c(m0 + 0u, n0 + 12u, c0_3);
    put_c(m0 + 1u, n0 + 0u, c1_0); put_c(m0 + 1u, n0 + 4u, c1_1); put_c(m0 + 1u, n0 + 8u, c1_2); put_c(m0 + 1u, n0 + 12u, c1_3);
    put_c(m0 + 2u, n0 + 0u, c2_0); put_c(m0 + 2u, n0 + 4u, c2_1); put_c(m0 + 2u, n0 + 8u, c2_2); put_c(m0 + 2u, n0 + 12u, c2_3);
    put_c(m0 + 3u, n0 + 0u, c3_0); put_c(m0 + 3u, n0 + 4u, c3_1); put_c(m0 + 3u, n0 + 8u, c3_2); put_c(m0 + 3u, n0 + 12u, c3_3);
    put_c(m0 + 4u, n0 + 0u, c4_0); put_c(m0 + 4u, n0 + 4u, c4_1); put_c(m0 + 4u, n0 + 8u, c4_2); put_c(m0 + 4u, n0 + 12u, c4_3);
    put_c(m0 + 5u, n0 + 0u, c5_0); put_c(m0 + 5u, n0 + 4u, c5_1); put_c(m0 + 5u, n0 + 8u, c5_2); put_c(m0 + 5u, n0 + 12u, c5_3);
    put_c(m0 + 6u, n0 + 0u, c6_0); put_c(m0 + 6u, n0 + 4u, c6_1); put_c(m0 + 6u, n0 + 8u, c6_2); put_c(m0 + 6u, n0 + 12u, c6_3);
    put_c(m0 + 7u, n0 + 0u, c7_0); put_c(m0 + 7u, n0 + 4u, c7_1); put_c(m0 + 7u, n0 + 8u, c7_2); put_c(m0 + 7u, n0 + 12u, c7_3);
}

// ---- matmul_nn(c, a, b, bias): A[M,K] padded along K (sa = ⌈K/4⌉), B[K,N] (sb = ⌈N/4⌉) ----
@compute @workgroup_size(8, 8)
fn matmul_nn(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 16u;
    if (m0 >= d.m || n0 >= d.n) { return; }
    let z0 = bias4(n0 + 0u);
    let z1 = bias4(n0 + 4u);
    let z2 = bias4(n0 + 8u);
    let z3 = bias4(n0 + 12u);
    var c0_0 = z0; var c0_1 = z1; var c0_2 = z2; var c0_3 = z3;
    var c1_0 = z0; var c1_1 = z1; var c1_2 = z2; var c1_3 = z3;
    var c2_0 = z0; var c2_1 = z1; var c2_2 = z2; var c2_3 = z3;
    var c3_0 = z0; var c3_1 = z1; var c3_2 = z2; var c3_3 = z3;
    var c4_0 = z0; var c4_1 = z1; var c4_2 = z2; var c4_3 = z3;
    var c5_0 = z0; var c5_1 = z1; var c5_2 = z2; var c5_3 = z3;
    var c6_0 = z0; var c6_1 = z1; var c6_2 = z2; var c6_3 = z3;
    var c7_0 = z0; var c7_1 = z1; var c7_2 = z2; var c7_3 = z3;
    let ra0 = row(m0 + 0u, d.m) * d.sa; let ra1 = row(m0 + 1u, d.m) * d.sa; let ra2 = row(m0 + 2u, d.m) * d.sa; let ra3 = row(m0 + 3u, d.m) * d.sa;
    let ra4 = row(m0 + 4u, d.m) * d.sa; let ra5 = row(m0 + 5u, d.m) * d.sa; let ra6 = row(m0 + 6u, d.m) * d.sa; let ra7 = row(m0 + 7u, d.m) * d.sa;
    let q0 = col4(n0 + 0u, d.sb); let q1 = col4(n0 + 4u, d.sb); let q2 = col4(n0 + 8u, d.sb); let q3 = col4(n0 + 12u, d.sb);
    for (var t = 0u; t < d.sa; t++) {
        let a0 = lda(ra0 + t); let a1 = lda(ra1 + t); let a2 = lda(ra2 + t); let a3 = lda(ra3 + t);
        let a4 = lda(ra4 + t); let a5 = lda(ra5 + t); let a6 = lda(ra6 + t); let a7 = lda(ra7 + t);
        // Rows of B past K are clamped; A is zero there (padding), so they add nothing.
        let k0 = row(t * 4u + 0u, d.k) * d.sb;
        let k1 = row(t * 4u + 1u, d.k) * d.sb;
        let k2 = row(t * 4u + 2u, d.k) * d.sb;
        let k3 = row(t * 4u + 3u, d.k) * d.sb;
        let B0 = mat4x4<f32>(ldb(k0 + q0), ldb(k1 + q0), ldb(k2 + q0), ldb(k3 + q0));
        let B1 = mat4x4<f32>(ldb(k0 + q1), ldb(k1 + q1), ldb(k2 + q1), ldb(k3 + q1));
        let B2 = mat4x4<f32>(ldb(k0 + q2), ldb(k1 + q2), ldb(k2 + q2), ldb(k3 + q2));
        let B3 = mat4x4<f32>(ldb(k0 + q3), ldb(k1 + q3), ldb(k2 + q3), ldb(k3 + q3));
        c0_0 = mac(c0_0, a0, B0); c0_1 = mac(c0_1, a0, B1); c0_2 = mac(c0_2, a0, B2); c0_3 = mac(c0_3, a0, B3);
        c1_0 = mac(c1_0, a1, B0); c1_1 = mac(c1_1, a1, B1); c1_2 = mac(c1_2, a1, B2); c1_3 = mac(c1_3, a1, B3);
        c2_0 = mac(c2_0, a2, B0); c2_1 = mac(c2_1, a2, B1); c2_2 = mac(c2_2, a2, B2); c2_3 = mac(c2_3, a2, B3);
        c3_0 = mac(c3_0, a3, B0); c3_1 = mac(c3_1, a3, B1); c3_2 = mac(c3_2, a3, B2); c3_3 = mac(c3_3, a3, B3);
        c4_0 = mac(c4_0, a4, B0); c4_1 = mac(c4_1, a4, B1); c4_2 = mac(c4_2, a4, B2); c4_3 = mac(c4_3, a4, B3);
        c5_0 = mac(c5_0, a5, B0); c5_1 = mac(c5_1, a5, B1); c5_2 = mac(c5_2, a5, B2); c5_3 = mac(c5_3, a5, B3);
        c6_0 = mac(c6_0, a6, B0); c6_1 = mac(c6_1, a6, B1); c6_2 = mac(c6_2, a6, B2); c6_3 = mac(c6_3, a6, B3);
        c7_0 = mac(c7_0, a7, B0); c7_1 = mac(c7_1, a7, B1); c7_2 = mac(c7_2, a7, B2); c7_3 = mac(c7_3, a7, B3);
    }
    put_c(m0 + 0u, n0 + 0u, c0_0); put_c(m0 + 0u, n0 + 4u, c0_1); put_c(m0 + 0u, n0 + 8u, c0_2); put_c(m0 + 0u, n0 + 12u, c0_3);
    put_c(m0 + 1u, n0 + 0u, c1_0); put_c(m0 + 1u, n0 + 4u, c1_1); put_c(m0 + 1u, n0 + 8u, c1_2); put_c(m0 + 1u, n0 + 12u, c1_3);
    put_c(m0 + 2u, n0 + 0u, c2_0); put_c(m0 + 2u, n0 + 4u, c2_1); put_c(m0 + 2u, n0 + 8u, c2_2); put_c(m0 + 2u, n0 + 12u, c2_3);
    put_c(m0 + 3u, n0 + 0u, c3_0); put_c(m0 + 3u, n0 + 4u, c3_1); put_c(m0 + 3u, n0 + 8u, c3_2); put_c(m0 + 3u, n0 + 12u, c3_3);
    put_c(m0 + 4u, n0 + 0u, c4_0); put_c(m0 + 4u, n0 + 4u, c4_1); put_c(m0 + 4u, n0 + 8u, c4_2); put_c(m0 + 4u, n0 + 12u, c4_3);
    put_c(m0 + 5u, n0 + 0u, c5_0); put_c(m0 + 5u, n0 + 4u, c5_1); put_c(m0 + 5u, n0 + 8u, c5_2); put_c(m0 + 5u, n0 + 12u, c5_3);
    put_c(m0 + 6u, n0 + 0u, c6_0); put_c(m0 + 6u, n0 + 4u, c6_1); put_c(m0 + 6u, n0 + 8u, c6_2); put_c(m0 + 6u, n0 + 12u, c6_3);
    put_c(m0 + 7u, n0 + 0u, c7_0); put_c(m0 + 7u, n0 + 4u, c7_1); put_c(m0 + 7u, n0 + 8u, c7_2); put_c(m0 + 7u, n0 + 12u, c7_3);
}

// ---- matmul_tn(c, a, b, bias): A[K,M] (sa = ⌈M/4⌉), B[K,N] (sb = ⌈N/4⌉), any K ----
@compute @workgroup_size(8, 8)
fn matmul_tn(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 16u;
    if (m0 >= d.m || n0 >= d.n) { return; }
    let z0 = bias4(n0 + 0u);
    let z1 = bias4(n0 + 4u);
    let z2 = bias4(n0 + 8u);
    let z3 = bias4(n0 + 12u);
    var c0_0 = z0; var c0_1 = z1; var c0_2 = z2; var c0_3 = z3;
    var c1_0 = z0; var c1_1 = z1; var c1_2 = z2; var c1_3 = z3;
    var c2_0 = z0; var c2_1 = z1; var c2_2 = z2; var c2_3 = z3;
    var c3_0 = z0; var c3_1 = z1; var c3_2 = z2; var c3_3 = z3;
    var c4_0 = z0; var c4_1 = z1; var c4_2 = z2; var c4_3 = z3;
    var c5_0 = z0; var c5_1 = z1; var c5_2 = z2; var c5_3 = z3;
    var c6_0 = z0; var c6_1 = z1; var c6_2 = z2; var c6_3 = z3;
    var c7_0 = z0; var c7_1 = z1; var c7_2 = z2; var c7_3 = z3;
    let p0 = col4(m0 + 0u, d.sa); let p1 = col4(m0 + 4u, d.sa);
    let q0 = col4(n0 + 0u, d.sb); let q1 = col4(n0 + 4u, d.sb); let q2 = col4(n0 + 8u, d.sb); let q3 = col4(n0 + 12u, d.sb);
    let full = d.k / 4u * 4u;
    for (var k = 0u; k < full; k += 4u) {
        // A{I} transposes rows k .. k+3 of A, so its column r is α_{4I+r} = A(k .. k+3, m0+4I+r).
        let ka = k * d.sa;
        let kb = k * d.sb;
        let A0 = transpose(mat4x4<f32>(lda(ka + p0), lda(ka + d.sa + p0), lda(ka + 2u * d.sa + p0), lda(ka + 3u * d.sa + p0)));
        let A1 = transpose(mat4x4<f32>(lda(ka + p1), lda(ka + d.sa + p1), lda(ka + 2u * d.sa + p1), lda(ka + 3u * d.sa + p1)));
        let B0 = mat4x4<f32>(ldb(kb + q0), ldb(kb + d.sb + q0), ldb(kb + 2u * d.sb + q0), ldb(kb + 3u * d.sb + q0));
        let B1 = mat4x4<f32>(ldb(kb + q1), ldb(kb + d.sb + q1), ldb(kb + 2u * d.sb + q1), ldb(kb + 3u * d.sb + q1));
        let B2 = mat4x4<f32>(ldb(kb + q2), ldb(kb + d.sb + q2), ldb(kb + 2u * d.sb + q2), ldb(kb + 3u * d.sb + q2));
        let B3 = mat4x4<f32>(ldb(kb + q3), ldb(kb + d.sb + q3), ldb(kb + 2u * d.sb + q3), ldb(kb + 3u * d.sb + q3));
        c0_0 = mac(c0_0, A0[0], B0); c0_1 = mac(c0_1, A0[0], B1); c0_2 = mac(c0_2, A0[0], B2); c0_3 = mac(c0_3, A0[0], B3);
        c1_0 = mac(c1_0, A0[1], B0); c1_1 = mac(c1_1, A0[1], B1); c1_2 = mac(c1_2, A0[1], B2); c1_3 = mac(c1_3, A0[1], B3);
        c2_0 = mac(c2_0, A0[2], B0); c2_1 = mac(c2_1, A0[2], B1); c2_2 = mac(c2_2, A0[2], B2); c2_3 = mac(c2_3, A0[2], B3);
        c3_0 = mac(c3_0, A0[3], B0); c3_1 = mac(c3_1, A0[3], B1); c3_2 = mac(c3_2, A0[3], B2); c3_3 = mac(c3_3, A0[3], B3);
        c4_0 = mac(c4_0, A1[0], B0); c4_1 = mac(c4_1, A1[0], B1); c4_2 = mac(c4_2, A1[0], B2); c4_3 = mac(c4_3, A1[0], B3);
        c5_0 = mac(c5_0, A1[1], B0); c5_1 = mac(c5_1, A1[1], B1); c5_2 = mac(c5_2, A1[1], B2); c5_3 = mac(c5_3, A1[1], B3);
        c6_0 = mac(c6_0, A1[2], B0); c6_1 = mac(c6_1, A1[2], B1); c6_2 = mac(c6_2, A1[2], B2); c6_3 = mac(c6_3, A1[2], B3);
        c7_0 = mac(c7_0, A1[3], B0); c7_1 = mac(c7_1, A1[3], B1); c7_2 = mac(c7_2, A1[3], B2); c7_3 = mac(c7_3, A1[3], B3);
    }
    // The last K mod 4 rows, one at a time.
    for (var k = full; k < d.k; k++) {
        let a0 = lda(k * d.sa + p0); let a1 = lda(k * d.sa + p1);
        let b0 = ldb(k * d.sb + q0); let b1 = ldb(k * d.sb + q1); let b2 = ldb(k * d.sb + q2); let b3 = ldb(k * d.sb + q3);
        c0_0 = fma(vec4<f32>(a0[0]), b0, c0_0); c0_1 = fma(vec4<f32>(a0[0]), b1, c0_1); c0_2 = fma(vec4<f32>(a0[0]), b2, c0_2); c0_3 = fma(vec4<f32>(a0[0]), b3, c0_3);
        c1_0 = fma(vec4<f32>(a0[1]), b0, c1_0); c1_1 = fma(vec4<f32>(a0[1]), b1, c1_1); c1_2 = fma(vec4<f32>(a0[1]), b2, c1_2); c1_3 = fma(vec4<f32>(a0[1]), b3, c1_3);
        c2_0 = fma(vec4<f32>(a0[2]), b0, c2_0); c2_1 = fma(vec4<f32>(a0[2]), b1, c2_1); c2_2 = fma(vec4<f32>(a0[2]), b2, c2_2); c2_3 = fma(vec4<f32>(a0[2]), b3, c2_3);
        c3_0 = fma(vec4<f32>(a0[3]), b0, c3_0); c3_1 = fma(vec4<f32>(a0[3]), b1, c3_1); c3_2 = fma(vec4<f32>(a0[3]), b2, c3_2); c3_3 = fma(vec4<f32>(a0[3]), b3, c3_3);
        c4_0 = fma(vec4<f32>(a1[0]), b0, c4_0); c4_1 = fma(vec4<f32>(a1[0]), b1, c4_1); c4_2 = fma(vec4<f32>(a1[0]), b2, c4_2); c4_3 = fma(vec4<f32>(a1[0]), b3, c4_3);
        c5_0 = fma(vec4<f32>(a1[1]), b0, c5_0); c5_1 = fma(vec4<f32>(a1[1]), b1, c5_1); c5_2 = fma(vec4<f32>(a1[1]), b2, c5_2); c5_3 = fma(vec4<f32>(a1[1]), b3, c5_3);
        c6_0 = fma(vec4<f32>(a1[2]), b0, c6_0); c6_1 = fma(vec4<f32>(a1[2]), b1, c6_1); c6_2 = fma(vec4<f32>(a1[2]), b2, c6_2); c6_3 = fma(vec4<f32>(a1[2]), b3, c6_3);
        c7_0 = fma(vec4<f32>(a1[3]), b0, c7_0); c7_1 = fma(vec4<f32>(a1[3]), b1, c7_1); c7_2 = fma(vec4<f32>(a1[3]), b2, c7_2); c7_3 = fma(vec4<f32>(a1[3]), b3, c7_3);
    }
    put_c(m0 + 0u, n0 + 0u, c0_0); put_c(m0 + 0u, n0 + 4u, c0_1); put_c(m0 + 0u, n0 + 8u, c0_2); put_c(m0 + 0u, n0 + 12u, c0_3);
    put_c(m0 + 1u, n0 + 0u, c1_0); put_c(m0 + 1u, n0 + 4u, c1_1); put_c(m0 + 1u, n0 + 8u, c1_2); put_c(m0 + 1u, n0 + 12u, c1_3);
    put_c(m0 + 2u, n0 + 0u, c2_0); put_c(m0 + 2u, n0 + 4u, c2_1); put_c(m0 + 2u, n0 + 8u, c2_2); put_c(m0 + 2u, n0 + 12u, c2_3);
    put_c(m0 + 3u, n0 + 0u, c3_0); put_c(m0 + 3u, n0 + 4u, c3_1); put_c(m0 + 3u, n0 + 8u, c3_2); put_c(m0 + 3u, n0 + 12u, c3_3);
    put_c(m0 + 4u, n0 + 0u, c4_0); put_c(m0 + 4u, n0 + 4u, c4_1); put_c(m0 + 4u, n0 + 8u, c4_2); put_c(m0 + 4u, n0 + 12u, c4_3);
    put_c(m0 + 5u, n0 + 0u, c5_0); put_c(m0 + 5u, n0 + 4u, c5_1); put_c(m0 + 5u, n0 + 8u, c5_2); put_c(m0 + 5u, n0 + 12u, c5_3);
    put_c(m0 + 6u, n0 + 0u, c6_0); put_c(m0 + 6u, n0 + 4u, c6_1); put_c(m0 + 6u, n0 + 8u, c6_2); put_c(m0 + 6u, n0 + 12u, c6_3);
    put_c(m0 + 7u, n0 + 0u, c7_0); put_c(m0 + 7u, n0 + 4u, c7_1); put_c(m0 + 7u, n0 + 8u, c7_2); put_c(m0 + 7u, n0 + 12u, c7_3);
}

// ---- Texture path: matmul_pack + matmul_tex ----------------------------------------------------
// On lavapipe a texel fetch is a vector gather while a storage load with a per-lane address is a
// loop over the lanes, so big products run from textures (the kernel is about twice as fast):
// rgba32float, four f32 per texel, or for two bf16 operands rg32uint, four bf16 per texel
// (the texel preludes texels_f32.wgsl and texels_words.wgsl). Every layout is first packed into the one form C = A'[M,K] · B'[K,N]:
//
//   ta: texel (t, m) = A'(m, 4t .. 4t+3)   size ⌈K/4⌉ × (M rounded up to 16)
//   tb: texel (q, k) = B'(k, 4q .. 4q+3)   size (⌈N/4⌉ rounded up to 4) × 4⌈K/4⌉
//
// zero outside the matrices, so the kernel never loads out of range; its 16×16 tile per
// invocation (64 vec4 registers; a workgroup covers 128×128) is only for CPU adapters.

// matmul_pack(dst, src): dst texel (x, y) = src(y, 4x .. 4x+3), src(r, c) = src[r·rs + c·cs]
// for r < rows and c < cols, else 0. (rs, cs) = (cols, 1) copies, (1, rows) transposes.
struct PackDims { rows: u32, cols: u32, rs: u32, cs: u32 }
@group(0) @binding(0) var<uniform> kd: PackDims;

@compute @workgroup_size(8, 8)
fn matmul_pack(@builtin(global_invocation_id) gid: vec3<u32>) {
    let size = textureDimensions(packed);
    if (gid.x >= size.x || gid.y >= size.y) { return; }
    var v = vec4<f32>(0.0);
    if (gid.y < kd.rows) {
        for (var j = 0u; j < 4u; j++) {
            let c = gid.x * 4u + j;
            let e = gid.y * kd.rs + c * kd.cs;
            if (c < kd.cols) { v[j] = elem(aw[e / LANES], e); }
        }
    }
    put(vec2<u32>(gid.xy), v);
}

// matmul_pack4(dst, av): matmul_pack for a matrix stored as whole vec4 rows (ld = 4·ld4, equal
// to its stored row length); each invocation writes the four texels (x, 4q .. 4q+3), from four
// vec4 loads (transposing them in registers when t = 1).
struct Pack4Dims { rows: u32, cols: u32, ld4: u32, t: u32 }
@group(0) @binding(0) var<uniform> kv: Pack4Dims;

fn load_quad(r: u32, q: u32, rows: u32) -> Quad {
    if (r >= rows || q >= kv.ld4) { return Quad(); }
    return av[r * kv.ld4 + q];
}
fn load4(r: u32, q: u32, rows: u32) -> vec4<f32> {
    return quad(load_quad(r, q, rows));
}

@compute @workgroup_size(8, 8)
fn matmul_pack4(@builtin(global_invocation_id) gid: vec3<u32>) {
    let size = textureDimensions(packed);
    let x = gid.x;
    let y = gid.y * 4u;
    if (x >= size.x || y >= size.y) { return; }
    if (kv.t == 0u) {
        // texel (x, y+i) = stored row y+i, vec4 x
        for (var i = 0u; i < 4u; i++) {
            put_quad(vec2<u32>(x, y + i), load_quad(y + i, x, kv.rows));
        }
    } else {
        // Stored rows 4x .. 4x+3 are logical columns; their vec4 gid.y holds logical rows y .. y+3.
        let m = transpose(mat4x4<f32>(
            load4(4u * x, gid.y, kv.cols), load4(4u * x + 1u, gid.y, kv.cols),
            load4(4u * x + 2u, gid.y, kv.cols), load4(4u * x + 3u, gid.y, kv.cols)));
        for (var i = 0u; i < 4u; i++) {
            put(vec2<u32>(x, y + i), m[i]);
        }
    }
}

// matmul_tex(c, ta, tb, bias): C[M,N] (= or +=) A'·B' (+ bias); d.k counts texels (⌈K/4⌉).
// The texel prelude (texels_f32.wgsl or texels_words.wgsl) declares the textures and fetches.
// An invocation owns the 16×16 tile of C at (m0, n0); per k-step of 4 it fetches 16 texels of
// each operand. The module's constants A_ROWS and B_ROWS pick each operand's layout (as for
// matmul_tex_sg8): packed, A'(t, m) = A(m, 4t .. 4t+3) and B'(q, k) = B(k, 4q .. 4q+3); or the
// rows layouts a transposed operand's stored rows are copied into, A'(q, k) = A(4q .. 4q+3, k)
// and B'(t, n) = B(4t .. 4t+3, n), transposed 4×4 at a time as they are fetched. The same
// values either way, so the same sums and bits.

// Rows m .. m+3 of A at k .. k+3 (row i = column i), packed layout.
fn a_packed(t: u32, m: u32) -> mat4x4<f32> {
    return mat4x4<f32>(fa(vec2<u32>(t, m)), fa(vec2<u32>(t, m + 1u)), fa(vec2<u32>(t, m + 2u)), fa(vec2<u32>(t, m + 3u)));
}
// The same block from the rows layout, transposed: column c = rows 4q .. 4q+3 at k + c.
fn a_rows(q: u32, k: u32) -> mat4x4<f32> {
    return mat4x4<f32>(fa(vec2<u32>(q, k)), fa(vec2<u32>(q, k + 1u)), fa(vec2<u32>(q, k + 2u)), fa(vec2<u32>(q, k + 3u)));
}
// Columns 4q .. 4q+3 of B at k .. k+3 (column c = B(k + c, 4q ..)), packed layout.
fn b_packed(q: u32, k: u32) -> mat4x4<f32> {
    return mat4x4<f32>(fb(vec2<u32>(q, k)), fb(vec2<u32>(q, k + 1u)), fb(vec2<u32>(q, k + 2u)), fb(vec2<u32>(q, k + 3u)));
}
// The same block from the rows layout, transposed: column i = B(4t .. 4t+3, n + i).
fn b_rows(t: u32, n: u32) -> mat4x4<f32> {
    return mat4x4<f32>(fb(vec2<u32>(t, n)), fb(vec2<u32>(t, n + 1u)), fb(vec2<u32>(t, n + 2u)), fb(vec2<u32>(t, n + 3u)));
}

@compute @workgroup_size(8, 8)
fn matmul_tex(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 16u;
    let n0 = gid.x * 16u;
    if (m0 >= d.m || n0 >= d.n) { return; }
    let q0 = n0 / 4u;
    let z0 = bias4(n0 + 0u);
    let z1 = bias4(n0 + 4u);
    let z2 = bias4(n0 + 8u);
    let z3 = bias4(n0 + 12u);
    var c0_0 = z0; var c0_1 = z1; var c0_2 = z2; var c0_3 = z3;
    var c1_0 = z0; var c1_1 = z1; var c1_2 = z2; var c1_3 = z3;
    var c2_0 = z0; var c2_1 = z1; var c2_2 = z2; var c2_3 = z3;
    var c3_0 = z0; var c3_1 = z1; var c3_2 = z2; var c3_3 = z3;
    var c4_0 = z0; var c4_1 = z1; var c4_2 = z2; var c4_3 = z3;
    var c5_0 = z0; var c5_1 = z1; var c5_2 = z2; var c5_3 = z3;
    var c6_0 = z0; var c6_1 = z1; var c6_2 = z2; var c6_3 = z3;
    var c7_0 = z0; var c7_1 = z1; var c7_2 = z2; var c7_3 = z3;
    var c8_0 = z0; var c8_1 = z1; var c8_2 = z2; var c8_3 = z3;
    var c9_0 = z0; var c9_1 = z1; var c9_2 = z2; var c9_3 = z3;
    var c10_0 = z0; var c10_1 = z1; var c10_2 = z2; var c10_3 = z3;
    var c11_0 = z0; var c11_1 = z1; var c11_2 = z2; var c11_3 = z3;
    var c12_0 = z0; var c12_1 = z1; var c12_2 = z2; var c12_3 = z3;
    var c13_0 = z0; var c13_1 = z1; var c13_2 = z2; var c13_3 = z3;
    var c14_0 = z0; var c14_1 = z1; var c14_2 = z2; var c14_3 = z3;
    var c15_0 = z0; var c15_1 = z1; var c15_2 = z2; var c15_3 = z3;
    for (var t = 0u; t < d.k; t++) {
        let k = t * 4u;
        var A0: mat4x4<f32>; var A1: mat4x4<f32>; var A2: mat4x4<f32>; var A3: mat4x4<f32>;
        if (A_ROWS) {
            A0 = transpose(a_rows(m0 / 4u + 0u, k)); A1 = transpose(a_rows(m0 / 4u + 1u, k));
            A2 = transpose(a_rows(m0 / 4u + 2u, k)); A3 = transpose(a_rows(m0 / 4u + 3u, k));
        } else {
            A0 = a_packed(t, m0 + 0u); A1 = a_packed(t, m0 + 4u);
            A2 = a_packed(t, m0 + 8u); A3 = a_packed(t, m0 + 12u);
        }
        let a0 = A0[0]; let a1 = A0[1]; let a2 = A0[2]; let a3 = A0[3];
        let a4 = A1[0]; let a5 = A1[1]; let a6 = A1[2]; let a7 = A1[3];
        let a8 = A2[0]; let a9 = A2[1]; let a10 = A2[2]; let a11 = A2[3];
        let a12 = A3[0]; let a13 = A3[1]; let a14 = A3[2]; let a15 = A3[3];
        var B0: mat4x4<f32>; var B1: mat4x4<f32>; var B2: mat4x4<f32>; var B3: mat4x4<f32>;
        if (B_ROWS) {
            B0 = transpose(b_rows(t, n0 + 0u)); B1 = transpose(b_rows(t, n0 + 4u));
            B2 = transpose(b_rows(t, n0 + 8u)); B3 = transpose(b_rows(t, n0 + 12u));
        } else {
            B0 = b_packed(q0 + 0u, k); B1 = b_packed(q0 + 1u, k);
            B2 = b_packed(q0 + 2u, k); B3 = b_packed(q0 + 3u, k);
        }
        c0_0 = mac(c0_0, a0, B0); c0_1 = mac(c0_1, a0, B1); c0_2 = mac(c0_2, a0, B2); c0_3 = mac(c0_3, a0, B3);
        c1_0 = mac(c1_0, a1, B0); c1_1 = mac(c1_1, a1, B1); c1_2 = mac(c1_2, a1, B2); c1_3 = mac(c1_3, a1, B3);
        c2_0 = mac(c2_0, a2, B0); c2_1 = mac(c2_1, a2, B1); c2_2 = mac(c2_2, a2, B2); c2_3 = mac(c2_3, a2, B3);
        c3_0 = mac(c3_0, a3, B0); c3_1 = mac(c3_1, a3, B1); c3_2 = mac(c3_2, a3, B2); c3_3 = mac(c3_3, a3, B3);
        c4_0 = mac(c4_0, a4, B0); c4_1 = mac(c4_1, a4, B1); c4_2 = mac(c4_2, a4, B2); c4_3 = mac(c4_3, a4, B3);
        c5_0 = mac(c5_0, a5, B0); c5_1 = mac(c5_1, a5, B1); c5_2 = mac(c5_2, a5, B2); c5_3 = mac(c5_3, a5, B3);
        c6_0 = mac(c6_0, a6, B0); c6_1 = mac(c6_1, a6, B1); c6_2 = mac(c6_2, a6, B2); c6_3 = mac(c6_3, a6, B3);
        c7_0 = mac(c7_0, a7, B0); c7_1 = mac(c7_1, a7, B1); c7_2 = mac(c7_2, a7, B2); c7_3 = mac(c7_3, a7, B3);
        c8_0 = mac(c8_0, a8, B0); c8_1 = mac(c8_1, a8, B1); c8_2 = mac(c8_2, a8, B2); c8_3 = mac(c8_3, a8, B3);
        c9_0 = mac(c9_0, a9, B0); c9_1 = mac(c9_1, a9, B1); c9_2 = mac(c9_2, a9, B2); c9_3 = mac(c9_3, a9, B3);
        c10_0 = mac(c10_0, a10, B0); c10_1 = mac(c10_1, a10, B1); c10_2 = mac(c10_2, a10, B2); c10_3 = mac(c10_3, a10, B3);
        c11_0 = mac(c11_0, a11, B0); c11_1 = mac(c11_1, a11, B1); c11_2 = mac(c11_2, a11, B2); c11_3 = mac(c11_3, a11, B3);
        c12_0 = mac(c12_0, a12, B0); c12_1 = mac(c12_1, a12, B1); c12_2 = mac(c12_2, a12, B2); c12_3 = mac(c12_3, a12, B3);
        c13_0 = mac(c13_0, a13, B0); c13_1 = mac(c13_1, a13, B1); c13_2 = mac(c13_2, a13, B2); c13_3 = mac(c13_3, a13, B3);
        c14_0 = mac(c14_0, a14, B0); c14_1 = mac(c14_1, a14, B1); c14_2 = mac(c14_2, a14, B2); c14_3 = mac(c14_3, a14, B3);
        c15_0 = mac(c15_0, a15, B0); c15_1 = mac(c15_1, a15, B1); c15_2 = mac(c15_2, a15, B2); c15_3 = mac(c15_3, a15, B3);
    }
    put_c(m0 + 0u, n0 + 0u, c0_0); put_c(m0 + 0u, n0 + 4u, c0_1); put_c(m0 + 0u, n0 + 8u, c0_2); put_c(m0 + 0u, n0 + 12u, c0_3);
    put_c(m0 + 1u, n0 + 0u, c1_0); put_c(m0 + 1u, n0 + 4u, c1_1); put_c(m0 + 1u, n0 + 8u, c1_2); put_c(m0 + 1u, n0 + 12u, c1_3);
    put_c(m0 + 2u, n0 + 0u, c2_0); put_c(m0 + 2u, n0 + 4u, c2_1); put_c(m0 + 2u, n0 + 8u, c2_2); put_c(m0 + 2u, n0 + 12u, c2_3);
    put_c(m0 + 3u, n0 + 0u, c3_0); put_c(m0 + 3u, n0 + 4u, c3_1); put_c(m0 + 3u, n0 + 8u, c3_2); put_c(m0 + 3u, n0 + 12u, c3_3);
    put_c(m0 + 4u, n0 + 0u, c4_0); put_c(m0 + 4u, n0 + 4u, c4_1); put_c(m0 + 4u, n0 + 8u, c4_2); put_c(m0 + 4u, n0 + 12u, c4_3);
    put_c(m0 + 5u, n0 + 0u, c5_0); put_c(m0 + 5u, n0 + 4u, c5_1); put_c(m0 + 5u, n0 + 8u, c5_2); put_c(m0 + 5u, n0 + 12u, c5_3);
    put_c(m0 + 6u, n0 + 0u, c6_0); put_c(m0 + 6u, n0 + 4u, c6_1); put_c(m0 + 6u, n0 + 8u, c6_2); put_c(m0 + 6u, n0 + 12u, c6_3);
    put_c(m0 + 7u, n0 + 0u, c7_0); put_c(m0 + 7u, n0 + 4u, c7_1); put_c(m0 + 7u, n0 + 8u, c7_2); put_c(m0 + 7u, n0 + 12u, c7_3);
    put_c(m0 + 8u, n0 + 0u, c8_0); put_c(m0 + 8u, n0 + 4u, c8_1); put_c(m0 + 8u, n0 + 8u, c8_2); put_c(m0 + 8u, n0 + 12u, c8_3);
    put_c(m0 + 9u, n0 + 0u, c9_0); put_c(m0 + 9u, n0 + 4u, c9_1); put_c(m0 + 9u, n0 + 8u, c9_2); put_c(m0 + 9u, n0 + 12u, c9_3);
    put_c(m0 + 10u, n0 + 0u, c10_0); put_c(m0 + 10u, n0 + 4u, c10_1); put_c(m0 + 10u, n0 + 8u, c10_2); put_c(m0 + 10u, n0 + 12u, c10_3);
    put_c(m0 + 11u, n0 + 0u, c11_0); put_c(m0 + 11u, n0 + 4u, c11_1); put_c(m0 + 11u, n0 + 8u, c11_2); put_c(m0 + 11u, n0 + 12u, c11_3);
    put_c(m0 + 12u, n0 + 0u, c12_0); put_c(m0 + 12u, n0 + 4u, c12_1); put_c(m0 + 12u, n0 + 8u, c12_2); put_c(m0 + 12u, n0 + 12u, c12_3);
    put_c(m0 + 13u, n0 + 0u, c13_0); put_c(m0 + 13u, n0 + 4u, c13_1); put_c(m0 + 13u, n0 + 8u, c13_2); put_c(m0 + 13u, n0 + 12u, c13_3);
    put_c(m0 + 14u, n0 + 0u, c14_0); put_c(m0 + 14u, n0 + 4u, c14_1); put_c(m0 + 14u, n0 + 8u, c14_2); put_c(m0 + 14u, n0 + 12u, c14_3);
    put_c(m0 + 15u, n0 + 0u, c15_0); put_c(m0 + 15u, n0 + 4u, c15_1); put_c(m0 + 15u, n0 + 8u, c15_2); put_c(m0 + 15u, n0 + 12u, c15_3);
}

// ---- matmul_pad(dst, src): dst[r, col] = src[r·ld + col] for col < cols, 0 up to the stride
// (a multiple of 4), raw bits. One invocation per dst word (src elements may sit in either
// half of a bf16 word). matmul_pad_f32 does the same for an f32 operand under bf16. ----
struct PadDims { rows: u32, cols: u32, stride: u32, ld: u32 }
@group(0) @binding(0) var<uniform> pd: PadDims;

@compute @workgroup_size(256)
fn matmul_pad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= pd.rows * pd.stride / LANES) { return; }
    var w = 0u;
    for (var j = 0u; j < LANES; j++) {
        let e = LANES * i + j;
        let col = e % pd.stride;
        if (col < pd.cols) {
            let s = e / pd.stride * pd.ld + col;
            w |= place(raw(aw[s / LANES], s % LANES), j);
        }
    }
    c_out[i] = w;
}

@compute @workgroup_size(256)
fn matmul_pad_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= pd.rows * pd.stride) { return; }
    let col = i % pd.stride;
    var x = 0u;
    if (col < pd.cols) { x = aw[i / pd.stride * pd.ld + col]; }
    c_out[i] = x;
}

// ---- matmul_bias_backward(dbias, dout): dbias[o] += Σ_r dout[r, o], rows summed in order in
// f32, then added to the old value (widened) and stored. One invocation per dbias word;
// under bf16 dout is packed or f32 (A_F32). ----
struct BiasDims { rows: u32, cols: u32, flags: u32, _p0: u32 }
@group(0) @binding(0) var<uniform> bd: BiasDims;

fn dout_at(e: u32) -> f32 {
    if (LANES == 2u && (bd.flags & A_F32) != 0u) { return bitcast<f32>(aw[e]); }
    return elem(aw[e / LANES], e);
}

@compute @workgroup_size(256)
fn matmul_bias_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let o = LANES * i;
    if (o >= bd.cols) { return; }
    let pair = LANES == 2u && o + 1u < bd.cols;
    var s = vec2<f32>(0.0);
    for (var r = 0u; r < bd.rows; r++) {
        s.x += dout_at(r * bd.cols + o);
        if (pair) { s.y += dout_at(r * bd.cols + o + 1u); }
    }
    let old = c_out[i];
    c_out[i] = word(i, vec2<f32>(lane(old, 0u), lane(old, 1u)) + s, bd.cols);
}

// ---- matmul_bias_backward4(dbias, dout): matmul_bias_backward for dout in the layer's precision
// and a column count that is a multiple of 4: one invocation per four columns, reading a Quad of
// each row (one load where the kernel above makes four), eight invocations per workgroup so a
// narrow bias still spreads over every core. The same sums in the same order: the same bits.
// matmul_bias_backward8 reads two Quads of each row (eight columns, cols % 8 == 0): on lavapipe
// 2–3.5× faster than one for f32 rows (measured at C = 64–256), no faster for bf16 ones. ----
@compute @workgroup_size(8)
fn matmul_bias_backward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = gid.x + gid.y * nwg.x * 8u;
    let quads = bd.cols / 4u;
    if (q >= quads) { return; }
    var s = vec4<f32>(0.0);
    for (var r = 0u; r < bd.rows; r++) {
        s += quad(av[r * quads + q]);
    }
    store_bias_quad(q, s);
}

@compute @workgroup_size(8)
fn matmul_bias_backward8(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = 2u * (gid.x + gid.y * nwg.x * 8u);
    let quads = bd.cols / 4u;
    if (q >= quads) { return; }
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    for (var r = 0u; r < bd.rows; r++) {
        s0 += quad(av[r * quads + q]);
        s1 += quad(av[r * quads + q + 1u]);
    }
    store_bias_quad(q, s0);
    store_bias_quad(q + 1u, s1);
}

// matmul_bias_backward4 with dout's rows read from a flat texture copy (kernels/texels.rs):
// the same sums.
@group(0) @binding(2) var t_dout: texture_2d<u32>;

@compute @workgroup_size(8)
fn matmul_bias_backward_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = gid.x + gid.y * nwg.x * 8u;
    let quads = bd.cols / 4u;
    if (q >= quads) { return; }
    var s = vec4<f32>(0.0);
    for (var r = 0u; r < bd.rows; r++) {
        s += quad(flat(t_dout, r * quads + q));
    }
    store_bias_quad(q, s);
}

// dbias[4q .. 4q+3] += s (words of the layer's precision).
fn store_bias_quad(q: u32, s: vec4<f32>) {
    for (var j = 0u; j < 4u / LANES; j++) {
        let i = q * (4u / LANES) + j;
        let old = c_out[i];
        let x = vec2<f32>(s[j * LANES], s[j * LANES + LANES - 1u]);
        c_out[i] = word(i, vec2<f32>(lane(old, 0u), lane(old, 1u)) + x, bd.cols);
    }
}
