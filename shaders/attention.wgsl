// Causal multi-head self-attention, forward and backward, one source for f32 and packed bf16 (a
// storage prelude, store_f32.wgsl or store_bf16.wgsl, comes first). Twins:
// cpu::attention_{forward,backward} in f32, cpu::packed::attention in bf16.
//
// qkv [B,T,3C] = q | k | v per token; head h owns channels h*hs..(h+1)*hs of each (hs = C/NH).
// out, dout [B,T,C], dqkv [B,T,3C] and att [B,NH,T,T] are words of the storage type (under bf16
// hs is even, so a head slice owns whole words). rows [B,NH,T,T] is f32 in both precisions, one
// row per query token t, entries t2 <= t used (causal): the forward's scores and probabilities
// (under f32 this is att itself; under bf16 an f32 scratch the caller packs into att afterwards,
// so out is summed from the f32 probabilities), the backward's dpre.
//
//   forward         one thread per row (b,h,t): scores → max → exp → normalise → Σ p·v
//   backward_rows   one thread per row (b,h,t): datt = dy·v, dpre = att⊙(datt − Σatt·datt)·scale
//                   into rows, dq[t] = Σ_t2 dpre[t,t2]·k[t2]
//   backward_cols   one thread per column (b,h,t2): dk[t2] = Σ_{t≥t2} dpre[t,t2]·q[t],
//                   dv[t2] = Σ_{t≥t2} att[t,t2]·dy[t]   (a gather: no scattered +=)
//
// All arithmetic is f32 and every sum runs in one fixed order, the same in both precisions, so
// results are bit-identical run to run. Each kernel comes twice: the plain one (one thread per
// token of a head, 256 a group, a word of LANES elements at a time) handles any hs; the `_vec4`
// one (hs % 4 == 0; one thread per 4 tokens of a head, 64 a group) loads q/k/v/dy as Quads into
// 4×4 register tiles, since storage loads dominate on software adapters.
// Thread index: gid.x + gid.y * nwg.x * WG (groups folded over y), bounds-checked.

struct Dims { b: u32, t: u32, c: u32, nh: u32, hs: u32, scale: f32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

// Row or column index → (b, h, t) and the row's offset in a [B,NH,T,T] buffer.
struct Row { b: u32, h: u32, t: u32, a0: u32 }

fn row_of(i: u32) -> Row {
    let bh = i / d.t;
    return Row(bh / d.nh, bh % d.nh, i % d.t, i * d.t);
}

fn n_rows() -> u32 {
    return d.b * d.nh * d.t;
}

// ---- word bindings (any hs) ----
@group(0) @binding(1) var<storage, read_write> out_w: array<u32>;   // out [B,T,C] or dqkv [B,T,3C]
@group(0) @binding(2) var<storage, read_write> rows: array<f32>;    // probabilities or dpre, f32
@group(0) @binding(3) var<storage, read> qkv_w: array<u32>;         // forward: qkv
@group(0) @binding(3) var<storage, read> dout_w: array<u32>;        // backward: dout [B,T,C]
@group(0) @binding(4) var<storage, read> bqkv_w: array<u32>;        // backward: qkv
@group(0) @binding(5) var<storage, read> att: array<u32>;           // backward: att

// ---- Quad bindings (hs % 4 == 0) ----
@group(0) @binding(1) var<storage, read_write> out_q: array<Quad>;
@group(0) @binding(3) var<storage, read> qkv_q: array<Quad>;
@group(0) @binding(3) var<storage, read> dout_q: array<Quad>;
@group(0) @binding(4) var<storage, read> bqkv_q: array<Quad>;

// The forward's Quad q of qkv (from its texture copy under TEXELS).
fn fqkv(q: u32) -> vec4<f32> {
    if (TEXELS) {
        return quad(flat_in(0u, q));
    }
    return quad(qkv_q[q]);
}

// The backward's Quad q of qkv and of dout (from their texture copies under TEXELS).
fn bqkv(q: u32) -> vec4<f32> {
    if (TEXELS) {
        return quad(flat_in(0u, q));
    }
    return quad(bqkv_q[q]);
}
fn dy4(q: u32) -> vec4<f32> {
    if (TEXELS) {
        return quad(flat_in(1u, q));
    }
    return quad(dout_q[q]);
}

// Element e of att, widened (from its texture copy under TEXELS: the reads prelude).
fn att_at(e: u32) -> f32 {
    if (TEXELS) {
        return att_texel(e);
    }
    return lanes(att[e / LANES])[e % LANES];
}

// Element e of the rows kernel's dpre, read by the columns kernel (from its copy under TEXELS).
fn dpre_at(e: u32) -> f32 {
    if (TEXELS) {
        return rows_texel(e);
    }
    return rows[e];
}

// s + Σ x·y over a word's lanes, in element order.
fn fma_lanes(x: vec2<f32>, y: vec2<f32>, s: f32) -> f32 {
    let r = fma(x.x, y.x, s);
    if (LANES == 1u) {
        return r;
    }
    return fma(x.y, y.y, r);
}

// Softmax of the scores already in rows[a0..=a0+t] (max-subtracted), zeros above the diagonal.
fn softmax_row(a0: u32, t: u32, m: f32) {
    var sum = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) {
        let e = exp(rows[a0 + t2] - m);
        rows[a0 + t2] = e;
        sum += e;
    }
    for (var t2 = 0u; t2 < d.t; t2++) {
        if (t2 <= t) {
            rows[a0 + t2] = rows[a0 + t2] / sum;
        } else {
            rows[a0 + t2] = 0.0;
        }
    }
}

// Σ_t2 att·datt over row t, with the datt already in rows[a0..=a0+t].
fn att_dot_row(a0: u32, t: u32) -> f32 {
    var dot = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) {
        dot = fma(att_at(a0 + t2), rows[a0 + t2], dot);
    }
    return dot;
}

// dpre = att ⊙ (datt − dot) · scale, in place over the datt in rows[a0..=a0+t].
fn dpre_row(a0: u32, t: u32, dot: f32) {
    for (var t2 = 0u; t2 <= t; t2++) {
        rows[a0 + t2] = att_at(a0 + t2) * (rows[a0 + t2] - dot) * d.scale;
    }
}

// Word offsets of row r's head slice: words per token of a [B,T,C] tensor, of qkv, and the
// slice's first word of q (of dy/out: `btc`).
struct Words { cw: u32, c3: u32, hw: u32, q: u32, btc: u32 }

fn words_of(r: Row) -> Words {
    let cw = d.c / LANES;
    let hw = d.hs / LANES;
    return Words(cw, 3u * cw, hw, (r.b * d.t + r.t) * 3u * cw + r.h * hw, (r.b * d.t + r.t) * cw + r.h * hw);
}

// ---- attention_forward(out, rows, qkv), any hs ----
@compute @workgroup_size(256)
fn attention_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= n_rows()) { return; }
    let r = row_of(i);
    let w = words_of(r);
    let k_base = r.b * d.t * w.c3 + w.cw + r.h * w.hw;   // k of token t2 at k_base + t2*c3
    let v_base = k_base + w.cw;
    var m = -3.0e38;
    for (var t2 = 0u; t2 <= r.t; t2++) {
        let k0 = k_base + t2 * w.c3;
        var s = 0.0;
        for (var j = 0u; j < w.hw; j++) {
            s = fma_lanes(lanes(qkv_w[w.q + j]), lanes(qkv_w[k0 + j]), s);
        }
        s *= d.scale;
        rows[r.a0 + t2] = s;
        m = max(m, s);
    }
    softmax_row(r.a0, r.t, m);
    for (var j = 0u; j < w.hw; j++) {
        var acc = vec2<f32>(0.0);
        for (var t2 = 0u; t2 <= r.t; t2++) {
            acc = fma(vec2<f32>(rows[r.a0 + t2]), lanes(qkv_w[v_base + t2 * w.c3 + j]), acc);
        }
        out_w[w.btc + j] = pack(acc);
    }
}

// ---- attention_backward_rows(dqkv, rows, dout, qkv, att), any hs: dpre rows and dq ----
@compute @workgroup_size(256)
fn attention_backward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= n_rows()) { return; }
    let r = row_of(i);
    let w = words_of(r);
    let k_base = r.b * d.t * w.c3 + w.cw + r.h * w.hw;
    let v_base = k_base + w.cw;
    for (var t2 = 0u; t2 <= r.t; t2++) {
        let v0 = v_base + t2 * w.c3;
        var da = 0.0;
        for (var j = 0u; j < w.hw; j++) {
            da = fma_lanes(lanes(dout_w[w.btc + j]), lanes(bqkv_w[v0 + j]), da);
        }
        rows[r.a0 + t2] = da;
    }
    dpre_row(r.a0, r.t, att_dot_row(r.a0, r.t));
    for (var j = 0u; j < w.hw; j++) {
        var acc = vec2<f32>(0.0);
        for (var t2 = 0u; t2 <= r.t; t2++) {
            acc = fma(vec2<f32>(rows[r.a0 + t2]), lanes(bqkv_w[k_base + t2 * w.c3 + j]), acc);
        }
        out_w[w.q + j] = pack(acc);
    }
}

// ---- attention_backward_cols(dqkv, rows, dout, qkv, att), any hs: dk and dv ----
@compute @workgroup_size(256)
fn attention_backward_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= n_rows()) { return; }
    let r = row_of(i);   // r.t is the key/value token t2; rows of this head start at (i - r.t)*T
    let w = words_of(r);
    let head0 = (i - r.t) * d.t;                 // rows/att element [t,t2] at head0 + t*T + t2
    let q_base = r.b * d.t * w.c3 + r.h * w.hw;  // q of token t at q_base + t*c3
    let dy_base = r.b * d.t * w.cw + r.h * w.hw;
    let k0 = w.q + w.cw;
    for (var j = 0u; j < w.hw; j++) {
        var dk = vec2<f32>(0.0);
        var dv = vec2<f32>(0.0);
        for (var t = r.t; t < d.t; t++) {
            let a = head0 + t * d.t + r.t;
            dk = fma(vec2<f32>(rows[a]), lanes(bqkv_w[q_base + t * w.c3 + j]), dk);
            dv = fma(vec2<f32>(att_at(a)), lanes(dout_w[dy_base + t * w.cw + j]), dv);
        }
        out_w[k0 + j] = pack(dk);
        out_w[k0 + w.cw + j] = pack(dv);
    }
}
// ======== register-tiled vec4 path (hs % 4 == 0); offsets count Quads (4 channels) ========
// A thread owns 4 consecutive tokens t0..t0+3 of one head: query rows in attention_forward_vec4
// and attention_backward_rows_vec4, key/value columns in attention_backward_cols_vec4.
//
//   dot tile   s[u][r] = Σ_j q[t0+r][j]·k[k0+u][j]       8 Quad loads per 64 FMAs (Qᵀ·K)
//   sum tile   a_r[jj] = Σ_t2 p[t0+r][t2]·v[t2][j0+jj]   4 scalar + 4 Quad loads per 64 FMAs
//
// Tokens past T are clamped to T−1 for loading and never stored.

const IOTA = vec4<u32>(0u, 1u, 2u, 3u);

struct Tile { b: u32, h: u32, t0: u32, last: u32, a_head: u32 }

fn n_tiles() -> u32 {
    return d.b * d.nh * ((d.t + 3u) / 4u);
}

// Tile i → head (b, h), first token t0, last real token, offset of the head in [B,NH,T,T].
fn tile_of(i: u32) -> Tile {
    let nt = (d.t + 3u) / 4u;
    let bh = i / nt;
    let t0 = (i % nt) * 4u;
    return Tile(bh / d.nh, bh % d.nh, t0, min(t0 + 3u, d.t - 1u), bh * d.t * d.t);
}

// Tokens t0..t0+3 clamped to T−1, and which of them are real.
fn toks(t0: u32) -> vec4<u32> {
    return min(vec4<u32>(t0) + IOTA, vec4<u32>(d.t - 1u));
}
fn real(t0: u32) -> vec4<bool> {
    return vec4<u32>(t0) + IOTA < vec4<u32>(d.t);
}

// Offsets of part (0 q, 1 k, 2 v) of head h for tokens tk in qkv [B,T,3C].
fn qkv_at(b: u32, h: u32, part: u32, tk: vec4<u32>) -> vec4<u32> {
    let c4 = d.c / 4u;
    return (vec4<u32>(b * d.t) + tk) * (3u * c4) + vec4<u32>(part * c4 + h * (d.hs / 4u));
}

// Offsets of head h for tokens tk in a [B,T,C] tensor (out, dout).
fn btc_at(b: u32, h: u32, tk: vec4<u32>) -> vec4<u32> {
    return (vec4<u32>(b * d.t) + tk) * (d.c / 4u) + vec4<u32>(h * (d.hs / 4u));
}

// Channel chunk j of 4 tokens (columns = tokens).
fn tok_qkv(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(fqkv(o.x + j), fqkv(o.y + j), fqkv(o.z + j), fqkv(o.w + j));
}
fn tok_bqkv(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(bqkv(o.x + j), bqkv(o.y + j), bqkv(o.z + j), bqkv(o.w + j));
}
fn tok_dout(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(dy4(o.x + j), dy4(o.y + j), dy4(o.z + j), dy4(o.w + j));
}

// Channel chunks jc of one token at o (columns = chunks).
fn chunks_qkv(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(fqkv(o + jc.x), fqkv(o + jc.y), fqkv(o + jc.z), fqkv(o + jc.w));
}
fn chunks_bqkv(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(bqkv(o + jc.x), bqkv(o + jc.y), bqkv(o + jc.z), bqkv(o + jc.w));
}
fn chunks_dout(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(dy4(o + jc.x), dy4(o + jc.y), dy4(o + jc.z), dy4(o + jc.w));
}

// Chunks j0..j0+3 (clamped) and the store of one token's sum tile, chunks past hs/4 dropped.
fn chunk_ids(j0: u32) -> vec4<u32> {
    return min(vec4<u32>(j0) + IOTA, vec4<u32>(d.hs / 4u - 1u));
}
fn store_chunks(o: u32, j0: u32, a: mat4x4<f32>) {
    let hs4 = d.hs / 4u;
    out_q[o + j0] = quad_pack(a[0]);
    if (j0 + 1u < hs4) { out_q[o + j0 + 1u] = quad_pack(a[1]); }
    if (j0 + 2u < hs4) { out_q[o + j0 + 2u] = quad_pack(a[2]); }
    if (j0 + 3u < hs4) { out_q[o + j0 + 3u] = quad_pack(a[3]); }
}
fn store_tile(o: vec4<u32>, ok: vec4<bool>, j0: u32, a0: mat4x4<f32>, a1: mat4x4<f32>, a2: mat4x4<f32>, a3: mat4x4<f32>) {
    if (ok.x) { store_chunks(o.x, j0, a0); }
    if (ok.y) { store_chunks(o.y, j0, a1); }
    if (ok.z) { store_chunks(o.z, j0, a2); }
    if (ok.w) { store_chunks(o.w, j0, a3); }
}

// Entries [r, t2] of the 4 rows (at offsets ar, tokens tk) that exist and are causal.
fn causal(tk: vec4<u32>, ok: vec4<bool>, t2: u32) -> vec4<bool> {
    return ok & (vec4<u32>(t2) <= tk);
}
fn put_col(ar: vec4<u32>, keep: vec4<bool>, t2: u32, s: vec4<f32>) {
    if (keep.x) { rows[ar.x + t2] = s.x; }
    if (keep.y) { rows[ar.y + t2] = s.y; }
    if (keep.z) { rows[ar.z + t2] = s.z; }
    if (keep.w) { rows[ar.w + t2] = s.w; }
}
// Stores score column t2 and returns the updated row maxima.
fn put_scores(ar: vec4<u32>, tk: vec4<u32>, ok: vec4<bool>, t2: u32, s: vec4<f32>, m: vec4<f32>) -> vec4<f32> {
    let keep = causal(tk, ok, t2);
    put_col(ar, keep, t2, s);
    return select(m, max(m, s), keep);
}
// Stores datt column t2 and returns the updated Σ att·datt.
fn put_datt(ar: vec4<u32>, tk: vec4<u32>, ok: vec4<bool>, t2: u32, s: vec4<f32>, dot: vec4<f32>) -> vec4<f32> {
    let keep = causal(tk, ok, t2);
    put_col(ar, keep, t2, s);
    let c = min(t2, d.t - 1u);
    let a = vec4<f32>(att_at(ar.x + c), att_at(ar.y + c), att_at(ar.z + c), att_at(ar.w + c));
    return select(dot, fma(a, s, dot), keep);
}

// ---- attention_forward_vec4(out, rows, qkv) ----
@compute @workgroup_size(64)
fn attention_forward_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;   // rows of the 4 queries
    let hs4 = d.hs / 4u;
    let qo = qkv_at(tl.b, tl.h, 0u, tk);
    var m = vec4<f32>(-3.0e38);
    for (var k0 = 0u; k0 <= tl.last; k0 += 4u) {
        let ko = qkv_at(tl.b, tl.h, 1u, toks(k0));
        var s = mat4x4<f32>();
        for (var j = 0u; j < hs4; j++) {
            s += transpose(tok_qkv(qo, j)) * tok_qkv(ko, j);
        }
        s *= d.scale;
        m = put_scores(ar, tk, ok, k0, s[0], m);
        m = put_scores(ar, tk, ok, k0 + 1u, s[1], m);
        m = put_scores(ar, tk, ok, k0 + 2u, s[2], m);
        m = put_scores(ar, tk, ok, k0 + 3u, s[3], m);
    }
    if (ok.x) { softmax_row(ar.x, tk.x, m.x); }
    if (ok.y) { softmax_row(ar.y, tk.y, m.y); }
    if (ok.z) { softmax_row(ar.z, tk.z, m.z); }
    if (ok.w) { softmax_row(ar.w, tk.w, m.w); }
    // out = p · v; p is zero above the diagonal, so every row runs to the tile's last token
    let c34 = 3u * (d.c / 4u);
    let vb = qkv_at(tl.b, tl.h, 2u, vec4<u32>(0u)).x;
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jc = chunk_ids(j0);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t2 = 0u; t2 <= tl.last; t2++) {
            let v = chunks_qkv(vb + t2 * c34, jc);
            a0 += rows[ar.x + t2] * v;
            a1 += rows[ar.y + t2] * v;
            a2 += rows[ar.z + t2] * v;
            a3 += rows[ar.w + t2] * v;
        }
        store_tile(btc_at(tl.b, tl.h, tk), ok, j0, a0, a1, a2, a3);
    }
}

// ---- attention_backward_rows_vec4(dqkv, rows, dout, qkv, att): dpre rows and dq ----
@compute @workgroup_size(64)
fn attention_backward_rows_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;   // rows / att rows
    let hs4 = d.hs / 4u;
    let dyo = btc_at(tl.b, tl.h, tk);
    var dot = vec4<f32>(0.0);
    for (var k0 = 0u; k0 <= tl.last; k0 += 4u) {
        let vo = qkv_at(tl.b, tl.h, 2u, toks(k0));
        var s = mat4x4<f32>();
        for (var j = 0u; j < hs4; j++) {
            s += transpose(tok_dout(dyo, j)) * tok_bqkv(vo, j);
        }
        dot = put_datt(ar, tk, ok, k0, s[0], dot);
        dot = put_datt(ar, tk, ok, k0 + 1u, s[1], dot);
        dot = put_datt(ar, tk, ok, k0 + 2u, s[2], dot);
        dot = put_datt(ar, tk, ok, k0 + 3u, s[3], dot);
    }
    if (ok.x) { dpre_row(ar.x, tk.x, dot.x); }
    if (ok.y) { dpre_row(ar.y, tk.y, dot.y); }
    if (ok.z) { dpre_row(ar.z, tk.z, dot.z); }
    if (ok.w) { dpre_row(ar.w, tk.w, dot.w); }
    // dq = dpre · k; rows above the diagonal are unwritten, so mask them
    let c34 = 3u * (d.c / 4u);
    let kb = qkv_at(tl.b, tl.h, 1u, vec4<u32>(0u)).x;
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jc = chunk_ids(j0);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t2 = 0u; t2 <= tl.last; t2++) {
            let k = chunks_bqkv(kb + t2 * c34, jc);
            let loaded = vec4<f32>(rows[ar.x + t2], rows[ar.y + t2], rows[ar.z + t2], rows[ar.w + t2]);
            let p = select(vec4<f32>(0.0), loaded, vec4<u32>(t2) <= tk);
            a0 += p.x * k;
            a1 += p.y * k;
            a2 += p.z * k;
            a3 += p.w * k;
        }
        store_tile(qkv_at(tl.b, tl.h, 0u, tk), ok, j0, a0, a1, a2, a3);
    }
}

// ---- attention_backward_cols_vec4(dqkv, rows, dout, qkv, att): dk and dv ----
@compute @workgroup_size(64)
fn attention_backward_cols_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let tk = toks(tl.t0);   // this thread's key/value tokens t2
    let ok = real(tl.t0);
    let hs4 = d.hs / 4u;
    let c4 = d.c / 4u;
    let qb = qkv_at(tl.b, tl.h, 0u, vec4<u32>(0u)).x;
    let dyb = btc_at(tl.b, tl.h, vec4<u32>(0u)).x;
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jc = chunk_ids(j0);
        // dk[t2] = Σ_{t ≥ t2} dpre[t, t2] · q[t]
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t = tl.t0; t < d.t; t++) {
            let e = vec4<u32>(tl.a_head + t * d.t) + tk;
            let live = tk <= vec4<u32>(t);
            let p = select(vec4<f32>(0.0), vec4<f32>(dpre_at(e.x), dpre_at(e.y), dpre_at(e.z), dpre_at(e.w)), live);
            let q = chunks_bqkv(qb + t * 3u * c4, jc);
            a0 += p.x * q;
            a1 += p.y * q;
            a2 += p.z * q;
            a3 += p.w * q;
        }
        store_tile(qkv_at(tl.b, tl.h, 1u, tk), ok, j0, a0, a1, a2, a3);
        // dv[t2] = Σ_{t ≥ t2} att[t, t2] · dout[t]
        a0 = mat4x4<f32>();
        a1 = mat4x4<f32>();
        a2 = mat4x4<f32>();
        a3 = mat4x4<f32>();
        for (var t = tl.t0; t < d.t; t++) {
            let e = vec4<u32>(tl.a_head + t * d.t) + tk;
            let live = tk <= vec4<u32>(t);
            let p = select(vec4<f32>(0.0), vec4<f32>(att_at(e.x), att_at(e.y), att_at(e.z), att_at(e.w)), live);
            let dy = chunks_dout(dyb + t * c4, jc);
            a0 += p.x * dy;
            a1 += p.y * dy;
            a2 += p.z * dy;
            a3 += p.w * dy;
        }
        store_tile(qkv_at(tl.b, tl.h, 2u, tk), ok, j0, a0, a1, a2, a3);
    }
}
