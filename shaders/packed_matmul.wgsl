// Packed-bf16 matmul family: the three register-tiled buffer kernels of matmul.wgsl (same tiles,
// same k order, same edge clamping; see that file for the tile picture) with bf16 operands packed
// two per u32 word (element 2i in the low 16 bits of word i, 2i+1 in the high 16 bits):
//
//   matmul_nt_bf16   C = A[M,K] · B[N,K]ᵀ    forward   out      = inp · weightᵀ + bias
//   matmul_nn_bf16   C = A[M,K] · B[K,N]     backward  dinp     = dout · weight
//   matmul_tn_bf16   C = A[K,M]ᵀ · B[K,N]    backward  dweight += doutᵀ · inp
//
// B and the bias are always packed bf16; A is packed or f32 (A_F32: the head's f32 dlogits), C is
// packed or f32 (C_F32: the head's f32 logits). Every buffer is declared array<u32>; operands are
// widened to f32 on load (exact), every sum is f32 (fma chains in k order, from the bias), and a
// packed C is rounded to bf16 (RNE, the `narrow` rule of bf16.wgsl) only when stored. An
// accumulated packed C widens the stored value, adds the finished sum in f32 and narrows.
//
// Loads: element 4q .. 4q+3 of a row-major operand whose row length is a multiple of 4 are the
// words 2q, 2q+1 (packed) or 4q .. 4q+3 (f32); the host pads any other operand into a zero-filled
// copy first (matmul_pad_bf16 / matmul_pad_f32), so the kernels index in vec4 units as the f32
// ones do. Stores: each invocation writes whole words: a packed row of C starts on a word
// boundary (the host requires N even, or M = 1) and every tile column n0 is a multiple of 16, so
// the pairs (n0+2j, n0+2j+1) are words; the last word of an odd-length single row gets a zero
// high half (as the CPU twin's pack_bf16 leaves it).
//
// Widening skips bf16.wgsl's NaN quieting: a NaN operand gives a NaN sum either way. After the
// three kernels come matmul_pad_bf16, matmul_pad_f32 and matmul_bias_backward_bf16.

struct Dims {
    m: u32,     // rows of C
    n: u32,     // columns of C (= its row stride, in elements)
    k: u32,     // reduction length
    sa: u32,    // A row stride in vec4s (4 elements)
    sb: u32,    // B row stride in vec4s
    flags: u32, // ACCUMULATE | BIAS | A_F32 | C_F32
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<storage, read_write> c_out: array<u32>;
@group(0) @binding(2) var<storage, read> av: array<u32>;
@group(0) @binding(4) var<storage, read> bias: array<u32>;
// The matmul kernels read A and B two words at a time (the same bindings as word pairs: every
// operand they read is whole vec4 rows, an even number of words); the pad and bias kernels
// below read `av` word by word.
@group(0) @binding(2) var<storage, read> av2: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> bv2: array<vec2<u32>>;

const ACCUMULATE: u32 = 1u; // C += A·B (else C = A·B)
const BIAS: u32 = 2u;       // start every row of C at bias[n]
const A_F32: u32 = 4u;      // A holds f32 bits (else packed bf16)
const C_F32: u32 = 8u;      // C holds f32 bits (else packed bf16)

// Low / high bf16 half of a word, widened (exact).
fn lo(w: u32) -> f32 { return bitcast<f32>(w << 16u); }
fn hi(w: u32) -> f32 { return bitcast<f32>(w & 0xffff0000u); }

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.
fn narrow_f(v: f32) -> u32 { return narrow(bitcast<u32>(v)); }

// Element e of a packed array, widened.
fn bias_at(e: u32) -> f32 {
    let w = bias[e / 2u];
    return select(lo(w), hi(w), (e & 1u) == 1u);
}

// A(4q .. 4q+3) along its stored row: vec4 index q, packed or f32.
fn lda(q: u32) -> vec4<f32> {
    if ((d.flags & A_F32) != 0u) {
        let p0 = av2[2u * q];
        let p1 = av2[2u * q + 1u];
        return bitcast<vec4<f32>>(vec4<u32>(p0, p1));
    }
    let w = av2[q];
    return vec4<f32>(lo(w.x), hi(w.x), lo(w.y), hi(w.y));
}

// B(4q .. 4q+3) along its stored row (always packed).
fn ldb(q: u32) -> vec4<f32> {
    let w = bv2[q];
    return vec4<f32>(lo(w.x), hi(w.x), lo(w.y), hi(w.y));
}

// c + a.x·b[0] + a.y·b[1] + a.z·b[2] + a.w·b[3], one fma chain.
fn mac(c: vec4<f32>, a: vec4<f32>, b: mat4x4<f32>) -> vec4<f32> {
    return fma(vec4<f32>(a.w), b[3], fma(vec4<f32>(a.z), b[2], fma(vec4<f32>(a.y), b[1], fma(vec4<f32>(a.x), b[0], c))));
}

// Index r clamped into [0, rows): edge tiles read valid data and discard it at the store.
fn row(r: u32, rows: u32) -> u32 {
    return min(r, rows - 1u);
}

// vec4 index of column n in a row of s4 vec4s, clamped into the row.
fn col4(n: u32, s4: u32) -> u32 {
    return min(n / 4u, s4 - 1u);
}

// bias[n .. n+3] (clamped) when BIAS is set, else zero: the start value of a tile row.
fn bias4(n: u32) -> vec4<f32> {
    if ((d.flags & BIAS) == 0u) { return vec4<f32>(0.0); }
    return vec4<f32>(bias_at(row(n, d.n)), bias_at(row(n + 1u, d.n)), bias_at(row(n + 2u, d.n)), bias_at(row(n + 3u, d.n)));
}

// Writes C[m, n .. n+3] (n a multiple of 4) from v, skipping elements outside C; adds the old
// value first if ACCUMULATE. Packed: two whole words, (n, n+1) and (n+2, n+3).
fn store4(m: u32, n: u32, v: vec4<f32>) {
    if (m >= d.m) { return; }
    let acc = (d.flags & ACCUMULATE) != 0u;
    if ((d.flags & C_F32) != 0u) {
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
        let pair = col + 1u < d.n;    // false only for the last element of an odd single row
        var x0 = v[j];
        var x1 = v[j + 1u];
        if (acc) {
            let old = c_out[w];
            x0 += lo(old);
            x1 += hi(old);
        }
        c_out[w] = narrow_f(x0) | select(0u, narrow_f(x1) << 16u, pair);
    }
}

// ---- matmul_nt_bf16(c, a, b, bias): A[M,K], B[N,K], both padded along K (sa = sb = ⌈K/4⌉) ----
@compute @workgroup_size(8, 8)
fn matmul_nt_bf16(@builtin(global_invocation_id) gid: vec3<u32>) {
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
    store4(m0 + 0u, n0 + 0u, c0_0); store4(m0 + 0u, n0 + 4u, c0_1); store4(m0 + 0u, n0 + 8u, c0_2); store4(m0 + 0u, n0 + 12u, c0_3);
    store4(m0 + 1u, n0 + 0u, c1_0); store4(m0 + 1u, n0 + 4u, c1_1); store4(m0 + 1u, n0 + 8u, c1_2); store4(m0 + 1u, n0 + 12u, c1_3);
    store4(m0 + 2u, n0 + 0u, c2_0); store4(m0 + 2u, n0 + 4u, c2_1); store4(m0 + 2u, n0 + 8u, c2_2); store4(m0 + 2u, n0 + 12u, c2_3);
    store4(m0 + 3u, n0 + 0u, c3_0); store4(m0 + 3u, n0 + 4u, c3_1); store4(m0 + 3u, n0 + 8u, c3_2); store4(m0 + 3u, n0 + 12u, c3_3);
    store4(m0 + 4u, n0 + 0u, c4_0); store4(m0 + 4u, n0 + 4u, c4_1); store4(m0 + 4u, n0 + 8u, c4_2); store4(m0 + 4u, n0 + 12u, c4_3);
    store4(m0 + 5u, n0 + 0u, c5_0); store4(m0 + 5u, n0 + 4u, c5_1); store4(m0 + 5u, n0 + 8u, c5_2); store4(m0 + 5u, n0 + 12u, c5_3);
    store4(m0 + 6u, n0 + 0u, c6_0); store4(m0 + 6u, n0 + 4u, c6_1); store4(m0 + 6u, n0 + 8u, c6_2); store4(m0 + 6u, n0 + 12u, c6_3);
    store4(m0 + 7u, n0 + 0u, c7_0); store4(m0 + 7u, n0 + 4u, c7_1); store4(m0 + 7u, n0 + 8u, c7_2); store4(m0 + 7u, n0 + 12u, c7_3);
}

// ---- matmul_nn_bf16(c, a, b, bias): A[M,K] padded along K (sa = ⌈K/4⌉), B[K,N] (sb = ⌈N/4⌉) ----
@compute @workgroup_size(8, 8)
fn matmul_nn_bf16(@builtin(global_invocation_id) gid: vec3<u32>) {
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
    store4(m0 + 0u, n0 + 0u, c0_0); store4(m0 + 0u, n0 + 4u, c0_1); store4(m0 + 0u, n0 + 8u, c0_2); store4(m0 + 0u, n0 + 12u, c0_3);
    store4(m0 + 1u, n0 + 0u, c1_0); store4(m0 + 1u, n0 + 4u, c1_1); store4(m0 + 1u, n0 + 8u, c1_2); store4(m0 + 1u, n0 + 12u, c1_3);
    store4(m0 + 2u, n0 + 0u, c2_0); store4(m0 + 2u, n0 + 4u, c2_1); store4(m0 + 2u, n0 + 8u, c2_2); store4(m0 + 2u, n0 + 12u, c2_3);
    store4(m0 + 3u, n0 + 0u, c3_0); store4(m0 + 3u, n0 + 4u, c3_1); store4(m0 + 3u, n0 + 8u, c3_2); store4(m0 + 3u, n0 + 12u, c3_3);
    store4(m0 + 4u, n0 + 0u, c4_0); store4(m0 + 4u, n0 + 4u, c4_1); store4(m0 + 4u, n0 + 8u, c4_2); store4(m0 + 4u, n0 + 12u, c4_3);
    store4(m0 + 5u, n0 + 0u, c5_0); store4(m0 + 5u, n0 + 4u, c5_1); store4(m0 + 5u, n0 + 8u, c5_2); store4(m0 + 5u, n0 + 12u, c5_3);
    store4(m0 + 6u, n0 + 0u, c6_0); store4(m0 + 6u, n0 + 4u, c6_1); store4(m0 + 6u, n0 + 8u, c6_2); store4(m0 + 6u, n0 + 12u, c6_3);
    store4(m0 + 7u, n0 + 0u, c7_0); store4(m0 + 7u, n0 + 4u, c7_1); store4(m0 + 7u, n0 + 8u, c7_2); store4(m0 + 7u, n0 + 12u, c7_3);
}

// ---- matmul_tn_bf16(c, a, b, bias): A[K,M] (sa = ⌈M/4⌉), B[K,N] (sb = ⌈N/4⌉), any K ----
@compute @workgroup_size(8, 8)
fn matmul_tn_bf16(@builtin(global_invocation_id) gid: vec3<u32>) {
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
    store4(m0 + 0u, n0 + 0u, c0_0); store4(m0 + 0u, n0 + 4u, c0_1); store4(m0 + 0u, n0 + 8u, c0_2); store4(m0 + 0u, n0 + 12u, c0_3);
    store4(m0 + 1u, n0 + 0u, c1_0); store4(m0 + 1u, n0 + 4u, c1_1); store4(m0 + 1u, n0 + 8u, c1_2); store4(m0 + 1u, n0 + 12u, c1_3);
    store4(m0 + 2u, n0 + 0u, c2_0); store4(m0 + 2u, n0 + 4u, c2_1); store4(m0 + 2u, n0 + 8u, c2_2); store4(m0 + 2u, n0 + 12u, c2_3);
    store4(m0 + 3u, n0 + 0u, c3_0); store4(m0 + 3u, n0 + 4u, c3_1); store4(m0 + 3u, n0 + 8u, c3_2); store4(m0 + 3u, n0 + 12u, c3_3);
    store4(m0 + 4u, n0 + 0u, c4_0); store4(m0 + 4u, n0 + 4u, c4_1); store4(m0 + 4u, n0 + 8u, c4_2); store4(m0 + 4u, n0 + 12u, c4_3);
    store4(m0 + 5u, n0 + 0u, c5_0); store4(m0 + 5u, n0 + 4u, c5_1); store4(m0 + 5u, n0 + 8u, c5_2); store4(m0 + 5u, n0 + 12u, c5_3);
    store4(m0 + 6u, n0 + 0u, c6_0); store4(m0 + 6u, n0 + 4u, c6_1); store4(m0 + 6u, n0 + 8u, c6_2); store4(m0 + 6u, n0 + 12u, c6_3);
    store4(m0 + 7u, n0 + 0u, c7_0); store4(m0 + 7u, n0 + 4u, c7_1); store4(m0 + 7u, n0 + 8u, c7_2); store4(m0 + 7u, n0 + 12u, c7_3);
}

// ---- matmul_pad_bf16(dst, src): packed dst[r, col] = src[r·ld + col] for col < cols, 0 up to the
// stride (a multiple of 4). One invocation per dst word; src elements may sit in either half. ----
struct PadDims { rows: u32, cols: u32, stride: u32, ld: u32 }
@group(0) @binding(0) var<uniform> pd: PadDims;

// Raw bf16 bits of packed element e of av (no conversion).
fn half_bits(e: u32) -> u32 {
    return (av[e / 2u] >> (16u * (e & 1u))) & 0xffffu;
}

@compute @workgroup_size(256)
fn matmul_pad_bf16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= pd.rows * pd.stride / 2u) { return; }
    let r = 2u * i / pd.stride;
    let col = 2u * i % pd.stride; // even; col + 1 < stride
    var w = 0u;
    if (col < pd.cols) { w = half_bits(r * pd.ld + col); }
    if (col + 1u < pd.cols) { w |= half_bits(r * pd.ld + col + 1u) << 16u; }
    c_out[i] = w;
}

// ---- matmul_pad_f32(dst, src): matmul_pad of matmul.wgsl on f32 bits, one invocation per element ----
@compute @workgroup_size(256)
fn matmul_pad_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= pd.rows * pd.stride) { return; }
    let r = i / pd.stride;
    let col = i % pd.stride;
    var x = 0u;
    if (col < pd.cols) { x = av[r * pd.ld + col]; }
    c_out[i] = x;
}

// ---- matmul_bias_backward_bf16(dbias, dout): packed dbias[o] += Σ_r dout[r, o], rows summed in
// order in f32, then added to the widened old value and narrowed. One invocation per dbias word
// (o = 2i, 2i+1); dout is packed (any row length: elements in either half) or f32 (A_F32). ----
struct BiasDims { rows: u32, cols: u32, flags: u32, _p0: u32 }
@group(0) @binding(0) var<uniform> bd: BiasDims;

fn dout_at(e: u32) -> f32 {
    if ((bd.flags & A_F32) != 0u) { return bitcast<f32>(av[e]); }
    return bitcast<f32>(half_bits(e) << 16u);
}

@compute @workgroup_size(256)
fn matmul_bias_backward_bf16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let o = 2u * i;
    if (o >= bd.cols) { return; }
    let pair = o + 1u < bd.cols;
    var s0 = 0.0;
    var s1 = 0.0;
    for (var r = 0u; r < bd.rows; r++) {
        s0 += dout_at(r * bd.cols + o);
        if (pair) { s1 += dout_at(r * bd.cols + o + 1u); }
    }
    let old = c_out[i];
    c_out[i] = narrow_f(lo(old) + s0) | select(0u, narrow_f(hi(old) + s1) << 16u, pair);
}
