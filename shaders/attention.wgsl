// Causal multi-head self-attention, forward and backward. Twins: cpu::attention_{forward,backward}.
//
// qkv [B,T,3C] = q | k | v per token; head h owns channels h*hs..(h+1)*hs of each (hs = C/NH).
// att, scratch [B,NH,T,T]: one row per query token t, entries t2 <= t used (causal).
//
//   forward         one thread per row (b,h,t): scores → max → exp → normalise → Σ att·v
//   backward_rows   one thread per row (b,h,t): datt = dy·v, dpre = att⊙(datt − Σatt·datt)·scale
//                   into scratch, dq[t] = Σ_t2 dpre[t,t2]·k[t2]
//   backward_cols   one thread per column (b,h,t2): dk[t2] = Σ_{t≥t2} dpre[t,t2]·q[t],
//                   dv[t2] = Σ_{t≥t2} att[t,t2]·dy[t]   (a gather: no scattered +=)
//
// Every sum runs in a fixed order, so results are bit-identical run to run. Each kernel comes
// twice: the plain one (one thread per token of a head, 256 a group, scalar loads) handles any
// hs; the `_vec4` one (hs % 4 == 0; one thread per 4 tokens of a head, 64 a group) loads
// q/k/v/dy as vec4 into 4×4 register tiles, since storage loads dominate on software adapters.
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

// ---- scalar bindings (any hs) ----
@group(0) @binding(1) var<storage, read_write> out_s: array<f32>;   // out [B,T,C] or dqkv [B,T,3C]
@group(0) @binding(2) var<storage, read_write> rows: array<f32>;    // att (forward) or scratch (backward)
@group(0) @binding(3) var<storage, read> qkv_s: array<f32>;         // forward: qkv
@group(0) @binding(3) var<storage, read> dout_s: array<f32>;        // backward: dout [B,T,C]
@group(0) @binding(4) var<storage, read> bqkv_s: array<f32>;        // backward: qkv
@group(0) @binding(5) var<storage, read> att: array<f32>;           // backward: att

// ---- vec4 bindings (hs % 4 == 0) ----
@group(0) @binding(1) var<storage, read_write> out_v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> qkv_v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> dout_v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> bqkv_v: array<vec4<f32>>;

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
        dot = fma(att[a0 + t2], rows[a0 + t2], dot);
    }
    return dot;
}

// dpre = att ⊙ (datt − dot) · scale, in place over the datt in rows[a0..=a0+t].
fn dpre_row(a0: u32, t: u32, dot: f32) {
    for (var t2 = 0u; t2 <= t; t2++) {
        rows[a0 + t2] = att[a0 + t2] * (rows[a0 + t2] - dot) * d.scale;
    }
}

// ---- attention_forward(out, att, qkv), any hs ----
@compute @workgroup_size(256)
fn attention_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= n_rows()) { return; }
    let r = row_of(i);
    let c3 = 3u * d.c;
    let q0 = (r.b * d.t + r.t) * c3 + r.h * d.hs;
    let k_base = r.b * d.t * c3 + d.c + r.h * d.hs;   // k of token t2 at k_base + t2*c3
    let v_base = k_base + d.c;
    var m = -3.0e38;
    for (var t2 = 0u; t2 <= r.t; t2++) {
        let k0 = k_base + t2 * c3;
        var s = 0.0;
        for (var j = 0u; j < d.hs; j++) {
            s = fma(qkv_s[q0 + j], qkv_s[k0 + j], s);
        }
        s *= d.scale;
        rows[r.a0 + t2] = s;
        m = max(m, s);
    }
    softmax_row(r.a0, r.t, m);
    let o0 = (r.b * d.t + r.t) * d.c + r.h * d.hs;
    for (var j = 0u; j < d.hs; j++) {
        var acc = 0.0;
        for (var t2 = 0u; t2 <= r.t; t2++) {
            acc = fma(rows[r.a0 + t2], qkv_s[v_base + t2 * c3 + j], acc);
        }
        out_s[o0 + j] = acc;
    }
}

// ---- attention_backward_rows(dqkv, scratch, dout, qkv, att), any hs: dpre rows and dq ----
@compute @workgroup_size(256)
fn attention_backward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= n_rows()) { return; }
    let r = row_of(i);
    let c3 = 3u * d.c;
    let dy0 = (r.b * d.t + r.t) * d.c + r.h * d.hs;
    let k_base = r.b * d.t * c3 + d.c + r.h * d.hs;
    let v_base = k_base + d.c;
    for (var t2 = 0u; t2 <= r.t; t2++) {
        let v0 = v_base + t2 * c3;
        var da = 0.0;
        for (var j = 0u; j < d.hs; j++) {
            da = fma(dout_s[dy0 + j], bqkv_s[v0 + j], da);
        }
        rows[r.a0 + t2] = da;
    }
    dpre_row(r.a0, r.t, att_dot_row(r.a0, r.t));
    let q0 = (r.b * d.t + r.t) * c3 + r.h * d.hs;
    for (var j = 0u; j < d.hs; j++) {
        var acc = 0.0;
        for (var t2 = 0u; t2 <= r.t; t2++) {
            acc = fma(rows[r.a0 + t2], bqkv_s[k_base + t2 * c3 + j], acc);
        }
        out_s[q0 + j] = acc;
    }
}

// ---- attention_backward_cols(dqkv, scratch, dout, qkv, att), any hs: dk and dv ----
@compute @workgroup_size(256)
fn attention_backward_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= n_rows()) { return; }
    let r = row_of(i);   // r.t is the key/value token t2; rows of this head start at (i - r.t)*T
    let c3 = 3u * d.c;
    let head0 = (i - r.t) * d.t;               // scratch/att element [t,t2] at head0 + t*T + t2
    let q_base = r.b * d.t * c3 + r.h * d.hs;  // q of token t at q_base + t*c3
    let dy_base = r.b * d.t * d.c + r.h * d.hs;
    let k0 = (r.b * d.t + r.t) * c3 + d.c + r.h * d.hs;
    for (var j = 0u; j < d.hs; j++) {
        var dk = 0.0;
        var dv = 0.0;
        for (var t = r.t; t < d.t; t++) {
            let a = head0 + t * d.t + r.t;
            dk = fma(rows[a], bqkv_s[q_base + t * c3 + j], dk);
            dv = fma(att[a], dout_s[dy_base + t * d.c + j], dv);
        }
        out_s[k0 + j] = dk;
        out_s[k0 + d.c + j] = dv;
    }
}


// ======== register-tiled vec4 path (hs % 4 == 0); offsets count vec4s ========
// A thread owns 4 consecutive tokens t0..t0+3 of one head: query rows in attention_forward_vec4
// and attention_backward_rows_vec4, key/value columns in attention_backward_cols_vec4.
//
//   dot tile   s[u][r] = Σ_j q[t0+r][j]·k[k0+u][j]       8 vec4 loads per 64 FMAs (Qᵀ·K)
//   sum tile   a_r[jj] = Σ_t2 p[t0+r][t2]·v[t2][j0+jj]   4 scalar + 4 vec4 loads per 64 FMAs
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
    return mat4x4<f32>(qkv_v[o.x + j], qkv_v[o.y + j], qkv_v[o.z + j], qkv_v[o.w + j]);
}
fn tok_bqkv(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(bqkv_v[o.x + j], bqkv_v[o.y + j], bqkv_v[o.z + j], bqkv_v[o.w + j]);
}
fn tok_dout(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(dout_v[o.x + j], dout_v[o.y + j], dout_v[o.z + j], dout_v[o.w + j]);
}

// Channel chunks jc of one token at o (columns = chunks).
fn chunks_qkv(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(qkv_v[o + jc.x], qkv_v[o + jc.y], qkv_v[o + jc.z], qkv_v[o + jc.w]);
}
fn chunks_bqkv(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(bqkv_v[o + jc.x], bqkv_v[o + jc.y], bqkv_v[o + jc.z], bqkv_v[o + jc.w]);
}
fn chunks_dout(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(dout_v[o + jc.x], dout_v[o + jc.y], dout_v[o + jc.z], dout_v[o + jc.w]);
}

// Chunks j0..j0+3 (clamped) and the store of one token's sum tile, chunks past hs/4 dropped.
fn chunk_ids(j0: u32) -> vec4<u32> {
    return min(vec4<u32>(j0) + IOTA, vec4<u32>(d.hs / 4u - 1u));
}
fn store_chunks(o: u32, j0: u32, a: mat4x4<f32>) {
    let hs4 = d.hs / 4u;
    out_v[o + j0] = a[0];
    if (j0 + 1u < hs4) { out_v[o + j0 + 1u] = a[1]; }
    if (j0 + 2u < hs4) { out_v[o + j0 + 2u] = a[2]; }
    if (j0 + 3u < hs4) { out_v[o + j0 + 3u] = a[3]; }
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
    let a = vec4<f32>(att[ar.x + c], att[ar.y + c], att[ar.z + c], att[ar.w + c]);
    return select(dot, fma(a, s, dot), keep);
}

// ---- attention_forward_vec4(out, att, qkv) ----
@compute @workgroup_size(64)
fn attention_forward_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;   // att rows
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
    // out = att · v; att is zero above the diagonal, so every row runs to the tile's last token
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

// ---- attention_backward_rows_vec4(dqkv, scratch, dout, qkv, att): dpre rows and dq ----
@compute @workgroup_size(64)
fn attention_backward_rows_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;   // scratch / att rows
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
    // dq = dpre · k; scratch above the diagonal is unwritten, so mask it
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

// ---- attention_backward_cols_vec4(dqkv, scratch, dout, qkv, att): dk and dv ----
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
            let p = select(vec4<f32>(0.0), vec4<f32>(rows[e.x], rows[e.y], rows[e.z], rows[e.w]), live);
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
            let p = select(vec4<f32>(0.0), vec4<f32>(att[e.x], att[e.y], att[e.z], att[e.w]), live);
            let dy = chunks_dout(dyb + t * c4, jc);
            a0 += p.x * dy;
            a1 += p.y * dy;
            a2 += p.z * dy;
            a3 += p.w * dy;
        }
        store_tile(qkv_at(tl.b, tl.h, 2u, tk), ok, j0, a0, a1, a2, a3);
    }
}
