// Subgroup kernels of the attention family, for adapters whose subgroups are exactly 8 lanes (the
// host takes them only where `Gpu::subgroup_lanes()` is 8; elsewhere the `_vec4` kernels run).
// Same tiles, same sums in the same order as the `_vec4` kernels above, so the same bits.
//
// A workgroup is one subgroup of 8 lanes and one head (b, h): lane l owns the tile of 4 tokens
// t0 = 32·blk + 4l .. +3. Every lane of a head needs the same k, v (forward, dq), q and dout (dk,
// dv) rows, so each lane fetches one Quad of them and the subgroup shares them with
// subgroupBroadcast from a constant lane: on lavapipe a storage load with a per-lane address is a
// loop over the lanes, and the broadcast costs almost nothing. Loops run to the subgroup's last
// token (uniform: no lane leaves before a broadcast); what lies past a lane's own tokens is masked
// exactly as in the `_vec4` kernels (zero terms, no stores).

// The workgroup's head and block: (tile, last token of the block), or none past the grid.
struct Block { tl: Tile, last: u32, live: bool }

fn block_of(wg: vec3<u32>, nwg: vec3<u32>, sl: u32) -> Block {
    let nt = (d.t + 3u) / 4u;
    let nb = (nt + 7u) / 8u;
    let w = wg.x + wg.y * nwg.x;
    let bh = w / nb;
    let blk = w % nb;
    let t0 = (blk * 8u + sl) * 4u;
    let last = min(blk * 32u + 31u, d.t - 1u);
    return Block(Tile(bh / d.nh, bh % d.nh, t0, min(t0 + 3u, d.t - 1u), bh * d.t * d.t), last, w < d.b * d.nh * nb);
}

// Quad j of part `part` of token tok (clamped to T−1) of head (b, h).
fn qkv_quad(b: u32, h: u32, part: u32, tok: u32, j: u32) -> vec4<f32> {
    return quad(qkv_q[qkv_at(b, h, part, vec4<u32>(min(tok, d.t - 1u))).x + j]);
}

// The 4 × 4 block of keys k0 + 4i .. +3 (columns) from one shared fetch per lane: lane l holds
// key kb + l of this 8-key group (`f`); i = 0 takes lanes 0..3, i = 1 lanes 4..7.
fn keys_of(f: vec4<f32>, i: u32) -> mat4x4<f32> {
    if (i == 0u) {
        return mat4x4<f32>(subgroupBroadcast(f, 0u), subgroupBroadcast(f, 1u), subgroupBroadcast(f, 2u), subgroupBroadcast(f, 3u));
    }
    return mat4x4<f32>(subgroupBroadcast(f, 4u), subgroupBroadcast(f, 5u), subgroupBroadcast(f, 6u), subgroupBroadcast(f, 7u));
}

// ---- attention_forward_sg8(out, rows, qkv) ----
@compute @workgroup_size(8)
fn attention_forward_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let bk = block_of(wg, nwg, sl);
    if (!bk.live) { return; }
    let tl = bk.tl;
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;
    let hs4 = d.hs / 4u;
    let qo = qkv_at(tl.b, tl.h, 0u, tk);
    var m = vec4<f32>(-3.0e38);
    for (var k0 = 0u; k0 <= bk.last; k0 += 16u) {
        var s0 = mat4x4<f32>();
        var s1 = mat4x4<f32>();
        var s2 = mat4x4<f32>();
        var s3 = mat4x4<f32>();
        for (var j = 0u; j < hs4; j++) {
            let q = transpose(tok_qkv(qo, j));
            let f0 = qkv_quad(tl.b, tl.h, 1u, k0 + sl, j);
            let f1 = qkv_quad(tl.b, tl.h, 1u, k0 + 8u + sl, j);
            s0 += q * keys_of(f0, 0u);
            s1 += q * keys_of(f0, 1u);
            s2 += q * keys_of(f1, 0u);
            s3 += q * keys_of(f1, 1u);
        }
        s0 *= d.scale;
        s1 *= d.scale;
        s2 *= d.scale;
        s3 *= d.scale;
        m = put_scores(ar, tk, ok, k0, s0[0], m);
        m = put_scores(ar, tk, ok, k0 + 1u, s0[1], m);
        m = put_scores(ar, tk, ok, k0 + 2u, s0[2], m);
        m = put_scores(ar, tk, ok, k0 + 3u, s0[3], m);
        m = put_scores(ar, tk, ok, k0 + 4u, s1[0], m);
        m = put_scores(ar, tk, ok, k0 + 5u, s1[1], m);
        m = put_scores(ar, tk, ok, k0 + 6u, s1[2], m);
        m = put_scores(ar, tk, ok, k0 + 7u, s1[3], m);
        m = put_scores(ar, tk, ok, k0 + 8u, s2[0], m);
        m = put_scores(ar, tk, ok, k0 + 9u, s2[1], m);
        m = put_scores(ar, tk, ok, k0 + 10u, s2[2], m);
        m = put_scores(ar, tk, ok, k0 + 11u, s2[3], m);
        m = put_scores(ar, tk, ok, k0 + 12u, s3[0], m);
        m = put_scores(ar, tk, ok, k0 + 13u, s3[1], m);
        m = put_scores(ar, tk, ok, k0 + 14u, s3[2], m);
        m = put_scores(ar, tk, ok, k0 + 15u, s3[3], m);
    }
    if (ok.x) { softmax_row(ar.x, tk.x, m.x); }
    if (ok.y) { softmax_row(ar.y, tk.y, m.y); }
    if (ok.z) { softmax_row(ar.z, tk.z, m.z); }
    if (ok.w) { softmax_row(ar.w, tk.w, m.w); }
    // out = p · v over the block's tokens (p is zero past each row's own token); lane l fetches
    // chunk j0 + l % 4 of token t2 + l / 4, so one fetch covers two tokens' 4 chunks
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jl = min(j0 + sl % 4u, hs4 - 1u);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t2 = 0u; t2 <= bk.last; t2 += 2u) {
            let f = qkv_quad(tl.b, tl.h, 2u, t2 + sl / 4u, jl);
            let v = keys_of(f, 0u);
            a0 += rows[ar.x + t2] * v;
            a1 += rows[ar.y + t2] * v;
            a2 += rows[ar.z + t2] * v;
            a3 += rows[ar.w + t2] * v;
            if (t2 + 1u <= bk.last) {
                let w = keys_of(f, 1u);
                a0 += rows[ar.x + t2 + 1u] * w;
                a1 += rows[ar.y + t2 + 1u] * w;
                a2 += rows[ar.z + t2 + 1u] * w;
                a3 += rows[ar.w + t2 + 1u] * w;
            }
        }
        store_tile(btc_at(tl.b, tl.h, tk), ok, j0, a0, a1, a2, a3);
    }
}

// Quad j of part `part` of token tok (clamped) of head (b, h) in the backward's qkv, and of dout.
fn bqkv_quad(b: u32, h: u32, part: u32, tok: u32, j: u32) -> vec4<f32> {
    return quad(bqkv_q[qkv_at(b, h, part, vec4<u32>(min(tok, d.t - 1u))).x + j]);
}
fn dout_quad(b: u32, h: u32, tok: u32, j: u32) -> vec4<f32> {
    return quad(dout_q[btc_at(b, h, vec4<u32>(min(tok, d.t - 1u))).x + j]);
}

// ---- attention_backward_rows_sg8(dqkv, rows, dout, qkv, att): dpre rows and dq ----
@compute @workgroup_size(8)
fn attention_backward_rows_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let bk = block_of(wg, nwg, sl);
    if (!bk.live) { return; }
    let tl = bk.tl;
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;
    let hs4 = d.hs / 4u;
    let dyo = btc_at(tl.b, tl.h, tk);
    var dot = vec4<f32>(0.0);
    for (var k0 = 0u; k0 <= bk.last; k0 += 16u) {
        var s0 = mat4x4<f32>();
        var s1 = mat4x4<f32>();
        var s2 = mat4x4<f32>();
        var s3 = mat4x4<f32>();
        for (var j = 0u; j < hs4; j++) {
            let dy = transpose(tok_dout(dyo, j));
            let f0 = bqkv_quad(tl.b, tl.h, 2u, k0 + sl, j);
            let f1 = bqkv_quad(tl.b, tl.h, 2u, k0 + 8u + sl, j);
            s0 += dy * keys_of(f0, 0u);
            s1 += dy * keys_of(f0, 1u);
            s2 += dy * keys_of(f1, 0u);
            s3 += dy * keys_of(f1, 1u);
        }
        dot = put_datt(ar, tk, ok, k0, s0[0], dot);
        dot = put_datt(ar, tk, ok, k0 + 1u, s0[1], dot);
        dot = put_datt(ar, tk, ok, k0 + 2u, s0[2], dot);
        dot = put_datt(ar, tk, ok, k0 + 3u, s0[3], dot);
        dot = put_datt(ar, tk, ok, k0 + 4u, s1[0], dot);
        dot = put_datt(ar, tk, ok, k0 + 5u, s1[1], dot);
        dot = put_datt(ar, tk, ok, k0 + 6u, s1[2], dot);
        dot = put_datt(ar, tk, ok, k0 + 7u, s1[3], dot);
        dot = put_datt(ar, tk, ok, k0 + 8u, s2[0], dot);
        dot = put_datt(ar, tk, ok, k0 + 9u, s2[1], dot);
        dot = put_datt(ar, tk, ok, k0 + 10u, s2[2], dot);
        dot = put_datt(ar, tk, ok, k0 + 11u, s2[3], dot);
        dot = put_datt(ar, tk, ok, k0 + 12u, s3[0], dot);
        dot = put_datt(ar, tk, ok, k0 + 13u, s3[1], dot);
        dot = put_datt(ar, tk, ok, k0 + 14u, s3[2], dot);
        dot = put_datt(ar, tk, ok, k0 + 15u, s3[3], dot);
    }
    if (ok.x) { dpre_row(ar.x, tk.x, dot.x); }
    if (ok.y) { dpre_row(ar.y, tk.y, dot.y); }
    if (ok.z) { dpre_row(ar.z, tk.z, dot.z); }
    if (ok.w) { dpre_row(ar.w, tk.w, dot.w); }
    // dq = dpre · k; rows above the diagonal are unwritten, so mask them
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jl = min(j0 + sl % 4u, hs4 - 1u);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t2 = 0u; t2 <= bk.last; t2 += 2u) {
            let f = bqkv_quad(tl.b, tl.h, 1u, t2 + sl / 4u, jl);
            let k = keys_of(f, 0u);
            let loaded = vec4<f32>(rows[ar.x + t2], rows[ar.y + t2], rows[ar.z + t2], rows[ar.w + t2]);
            let p = select(vec4<f32>(0.0), loaded, vec4<u32>(t2) <= tk);
            a0 += p.x * k;
            a1 += p.y * k;
            a2 += p.z * k;
            a3 += p.w * k;
            if (t2 + 1u <= bk.last) {
                let u = t2 + 1u;
                let k1 = keys_of(f, 1u);
                let loaded1 = vec4<f32>(rows[ar.x + u], rows[ar.y + u], rows[ar.z + u], rows[ar.w + u]);
                let p1 = select(vec4<f32>(0.0), loaded1, vec4<u32>(u) <= tk);
                a0 += p1.x * k1;
                a1 += p1.y * k1;
                a2 += p1.z * k1;
                a3 += p1.w * k1;
            }
        }
        store_tile(qkv_at(tl.b, tl.h, 0u, tk), ok, j0, a0, a1, a2, a3);
    }
}

// ---- attention_backward_cols_sg8(dqkv, rows, dout, qkv, att): dk and dv ----
@compute @workgroup_size(8)
fn attention_backward_cols_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let bk = block_of(wg, nwg, sl);
    if (!bk.live) { return; }
    let tl = bk.tl;
    let tk = toks(tl.t0);   // this lane's key/value tokens t2
    let ok = real(tl.t0);
    let hs4 = d.hs / 4u;
    let first = tl.t0 - sl * 4u;   // the block's first token: no lane has a term before it
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jl = min(j0 + sl % 4u, hs4 - 1u);
        // dk[t2] = Σ_{t ≥ t2} dpre[t, t2] · q[t]
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t = first; t < d.t; t += 2u) {
            let f = bqkv_quad(tl.b, tl.h, 0u, t + sl / 4u, jl);
            let q = keys_of(f, 0u);
            let e = vec4<u32>(tl.a_head + t * d.t) + tk;
            let p = select(vec4<f32>(0.0), vec4<f32>(rows[e.x], rows[e.y], rows[e.z], rows[e.w]), tk <= vec4<u32>(t));
            a0 += p.x * q;
            a1 += p.y * q;
            a2 += p.z * q;
            a3 += p.w * q;
            if (t + 1u < d.t) {
                let u = t + 1u;
                let q1 = keys_of(f, 1u);
                let e1 = e + vec4<u32>(d.t);
                let p1 = select(vec4<f32>(0.0), vec4<f32>(rows[e1.x], rows[e1.y], rows[e1.z], rows[e1.w]), tk <= vec4<u32>(u));
                a0 += p1.x * q1;
                a1 += p1.y * q1;
                a2 += p1.z * q1;
                a3 += p1.w * q1;
            }
        }
        store_tile(qkv_at(tl.b, tl.h, 1u, tk), ok, j0, a0, a1, a2, a3);
        // dv[t2] = Σ_{t ≥ t2} att[t, t2] · dout[t]
        a0 = mat4x4<f32>();
        a1 = mat4x4<f32>();
        a2 = mat4x4<f32>();
        a3 = mat4x4<f32>();
        for (var t = first; t < d.t; t += 2u) {
            let f = dout_quad(tl.b, tl.h, t + sl / 4u, jl);
            let dy = keys_of(f, 0u);
            let e = vec4<u32>(tl.a_head + t * d.t) + tk;
            let p = select(vec4<f32>(0.0), vec4<f32>(att_at(e.x), att_at(e.y), att_at(e.z), att_at(e.w)), tk <= vec4<u32>(t));
            a0 += p.x * dy;
            a1 += p.y * dy;
            a2 += p.z * dy;
            a3 += p.w * dy;
            if (t + 1u < d.t) {
                let u = t + 1u;
                let dy1 = keys_of(f, 1u);
                let e1 = e + vec4<u32>(d.t);
                let p1 = select(vec4<f32>(0.0), vec4<f32>(att_at(e1.x), att_at(e1.y), att_at(e1.z), att_at(e1.w)), tk <= vec4<u32>(u));
                a0 += p1.x * dy1;
                a1 += p1.y * dy1;
                a2 += p1.z * dy1;
                a3 += p1.w * dy1;
            }
        }
        store_tile(qkv_at(tl.b, tl.h, 2u, tk), ok, j0, a0, a1, a2, a3);
    }
}
