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
//
//   dot blocks   32 keys at a time: per channel chunk, 4 Quad fetches of the lane's own tokens
//                (reused over the 32 keys) and 4 shared fetches (one key each per lane)
//   token sums   Σ_u p[r][u]·x[u] over tokens u: one shared fetch gives 8 chunks of one token
//                (hs/4 > 4) or 4 chunks of two tokens (hs/4 <= 4); p is the lane's own

// The workgroup's head and block: the lane's tile, its tokens (clamped to T−1), which of them are
// real and their rows' offsets in [B,NH,T,T]; the block's last token; whether the workgroup
// lies inside the grid (uniform).
struct Block { tl: Tile, tk: vec4<u32>, ok: vec4<bool>, ar: vec4<u32>, last: u32, live: bool }

fn block_of(wg: vec3<u32>, nwg: vec3<u32>, sl: u32) -> Block {
    let nt = (d.t + 3u) / 4u;
    let nb = (nt + 7u) / 8u;
    let w = wg.x + wg.y * nwg.x;
    let bh = w / nb;
    let blk = w % nb;
    let t0 = (blk * 8u + sl) * 4u;
    let last = min(blk * 32u + 31u, d.t - 1u);
    let tl = Tile(bh / d.nh, bh % d.nh, t0, min(t0 + 3u, d.t - 1u), bh * d.t * d.t);
    let tk = toks(t0);
    return Block(tl, tk, real(t0), vec4<u32>(tl.a_head) + tk * d.t, last, w < d.b * d.nh * nb);
}

// Columns 4i .. 4i+3 (i = 0, 1) of a shared fetch: lane 4i + c's Quad is column c.
fn cols_of(f: vec4<f32>, i: u32) -> mat4x4<f32> {
    if (i == 0u) {
        return mat4x4<f32>(subgroupBroadcast(f, 0u), subgroupBroadcast(f, 1u), subgroupBroadcast(f, 2u), subgroupBroadcast(f, 3u));
    }
    return mat4x4<f32>(subgroupBroadcast(f, 4u), subgroupBroadcast(f, 5u), subgroupBroadcast(f, 6u), subgroupBroadcast(f, 7u));
}

// What a sum reads. Dots: the forward's scores q·k, the backward's datt dout·v. Token sums:
// the forward's out = Σ p·v, dq = Σ dpre·k (rows masked past the diagonal), dk = Σ dpre·q and
// dv = Σ att·dout over the queries t ≥ this lane's tokens.
const SUM_OUT = 0u;
const SUM_DQ = 1u;
const SUM_DK = 2u;
const SUM_DV = 3u;

// Quad j of the shared row of token tok (clamped to T−1) that sum `mode` reads.
fn shared_quad(mode: u32, b: u32, h: u32, tok: u32, j: u32) -> vec4<f32> {
    let tc = vec4<u32>(min(tok, d.t - 1u));
    switch mode {
        case 0u: { return bqkv(qkv_at(b, h, 2u, tc).x + j); }   // v
        case 1u: { return bqkv(qkv_at(b, h, 1u, tc).x + j); }   // k
        case 2u: { return bqkv(qkv_at(b, h, 0u, tc).x + j); }   // q
        default: { return dy4(btc_at(b, h, tc).x + j); }       // dout
    }
}

// The weights of the lane's 4 tokens at summation token u.
fn weights(mode: u32, bk: Block, u: u32) -> vec4<f32> {
    let tl = bk.tl;
    let tk = bk.tk;
    let ar = bk.ar;
    switch mode {
        case 0u: { return vec4<f32>(rows[ar.x + u], rows[ar.y + u], rows[ar.z + u], rows[ar.w + u]); }
        case 1u: {
            let loaded = vec4<f32>(rows[ar.x + u], rows[ar.y + u], rows[ar.z + u], rows[ar.w + u]);
            return select(vec4<f32>(0.0), loaded, vec4<u32>(u) <= tk);
        }
        case 2u: {
            let e = vec4<u32>(tl.a_head + u * d.t) + tk;
            let dpre = vec4<f32>(dpre_at(e.x), dpre_at(e.y), dpre_at(e.z), dpre_at(e.w));
            return select(vec4<f32>(0.0), dpre, tk <= vec4<u32>(u));
        }
        default: {
            let e = vec4<u32>(tl.a_head + u * d.t) + tk;
            return select(vec4<f32>(0.0), vec4<f32>(att_at(e.x), att_at(e.y), att_at(e.z), att_at(e.w)), tk <= vec4<u32>(u));
        }
    }
}

// Σ_{u = u0 ..= u1} w[r](u)·x[u] for the lane's 4 tokens, stored at o (the `_vec4` kernels'
// sum tiles, in the same order).
fn token_sum(mode: u32, sl: u32, bk: Block, u0: u32, u1: u32, o: vec4<u32>) {
    let tl = bk.tl;
    let hs4 = d.hs / 4u;
    if (hs4 <= 4u) {
        // lane l fetches chunk l % 4 of token u + l / 4: one fetch, two tokens
        let jl = min(sl % 4u, hs4 - 1u);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var u = u0; u <= u1; u += 2u) {
            let f = shared_quad(mode, tl.b, tl.h, u + sl / 4u, jl);
            let x = cols_of(f, 0u);
            let p = weights(mode, bk, u);
            a0 += p.x * x;
            a1 += p.y * x;
            a2 += p.z * x;
            a3 += p.w * x;
            if (u + 1u <= u1) {
                let y = cols_of(f, 1u);
                let q = weights(mode, bk, u + 1u);
                a0 += q.x * y;
                a1 += q.y * y;
                a2 += q.z * y;
                a3 += q.w * y;
            }
        }
        store_tile(o, bk.ok, 0u, a0, a1, a2, a3);
        return;
    }
    // lane l fetches chunk j0 + l of token u: one fetch, 8 chunks
    for (var j0 = 0u; j0 < hs4; j0 += 8u) {
        let jl = min(j0 + sl, hs4 - 1u);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        var b0 = mat4x4<f32>();
        var b1 = mat4x4<f32>();
        var b2 = mat4x4<f32>();
        var b3 = mat4x4<f32>();
        for (var u = u0; u <= u1; u++) {
            let f = shared_quad(mode, tl.b, tl.h, u, jl);
            let x = cols_of(f, 0u);
            let y = cols_of(f, 1u);
            let p = weights(mode, bk, u);
            a0 += p.x * x;
            a1 += p.y * x;
            a2 += p.z * x;
            a3 += p.w * x;
            b0 += p.x * y;
            b1 += p.y * y;
            b2 += p.z * y;
            b3 += p.w * y;
        }
        store_tile(o, bk.ok, j0, a0, a1, a2, a3);
        if (j0 + 4u < hs4) {
            store_tile(o, bk.ok, j0 + 4u, b0, b1, b2, b3);
        }
    }
}

// Dots of the lane's 4 tokens (their q from qkv, or their dout, at offsets o) with the 32 keys
// k0 .. k0+31 of part `part` of qkv: s{i}[c] = the dots with key k0 + 4i + c.
struct Dots { s0: mat4x4<f32>, s1: mat4x4<f32>, s2: mat4x4<f32>, s3: mat4x4<f32>, s4: mat4x4<f32>, s5: mat4x4<f32>, s6: mat4x4<f32>, s7: mat4x4<f32> }

// r + the dots of the lane's 4 tokens (chunk j of each, the columns of `tokens`) with chunk j of
// the 32 keys whose Quads start at ko (lane l fetches keys l, 8 + l, 16 + l, 24 + l). The
// transpose stays in this function, beside its products: SPIR-V → NIR then computes
// transpose(a) · b as dot products, as the `_vec4` kernels' sums compile, which a transposed
// argument would not.
fn add_keys(r: ptr<function, Dots>, tokens: mat4x4<f32>, ko: vec4<u32>, j: u32) {
    let own = transpose(tokens);
    let f0 = bqkv(ko.x + j);
    let f1 = bqkv(ko.y + j);
    let f2 = bqkv(ko.z + j);
    let f3 = bqkv(ko.w + j);
    (*r).s0 += own * cols_of(f0, 0u);
    (*r).s1 += own * cols_of(f0, 1u);
    (*r).s2 += own * cols_of(f1, 0u);
    (*r).s3 += own * cols_of(f1, 1u);
    (*r).s4 += own * cols_of(f2, 0u);
    (*r).s5 += own * cols_of(f2, 1u);
    (*r).s6 += own * cols_of(f3, 0u);
    (*r).s7 += own * cols_of(f3, 1u);
}

// The Quads of the lane's fetches of keys k0 .. k0+31 (clamped) of part `part` of qkv.
fn keys_at(part: u32, sl: u32, tl: Tile, k0: u32) -> vec4<u32> {
    return qkv_at(tl.b, tl.h, part, min(vec4<u32>(k0 + sl) + vec4<u32>(0u, 8u, 16u, 24u), vec4<u32>(d.t - 1u)));
}

// The forward's q·k (`scores`: q of the lane's tokens at o, keys from k) and the backward's
// dout·v (dout at o, keys from v).
fn dots(scores: bool, sl: u32, tl: Tile, o: vec4<u32>, k0: u32) -> Dots {
    var r = Dots();
    let ko = keys_at(select(2u, 1u, scores), sl, tl, k0);
    for (var j = 0u; j < d.hs / 4u; j++) {
        var tokens: mat4x4<f32>;
        if (scores) {
            tokens = tok_bqkv(o, j);
        } else {
            tokens = tok_dout(o, j);
        }
        add_keys(&r, tokens, ko, j);
    }
    return r;
}

// The forward's scores of 4 keys k .. k+3 (scaled), stored; returns the updated row maxima.
fn put_scores4(ar: vec4<u32>, tk: vec4<u32>, ok: vec4<bool>, k: u32, s: mat4x4<f32>, m: vec4<f32>) -> vec4<f32> {
    let x = s * d.scale;
    var r = put_scores(ar, tk, ok, k, x[0], m);
    r = put_scores(ar, tk, ok, k + 1u, x[1], r);
    r = put_scores(ar, tk, ok, k + 2u, x[2], r);
    return put_scores(ar, tk, ok, k + 3u, x[3], r);
}

// The backward's datt of 4 keys k .. k+3, stored; returns the updated Σ att·datt.
fn put_datt4(ar: vec4<u32>, tk: vec4<u32>, ok: vec4<bool>, k: u32, s: mat4x4<f32>, dot: vec4<f32>) -> vec4<f32> {
    var r = put_datt(ar, tk, ok, k, s[0], dot);
    r = put_datt(ar, tk, ok, k + 1u, s[1], r);
    r = put_datt(ar, tk, ok, k + 2u, s[2], r);
    return put_datt(ar, tk, ok, k + 3u, s[3], r);
}

// Stores the 32 columns k0 .. k0+31 of a block of dots and returns the updated per-row figure:
// the forward's scores (scaled) and row maxima, or the backward's datt and Σ att·datt.
fn put_block(scores: bool, ar: vec4<u32>, tk: vec4<u32>, ok: vec4<bool>, k0: u32, s: Dots, acc: vec4<f32>) -> vec4<f32> {
    var r = put4(scores, ar, tk, ok, k0, s.s0, acc);
    r = put4(scores, ar, tk, ok, k0 + 4u, s.s1, r);
    r = put4(scores, ar, tk, ok, k0 + 8u, s.s2, r);
    r = put4(scores, ar, tk, ok, k0 + 12u, s.s3, r);
    r = put4(scores, ar, tk, ok, k0 + 16u, s.s4, r);
    r = put4(scores, ar, tk, ok, k0 + 20u, s.s5, r);
    r = put4(scores, ar, tk, ok, k0 + 24u, s.s6, r);
    return put4(scores, ar, tk, ok, k0 + 28u, s.s7, r);
}
fn put4(scores: bool, ar: vec4<u32>, tk: vec4<u32>, ok: vec4<bool>, k: u32, s: mat4x4<f32>, acc: vec4<f32>) -> vec4<f32> {
    if (scores) {
        return put_scores4(ar, tk, ok, k, s, acc);
    }
    return put_datt4(ar, tk, ok, k, s, acc);
}

// ---- attention_forward_sg8(out, rows, qkv, qkv, qkv) ----
// The forward binds qkv in the backward's three read slots (dout, qkv, att), so the kernels share
// their functions without two names for one binding in one entry point; it reads only qkv (4).
@compute @workgroup_size(8)
fn attention_forward_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let bk = block_of(wg, nwg, sl);
    if (!bk.live) { return; }
    let qo = qkv_at(bk.tl.b, bk.tl.h, 0u, bk.tk);
    var m = vec4<f32>(-3.0e38);
    for (var k0 = 0u; k0 <= bk.last; k0 += 32u) {
        m = put_block(true, bk.ar, bk.tk, bk.ok, k0, dots(true, sl, bk.tl, qo, k0), m);
    }
    if (bk.ok.x) { softmax_row(bk.ar.x, bk.tk.x, m.x); }
    if (bk.ok.y) { softmax_row(bk.ar.y, bk.tk.y, m.y); }
    if (bk.ok.z) { softmax_row(bk.ar.z, bk.tk.z, m.z); }
    if (bk.ok.w) { softmax_row(bk.ar.w, bk.tk.w, m.w); }
    // out = p · v over the block's tokens (p is zero past each row's own token)
    token_sum(SUM_OUT, sl, bk, 0u, bk.last, btc_at(bk.tl.b, bk.tl.h, bk.tk));
}

// ---- attention_backward_rows_sg8(dqkv, rows, dout, qkv, att): dpre rows and dq ----
@compute @workgroup_size(8)
fn attention_backward_rows_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let bk = block_of(wg, nwg, sl);
    if (!bk.live) { return; }
    let dyo = btc_at(bk.tl.b, bk.tl.h, bk.tk);
    var dot = vec4<f32>(0.0);
    for (var k0 = 0u; k0 <= bk.last; k0 += 32u) {
        dot = put_block(false, bk.ar, bk.tk, bk.ok, k0, dots(false, sl, bk.tl, dyo, k0), dot);
    }
    if (bk.ok.x) { dpre_row(bk.ar.x, bk.tk.x, dot.x); }
    if (bk.ok.y) { dpre_row(bk.ar.y, bk.tk.y, dot.y); }
    if (bk.ok.z) { dpre_row(bk.ar.z, bk.tk.z, dot.z); }
    if (bk.ok.w) { dpre_row(bk.ar.w, bk.tk.w, dot.w); }
    // dq = dpre · k; rows above the diagonal are unwritten, so they are masked
    token_sum(SUM_DQ, sl, bk, 0u, bk.last, qkv_at(bk.tl.b, bk.tl.h, 0u, bk.tk));
}

// ---- attention_backward_cols_sg8(dqkv, rows, dout, qkv, att): dk and dv ----
@compute @workgroup_size(8)
fn attention_backward_cols_sg8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let bk = block_of(wg, nwg, sl);
    if (!bk.live) { return; }
    let first = bk.tl.t0 - sl * 4u;   // the block's first token: no lane has a term before it
    // dk[t2] = Σ_{t ≥ t2} dpre[t, t2] · q[t], dv[t2] = Σ_{t ≥ t2} att[t, t2] · dout[t]
    token_sum(SUM_DK, sl, bk, first, d.t - 1u, qkv_at(bk.tl.b, bk.tl.h, 1u, bk.tk));
    token_sum(SUM_DV, sl, bk, first, d.t - 1u, qkv_at(bk.tl.b, bk.tl.h, 2u, bk.tk));
}
