// Subgroup texture kernel of the matmul family, for adapters whose subgroups are exactly 8 lanes
// (the host reads the adapter's subgroup size range and takes this kernel only when it is 8..8,
// with the SUBGROUP feature; elsewhere matmul_tex runs). Same packed operands and the same sums
// as matmul_tex (shaders/matmul.wgsl): C[M,N] (= or +=) A'·B' (+ bias), d.k counting texels.
//
// A workgroup is one subgroup of 8 lanes and covers 32 rows × 64 columns of C; lane l owns the
// 32 × 8 tile (rows m0 .. m0+31, columns n0 = 64·wg.x + 8l .. +7) in 64 vec4 registers
// c{i}_{J} = C[m0+i, n0+4J .. +3]. Per k-step of 4, each lane fetches only 4 texels of A (rows
// m0 + 8r + l, r = 0..3) and the subgroup shares them with subgroupBroadcast from a constant
// lane, which costs almost nothing on lavapipe, where a texel fetch is the expensive part:
//
//     row m0 + 8r + j  ←  subgroupBroadcast(fetch r, lane j)       (32 rows from 4 fetches)
//     B{J} = mat4x4: column c = B'(k+c, n0+4J .. n0+4J+3)           (8 fetches per lane)
//     c{i}_{J} = mac(c{i}_{J}, α_i, B{J})                           (the chain of matmul_tex)
//
// Two layouts let an f32 operand used transposed come as a copy of its stored rows instead of a
// pack (the host copies them into the texture without a shader). The module's prelude sets the
// constants A_ROWS and B_ROWS, so each layout is its own compiled kernel:
//
//   A_ROWS  A'(q, k) = A(4q .. 4q+3, k): lane l fetches rows m0 + 4l .. +3 at k .. k+3 and
//           transposes them, so its f_r is row m0 + 4l + r and accumulator i = 8r + j holds
//           row m0 + 4j + r (`acc_row`); the stores follow.
//   B_ROWS  B'(t, n) = B(4t .. 4t+3, n): B{J} is the transpose of the texels of rows
//           n0 + 4J .. +3, the same matrix the packed layout gives.
//
// Every element sums in k order from the bias with the same fma chain as matmul_tex, so both
// kernels (and every layout) give the same bits. The host pads A' to a multiple of 32 rows and
// B' to a multiple of 16 texels across (the rows layouts to their own tile), so every fetch is in
// range and no lane leaves before the broadcasts (they need the whole subgroup); store4 skips
// what lies outside C. The store, put_c, comes from a prelude: element by element
// (c_words.wgsl), or a Quad at a time where C allows (c_quads.wgsl).

// The row of the tile accumulator i holds: i, or under A_ROWS 4·(i mod 8) + i / 8.
fn acc_row(i: u32) -> u32 {
    if (A_ROWS) { return 4u * (i % 8u) + i / 8u; }
    return i;
}

@compute @workgroup_size(8)
fn matmul_tex_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let m0 = wg.y * 32u;
    let n0 = wg.x * 64u + sl * 8u;
    let q0 = n0 / 4u;
    let z0 = bias4(n0);
    let z1 = bias4(n0 + 4u);
    var c0_0 = z0; var c0_1 = z1; var c1_0 = z0; var c1_1 = z1; var c2_0 = z0; var c2_1 = z1; var c3_0 = z0; var c3_1 = z1;
    var c4_0 = z0; var c4_1 = z1; var c5_0 = z0; var c5_1 = z1; var c6_0 = z0; var c6_1 = z1; var c7_0 = z0; var c7_1 = z1;
    var c8_0 = z0; var c8_1 = z1; var c9_0 = z0; var c9_1 = z1; var c10_0 = z0; var c10_1 = z1; var c11_0 = z0; var c11_1 = z1;
    var c12_0 = z0; var c12_1 = z1; var c13_0 = z0; var c13_1 = z1; var c14_0 = z0; var c14_1 = z1; var c15_0 = z0; var c15_1 = z1;
    var c16_0 = z0; var c16_1 = z1; var c17_0 = z0; var c17_1 = z1; var c18_0 = z0; var c18_1 = z1; var c19_0 = z0; var c19_1 = z1;
    var c20_0 = z0; var c20_1 = z1; var c21_0 = z0; var c21_1 = z1; var c22_0 = z0; var c22_1 = z1; var c23_0 = z0; var c23_1 = z1;
    var c24_0 = z0; var c24_1 = z1; var c25_0 = z0; var c25_1 = z1; var c26_0 = z0; var c26_1 = z1; var c27_0 = z0; var c27_1 = z1;
    var c28_0 = z0; var c28_1 = z1; var c29_0 = z0; var c29_1 = z1; var c30_0 = z0; var c30_1 = z1; var c31_0 = z0; var c31_1 = z1;
    let qa = m0 / 4u + sl;
    for (var t = 0u; t < d.k; t++) {
        let k = t * 4u;
        var f0: vec4<f32>; var f1: vec4<f32>; var f2: vec4<f32>; var f3: vec4<f32>;
        if (A_ROWS) {
            let g = transpose(mat4x4<f32>(fa(vec2<u32>(qa, k + 0u)), fa(vec2<u32>(qa, k + 1u)), fa(vec2<u32>(qa, k + 2u)), fa(vec2<u32>(qa, k + 3u))));
            f0 = g[0]; f1 = g[1]; f2 = g[2]; f3 = g[3];
        } else {
            f0 = fa(vec2<u32>(t, m0 + 0u + sl));
            f1 = fa(vec2<u32>(t, m0 + 8u + sl));
            f2 = fa(vec2<u32>(t, m0 + 16u + sl));
            f3 = fa(vec2<u32>(t, m0 + 24u + sl));
        }
        var B0: mat4x4<f32>; var B1: mat4x4<f32>;
        if (B_ROWS) {
            B0 = transpose(mat4x4<f32>(fb(vec2<u32>(t, n0 + 0u)), fb(vec2<u32>(t, n0 + 1u)), fb(vec2<u32>(t, n0 + 2u)), fb(vec2<u32>(t, n0 + 3u))));
            B1 = transpose(mat4x4<f32>(fb(vec2<u32>(t, n0 + 4u)), fb(vec2<u32>(t, n0 + 5u)), fb(vec2<u32>(t, n0 + 6u)), fb(vec2<u32>(t, n0 + 7u))));
        } else {
            B0 = mat4x4<f32>(fb(vec2<u32>(q0 + 0u, k + 0u)), fb(vec2<u32>(q0 + 0u, k + 1u)), fb(vec2<u32>(q0 + 0u, k + 2u)), fb(vec2<u32>(q0 + 0u, k + 3u)));
            B1 = mat4x4<f32>(fb(vec2<u32>(q0 + 1u, k + 0u)), fb(vec2<u32>(q0 + 1u, k + 1u)), fb(vec2<u32>(q0 + 1u, k + 2u)), fb(vec2<u32>(q0 + 1u, k + 3u)));
        }
        let a0 = subgroupBroadcast(f0, 0u); c0_0 = mac(c0_0, a0, B0); c0_1 = mac(c0_1, a0, B1);
        let a1 = subgroupBroadcast(f0, 1u); c1_0 = mac(c1_0, a1, B0); c1_1 = mac(c1_1, a1, B1);
        let a2 = subgroupBroadcast(f0, 2u); c2_0 = mac(c2_0, a2, B0); c2_1 = mac(c2_1, a2, B1);
        let a3 = subgroupBroadcast(f0, 3u); c3_0 = mac(c3_0, a3, B0); c3_1 = mac(c3_1, a3, B1);
        let a4 = subgroupBroadcast(f0, 4u); c4_0 = mac(c4_0, a4, B0); c4_1 = mac(c4_1, a4, B1);
        let a5 = subgroupBroadcast(f0, 5u); c5_0 = mac(c5_0, a5, B0); c5_1 = mac(c5_1, a5, B1);
        let a6 = subgroupBroadcast(f0, 6u); c6_0 = mac(c6_0, a6, B0); c6_1 = mac(c6_1, a6, B1);
        let a7 = subgroupBroadcast(f0, 7u); c7_0 = mac(c7_0, a7, B0); c7_1 = mac(c7_1, a7, B1);
        let a8 = subgroupBroadcast(f1, 0u); c8_0 = mac(c8_0, a8, B0); c8_1 = mac(c8_1, a8, B1);
        let a9 = subgroupBroadcast(f1, 1u); c9_0 = mac(c9_0, a9, B0); c9_1 = mac(c9_1, a9, B1);
        let a10 = subgroupBroadcast(f1, 2u); c10_0 = mac(c10_0, a10, B0); c10_1 = mac(c10_1, a10, B1);
        let a11 = subgroupBroadcast(f1, 3u); c11_0 = mac(c11_0, a11, B0); c11_1 = mac(c11_1, a11, B1);
        let a12 = subgroupBroadcast(f1, 4u); c12_0 = mac(c12_0, a12, B0); c12_1 = mac(c12_1, a12, B1);
        let a13 = subgroupBroadcast(f1, 5u); c13_0 = mac(c13_0, a13, B0); c13_1 = mac(c13_1, a13, B1);
        let a14 = subgroupBroadcast(f1, 6u); c14_0 = mac(c14_0, a14, B0); c14_1 = mac(c14_1, a14, B1);
        let a15 = subgroupBroadcast(f1, 7u); c15_0 = mac(c15_0, a15, B0); c15_1 = mac(c15_1, a15, B1);
        let a16 = subgroupBroadcast(f2, 0u); c16_0 = mac(c16_0, a16, B0); c16_1 = mac(c16_1, a16, B1);
        let a17 = subgroupBroadcast(f2, 1u); c17_0 = mac(c17_0, a17, B0); c17_1 = mac(c17_1, a17, B1);
        let a18 = subgroupBroadcast(f2, 2u); c18_0 = mac(c18_0, a18, B0); c18_1 = mac(c18_1, a18, B1);
        let a19 = subgroupBroadcast(f2, 3u); c19_0 = mac(c19_0, a19, B0); c19_1 = mac(c19_1, a19, B1);
        let a20 = subgroupBroadcast(f2, 4u); c20_0 = mac(c20_0, a20, B0); c20_1 = mac(c20_1, a20, B1);
        let a21 = subgroupBroadcast(f2, 5u); c21_0 = mac(c21_0, a21, B0); c21_1 = mac(c21_1, a21, B1);
        let a22 = subgroupBroadcast(f2, 6u); c22_0 = mac(c22_0, a22, B0); c22_1 = mac(c22_1, a22, B1);
        let a23 = subgroupBroadcast(f2, 7u); c23_0 = mac(c23_0, a23, B0); c23_1 = mac(c23_1, a23, B1);
        let a24 = subgroupBroadcast(f3, 0u); c24_0 = mac(c24_0, a24, B0); c24_1 = mac(c24_1, a24, B1);
        let a25 = subgroupBroadcast(f3, 1u); c25_0 = mac(c25_0, a25, B0); c25_1 = mac(c25_1, a25, B1);
        let a26 = subgroupBroadcast(f3, 2u); c26_0 = mac(c26_0, a26, B0); c26_1 = mac(c26_1, a26, B1);
        let a27 = subgroupBroadcast(f3, 3u); c27_0 = mac(c27_0, a27, B0); c27_1 = mac(c27_1, a27, B1);
        let a28 = subgroupBroadcast(f3, 4u); c28_0 = mac(c28_0, a28, B0); c28_1 = mac(c28_1, a28, B1);
        let a29 = subgroupBroadcast(f3, 5u); c29_0 = mac(c29_0, a29, B0); c29_1 = mac(c29_1, a29, B1);
        let a30 = subgroupBroadcast(f3, 6u); c30_0 = mac(c30_0, a30, B0); c30_1 = mac(c30_1, a30, B1);
        let a31 = subgroupBroadcast(f3, 7u); c31_0 = mac(c31_0, a31, B0); c31_1 = mac(c31_1, a31, B1);
    }
    put_c(m0 + acc_row(0u), n0, c0_0); put_c(m0 + acc_row(0u), n0 + 4u, c0_1); put_c(m0 + acc_row(1u), n0, c1_0); put_c(m0 + acc_row(1u), n0 + 4u, c1_1);
    put_c(m0 + acc_row(2u), n0, c2_0); put_c(m0 + acc_row(2u), n0 + 4u, c2_1); put_c(m0 + acc_row(3u), n0, c3_0); put_c(m0 + acc_row(3u), n0 + 4u, c3_1);
    put_c(m0 + acc_row(4u), n0, c4_0); put_c(m0 + acc_row(4u), n0 + 4u, c4_1); put_c(m0 + acc_row(5u), n0, c5_0); put_c(m0 + acc_row(5u), n0 + 4u, c5_1);
    put_c(m0 + acc_row(6u), n0, c6_0); put_c(m0 + acc_row(6u), n0 + 4u, c6_1); put_c(m0 + acc_row(7u), n0, c7_0); put_c(m0 + acc_row(7u), n0 + 4u, c7_1);
    put_c(m0 + acc_row(8u), n0, c8_0); put_c(m0 + acc_row(8u), n0 + 4u, c8_1); put_c(m0 + acc_row(9u), n0, c9_0); put_c(m0 + acc_row(9u), n0 + 4u, c9_1);
    put_c(m0 + acc_row(10u), n0, c10_0); put_c(m0 + acc_row(10u), n0 + 4u, c10_1); put_c(m0 + acc_row(11u), n0, c11_0); put_c(m0 + acc_row(11u), n0 + 4u, c11_1);
    put_c(m0 + acc_row(12u), n0, c12_0); put_c(m0 + acc_row(12u), n0 + 4u, c12_1); put_c(m0 + acc_row(13u), n0, c13_0); put_c(m0 + acc_row(13u), n0 + 4u, c13_1);
    put_c(m0 + acc_row(14u), n0, c14_0); put_c(m0 + acc_row(14u), n0 + 4u, c14_1); put_c(m0 + acc_row(15u), n0, c15_0); put_c(m0 + acc_row(15u), n0 + 4u, c15_1);
    put_c(m0 + acc_row(16u), n0, c16_0); put_c(m0 + acc_row(16u), n0 + 4u, c16_1); put_c(m0 + acc_row(17u), n0, c17_0); put_c(m0 + acc_row(17u), n0 + 4u, c17_1);
    put_c(m0 + acc_row(18u), n0, c18_0); put_c(m0 + acc_row(18u), n0 + 4u, c18_1); put_c(m0 + acc_row(19u), n0, c19_0); put_c(m0 + acc_row(19u), n0 + 4u, c19_1);
    put_c(m0 + acc_row(20u), n0, c20_0); put_c(m0 + acc_row(20u), n0 + 4u, c20_1); put_c(m0 + acc_row(21u), n0, c21_0); put_c(m0 + acc_row(21u), n0 + 4u, c21_1);
    put_c(m0 + acc_row(22u), n0, c22_0); put_c(m0 + acc_row(22u), n0 + 4u, c22_1); put_c(m0 + acc_row(23u), n0, c23_0); put_c(m0 + acc_row(23u), n0 + 4u, c23_1);
    put_c(m0 + acc_row(24u), n0, c24_0); put_c(m0 + acc_row(24u), n0 + 4u, c24_1); put_c(m0 + acc_row(25u), n0, c25_0); put_c(m0 + acc_row(25u), n0 + 4u, c25_1);
    put_c(m0 + acc_row(26u), n0, c26_0); put_c(m0 + acc_row(26u), n0 + 4u, c26_1); put_c(m0 + acc_row(27u), n0, c27_0); put_c(m0 + acc_row(27u), n0 + 4u, c27_1);
    put_c(m0 + acc_row(28u), n0, c28_0); put_c(m0 + acc_row(28u), n0 + 4u, c28_1); put_c(m0 + acc_row(29u), n0, c29_0); put_c(m0 + acc_row(29u), n0 + 4u, c29_1);
    put_c(m0 + acc_row(30u), n0, c30_0); put_c(m0 + acc_row(30u), n0 + 4u, c30_1); put_c(m0 + acc_row(31u), n0, c31_0); put_c(m0 + acc_row(31u), n0 + 4u, c31_1);
}
