// Causal multi-head self-attention on packed bf16, forward and backward: the packed variant of
// attention.wgsl. Twins: cpu::packed::attention::attention_{forward,backward}_bf16, which are the
// f32 twins run on the unpacked values.
//
// Every buffer is array<u32>. qkv [B,T,3C] = q | k | v per token, out/dout [B,T,C], att
// [B,NH,T,T] (softmax probabilities, zeros above the diagonal) hold bf16 pairs (element 2i in
// the low half of word i). Head h owns channels h*hs..(h+1)*hs of each part (hs = C/NH). hs and T
// are even, so every head slice and every att row starts on a word boundary and each invocation
// writes whole words. All arithmetic is f32; bf16 is only the storage. f32 intermediates are kept
// as f32 bits in words of the buffers the f32 kernel uses for them (att, scratch):
//
//   forward        one thread per row pair (b,h,t), t < T/2: the long row L = T-1-t, then the
//                  short row S = t. The pair owns 2·(T/2) = T words, room for L's L+1 = T-t f32
//                  values (its own row's words first, then S's); S's t+1 <= T/2 values fit in its
//                  own row. Per row: scores → max → exp → normalise (f32, in place), out = Σ p·v
//                  from the f32 p, then the row is packed in place to bf16: word w is made from
//                  f32 slots 2w, 2w+1 (>= w) in ascending w, so no slot is overwritten unread.
//   backward_rows  one thread per row (b,h,t): datt = dy·v, dot = Σ att·datt,
//                  dpre = att⊙(datt − dot)·scale (f32). The strictly lower entries go to scratch
//                  as f32, triangular: dpre[t,t2<t] at word t(t−1)/2 + t2 of the head's T·T/2
//                  words (T(T−1)/2 of them used); the diagonal dpre[t,t] is parked as f32 bits in
//                  the first word of dk[t] (head h), which only the cols thread of that token
//                  reads, before it writes dk there. dq[t] = Σ_t2 dpre[t,t2]·k[t2].
//   backward_cols  one thread per column (b,h,t2): dk[t2] = Σ_{t>=t2} dpre[t,t2]·q[t],
//                  dv[t2] = Σ_{t>=t2} att[t,t2]·dy[t]   (a gather: no scattered +=).
//
// Every sum runs in a fixed order (that of the f32 kernels), so results are bit-identical run to
// run. Each kernel comes twice, as in attention.wgsl: the plain one above (any even hs, a row or
// row pair a thread, 256 a group) and a register-tiled `_vec4` one (hs % 4 == 0, 64 a group),
// below. Thread index: gid.x + gid.y * nwg.x * WG (groups folded over y), bounds-checked.

struct Dims { b: u32, t: u32, c: u32, nh: u32, hs: u32, scale: f32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

@group(0) @binding(1) var<storage, read_write> outw: array<u32>;  // out [B,T,C] or dqkv [B,T,3C]
@group(0) @binding(2) var<storage, read_write> rows: array<u32>;  // att (forward) or scratch (backward)
@group(0) @binding(3) var<storage, read> qkv_f: array<u32>;       // forward: qkv
@group(0) @binding(3) var<storage, read> dout: array<u32>;        // backward: dout [B,T,C]
@group(0) @binding(4) var<storage, read> qkv_b: array<u32>;       // backward: qkv
@group(0) @binding(5) var<storage, read> att: array<u32>;         // backward: att

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.

// The two elements of a word, and a word from two elements.
fn lo(w: u32) -> f32 {
    return bitcast<f32>(widen(w));
}
fn hi(w: u32) -> f32 {
    return bitcast<f32>(widen(w >> 16u));
}
fn pack2(a: f32, b: f32) -> u32 {
    return narrow(bitcast<u32>(a)) | (narrow(bitcast<u32>(b)) << 16u);
}

// Where the f32 value of entry k of a row lives while the forward computes it: word a + k for
// k < T/2, word b + k − T/2 past that (a and b are att row offsets in words).
struct Slots { a: u32, b: u32 }

fn slot(s: Slots, k: u32) -> u32 {
    let half = d.t / 2u;
    if (k < half) {
        return s.a + k;
    }
    return s.b + k - half;
}
fn slot_get(s: Slots, k: u32) -> f32 {
    return bitcast<f32>(rows[slot(s, k)]);
}
fn slot_put(s: Slots, k: u32, x: f32) {
    rows[slot(s, k)] = bitcast<u32>(x);
}

// Softmax of row r's scores, already in slots s (max m): exp, Σ, normalise, in place, f32.
fn softmax_slots(s: Slots, r: u32, m: f32) {
    var sum = 0.0;
    for (var t2 = 0u; t2 <= r; t2++) {
        let e = exp(slot_get(s, t2) - m);
        slot_put(s, t2, e);
        sum += e;
    }
    for (var t2 = 0u; t2 <= r; t2++) {
        slot_put(s, t2, slot_get(s, t2) / sum);
    }
}

// Row r's f32 probabilities in slots s → its bf16 att row (words s.a ..), zeros above the
// diagonal. Word w reads slots 2w, 2w+1 (>= w) before it is written, in ascending w.
fn pack_row(s: Slots, r: u32) {
    for (var w = 0u; w < d.t / 2u; w++) {
        var p0 = 0.0;
        var p1 = 0.0;
        if (2u * w <= r) { p0 = slot_get(s, 2u * w); }
        if (2u * w + 1u <= r) { p1 = slot_get(s, 2u * w + 1u); }
        rows[s.a + w] = pack2(p0, p1);
    }
}

// Query row r of head (b, h): probabilities in f32 in slots s, out[r] from them, then the row
// packed to bf16 into its own words (att row r starts at word s.a).
fn forward_row(b: u32, h: u32, r: u32, s: Slots) {
    let cw = d.c / 2u;           // words per token in out
    let c3w = 3u * cw;           // words per token in qkv
    let hw = d.hs / 2u;          // words per head slice
    let q0 = (b * d.t + r) * c3w + h * hw;
    let k_base = b * d.t * c3w + cw + h * hw;   // k of token t2 at k_base + t2*c3w
    let v_base = k_base + cw;
    var m = -3.0e38;
    for (var t2 = 0u; t2 <= r; t2++) {
        let k0 = k_base + t2 * c3w;
        var x = 0.0;
        for (var j = 0u; j < hw; j++) {
            let qw = qkv_f[q0 + j];
            let kw = qkv_f[k0 + j];
            x = fma(lo(qw), lo(kw), x);
            x = fma(hi(qw), hi(kw), x);
        }
        x *= d.scale;
        slot_put(s, t2, x);
        m = max(m, x);
    }
    softmax_slots(s, r, m);
    let o0 = (b * d.t + r) * cw + h * hw;
    for (var j = 0u; j < hw; j++) {
        var a0 = 0.0;
        var a1 = 0.0;
        for (var t2 = 0u; t2 <= r; t2++) {
            let p = slot_get(s, t2);
            let vw = qkv_f[v_base + t2 * c3w + j];
            a0 = fma(p, lo(vw), a0);
            a1 = fma(p, hi(vw), a1);
        }
        outw[o0 + j] = pack2(a0, a1);
    }
    pack_row(s, r);
}

// ---- attention_forward(out, att, qkv) ----
@compute @workgroup_size(256)
fn attention_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let half = d.t / 2u;
    if (i >= d.b * d.nh * half) { return; }
    let bh = i / half;
    let t = i % half;
    let a_s = (bh * d.t + t) * half;               // short row t
    let a_l = (bh * d.t + d.t - 1u - t) * half;    // long row T-1-t
    forward_row(bh / d.nh, bh % d.nh, d.t - 1u - t, Slots(a_l, a_s));
    forward_row(bh / d.nh, bh % d.nh, t, Slots(a_s, a_s + half));
}

// Element e of att [B,NH,T,T], widened.
fn att_at(e: u32) -> f32 {
    return bitcast<f32>(widen(att[e >> 1u] >> (16u * (e & 1u))));
}

// Word of scratch holding f32 dpre[t, t2] (t2 < t) of head bh: the strictly lower triangle.
fn tri(bh: u32, t: u32, t2: u32) -> u32 {
    return bh * d.t * (d.t / 2u) + t * (t - 1u) / 2u + t2;
}

// ---- attention_backward_rows(dqkv, scratch, dout, qkv, att): dpre rows and dq ----
@compute @workgroup_size(256)
fn attention_backward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.b * d.nh * d.t) { return; }
    let bh = i / d.t;
    let b = bh / d.nh;
    let h = bh % d.nh;
    let t = i % d.t;
    let cw = d.c / 2u;
    let c3w = 3u * cw;
    let hw = d.hs / 2u;
    let dy0 = (b * d.t + t) * cw + h * hw;
    let q0 = (b * d.t + t) * c3w + h * hw;
    let k_base = b * d.t * c3w + cw + h * hw;
    let v_base = k_base + cw;
    let a0 = i * d.t;   // att row [b,h,t], elements
    // datt[t2] = dy·v[t2] (strict lower part to scratch, the diagonal in a register); Σ att·datt
    var dot = 0.0;
    var diag = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) {
        let v0 = v_base + t2 * c3w;
        var da = 0.0;
        for (var j = 0u; j < hw; j++) {
            let yw = dout[dy0 + j];
            let vw = qkv_b[v0 + j];
            da = fma(lo(yw), lo(vw), da);
            da = fma(hi(yw), hi(vw), da);
        }
        if (t2 < t) {
            rows[tri(bh, t, t2)] = bitcast<u32>(da);
        } else {
            diag = da;
        }
        dot = fma(att_at(a0 + t2), da, dot);
    }
    // dpre = att ⊙ (datt − dot) · scale, in place
    for (var t2 = 0u; t2 < t; t2++) {
        let e = tri(bh, t, t2);
        rows[e] = bitcast<u32>(att_at(a0 + t2) * (bitcast<f32>(rows[e]) - dot) * d.scale);
    }
    diag = att_at(a0 + t) * (diag - dot) * d.scale;
    outw[q0 + cw] = bitcast<u32>(diag);   // parked in dk[t]'s first word for the cols pass
    // dq[t] = Σ_t2 dpre[t,t2] · k[t2]
    for (var j = 0u; j < hw; j++) {
        var g0 = 0.0;
        var g1 = 0.0;
        for (var t2 = 0u; t2 < t; t2++) {
            let p = bitcast<f32>(rows[tri(bh, t, t2)]);
            let kw = qkv_b[k_base + t2 * c3w + j];
            g0 = fma(p, lo(kw), g0);
            g1 = fma(p, hi(kw), g1);
        }
        let kw = qkv_b[k_base + t * c3w + j];
        g0 = fma(diag, lo(kw), g0);
        g1 = fma(diag, hi(kw), g1);
        outw[q0 + j] = pack2(g0, g1);
    }
}

// ---- attention_backward_cols(dqkv, scratch, dout, qkv, att): dk and dv ----
@compute @workgroup_size(256)
fn attention_backward_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.b * d.nh * d.t) { return; }
    let bh = i / d.t;
    let b = bh / d.nh;
    let h = bh % d.nh;
    let t2 = i % d.t;   // this thread's key/value token
    let cw = d.c / 2u;
    let c3w = 3u * cw;
    let hw = d.hs / 2u;
    let head0 = bh * d.t * d.t;            // att element [t,t2] at head0 + t*T + t2
    let q_base = b * d.t * c3w + h * hw;   // q of token t at q_base + t*c3w
    let dy_base = b * d.t * cw + h * hw;   // dy of token t at dy_base + t*cw
    let k0 = (b * d.t + t2) * c3w + cw + h * hw;
    let diag = bitcast<f32>(outw[k0]);     // dpre[t2,t2], parked by the rows pass
    for (var j = 0u; j < hw; j++) {
        var dk0 = 0.0;
        var dk1 = 0.0;
        var dv0 = 0.0;
        var dv1 = 0.0;
        for (var t = t2; t < d.t; t++) {
            var p = diag;
            if (t > t2) {
                p = bitcast<f32>(rows[tri(bh, t, t2)]);
            }
            let qw = qkv_b[q_base + t * c3w + j];
            dk0 = fma(p, lo(qw), dk0);
            dk1 = fma(p, hi(qw), dk1);
            let a = att_at(head0 + t * d.t + t2);
            let yw = dout[dy_base + t * cw + j];
            dv0 = fma(a, lo(yw), dv0);
            dv1 = fma(a, hi(yw), dv1);
        }
        outw[k0 + j] = pack2(dk0, dk1);
        outw[k0 + cw + j] = pack2(dv0, dv1);
    }
}


// ======== register-tiled path (hs % 4 == 0); offsets count 4-channel chunks (vec2<u32>) ========
// As attention.wgsl's vec4 path, with each 4-channel chunk loaded as two words and widened:
//
//   forward_vec4          a thread owns 4 row pairs p0..p0+3: first their long rows T-1-p (a
//                         4-row tile, slots as in the scalar forward), then their short rows p
//   backward_rows_vec4    a thread owns rows t0..t0+3;   backward_cols_vec4: columns t0..t0+3
//
//   dot tile   s[u][r] = Σ_j q[row r][j]·k[k0+u][j]       8 chunk loads per 64 FMAs
//   sum tile   a_r[jj] = Σ_t2 p[row r][t2]·v[t2][j0+jj]   4 scalar + 4 chunk loads per 64 FMAs
//
// Rows, pairs and tokens past the end are clamped to the thread's own last one for loading and
// never stored, so no thread reads what another writes in the same pass. Widening here is the
// plain shift (bits << 16): it differs from widen() only in a NaN's quiet bit, which arithmetic
// does not see.

@group(0) @binding(1) var<storage, read_write> out_v: array<vec2<u32>>;   // out or dqkv
@group(0) @binding(3) var<storage, read> qkv_v: array<vec2<u32>>;         // forward: qkv
@group(0) @binding(3) var<storage, read> dout_v: array<vec2<u32>>;        // backward: dout
@group(0) @binding(4) var<storage, read> bqkv_v: array<vec2<u32>>;        // backward: qkv

const IOTA = vec4<u32>(0u, 1u, 2u, 3u);

// A 4-channel chunk: two words → 4 f32, and back (rounded to nearest even).
fn dec(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}
fn enc(x: vec4<f32>) -> vec2<u32> {
    return vec2<u32>(pack2(x.x, x.y), pack2(x.z, x.w));
}

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

// Chunk offsets of part (0 q, 1 k, 2 v) of head h for tokens tk in qkv [B,T,3C].
fn qkv_at(b: u32, h: u32, part: u32, tk: vec4<u32>) -> vec4<u32> {
    let c4 = d.c / 4u;
    return (vec4<u32>(b * d.t) + tk) * (3u * c4) + vec4<u32>(part * c4 + h * (d.hs / 4u));
}

// Chunk offsets of head h for tokens tk in a [B,T,C] tensor (out, dout).
fn btc_at(b: u32, h: u32, tk: vec4<u32>) -> vec4<u32> {
    return (vec4<u32>(b * d.t) + tk) * (d.c / 4u) + vec4<u32>(h * (d.hs / 4u));
}

// Channel chunk j of 4 tokens (columns = tokens).
fn tok_qkv(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(dec(qkv_v[o.x + j]), dec(qkv_v[o.y + j]), dec(qkv_v[o.z + j]), dec(qkv_v[o.w + j]));
}
fn tok_bqkv(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(dec(bqkv_v[o.x + j]), dec(bqkv_v[o.y + j]), dec(bqkv_v[o.z + j]), dec(bqkv_v[o.w + j]));
}
fn tok_dout(o: vec4<u32>, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(dec(dout_v[o.x + j]), dec(dout_v[o.y + j]), dec(dout_v[o.z + j]), dec(dout_v[o.w + j]));
}

// Channel chunks jc of one token at o (columns = chunks).
fn chunks_qkv(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(dec(qkv_v[o + jc.x]), dec(qkv_v[o + jc.y]), dec(qkv_v[o + jc.z]), dec(qkv_v[o + jc.w]));
}
fn chunks_bqkv(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(dec(bqkv_v[o + jc.x]), dec(bqkv_v[o + jc.y]), dec(bqkv_v[o + jc.z]), dec(bqkv_v[o + jc.w]));
}
fn chunks_dout(o: u32, jc: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(dec(dout_v[o + jc.x]), dec(dout_v[o + jc.y]), dec(dout_v[o + jc.z]), dec(dout_v[o + jc.w]));
}

// Chunks j0..j0+3 (clamped) and the store of one token's sum tile, chunks past hs/4 dropped.
fn chunk_ids(j0: u32) -> vec4<u32> {
    return min(vec4<u32>(j0) + IOTA, vec4<u32>(d.hs / 4u - 1u));
}
fn store_chunks(o: u32, j0: u32, a: mat4x4<f32>) {
    let hs4 = d.hs / 4u;
    out_v[o + j0] = enc(a[0]);
    if (j0 + 1u < hs4) { out_v[o + j0 + 1u] = enc(a[1]); }
    if (j0 + 2u < hs4) { out_v[o + j0 + 2u] = enc(a[2]); }
    if (j0 + 3u < hs4) { out_v[o + j0 + 3u] = enc(a[3]); }
}
fn store_tile(o: vec4<u32>, ok: vec4<bool>, j0: u32, a0: mat4x4<f32>, a1: mat4x4<f32>, a2: mat4x4<f32>, a3: mat4x4<f32>) {
    if (ok.x) { store_chunks(o.x, j0, a0); }
    if (ok.y) { store_chunks(o.y, j0, a1); }
    if (ok.z) { store_chunks(o.z, j0, a2); }
    if (ok.w) { store_chunks(o.w, j0, a3); }
}

// Slots of 4 rows (row r as Slots(a[r], b[r])).
struct Slots4 { a: vec4<u32>, b: vec4<u32> }

fn row_slots(s: Slots4, r: u32) -> Slots {
    return Slots(s.a[r], s.b[r]);
}

// Score column t2 of the 4 rows (tokens tk) into their slots; returns the updated row maxima.
fn put_scores(s: Slots4, tk: vec4<u32>, ok: vec4<bool>, t2: u32, x: vec4<f32>, m: vec4<f32>) -> vec4<f32> {
    let keep = ok & (vec4<u32>(t2) <= tk);
    for (var r = 0u; r < 4u; r++) {
        if (keep[r]) { slot_put(row_slots(s, r), t2, x[r]); }
    }
    return select(m, max(m, x), keep);
}

// Probabilities [row r, t2] of the 4 rows, zero above the diagonal (the slot index is clamped to
// the row's own entries).
fn probs(s: Slots4, tk: vec4<u32>, t2: u32) -> vec4<f32> {
    let c = min(vec4<u32>(t2), tk);
    let p = vec4<f32>(slot_get(row_slots(s, 0u), c.x), slot_get(row_slots(s, 1u), c.y),
                      slot_get(row_slots(s, 2u), c.z), slot_get(row_slots(s, 3u), c.w));
    return select(vec4<f32>(0.0), p, vec4<u32>(t2) <= tk);
}

// 4 query rows tk (last = the largest) of head (b, h), slots s: scores, softmax, out, pack.
fn forward_tile(b: u32, h: u32, tk: vec4<u32>, ok: vec4<bool>, s: Slots4, last: u32) {
    let hs4 = d.hs / 4u;
    let qo = qkv_at(b, h, 0u, tk);
    var m = vec4<f32>(-3.0e38);
    for (var k0 = 0u; k0 <= last; k0 += 4u) {
        let ko = qkv_at(b, h, 1u, toks(k0));
        var x = mat4x4<f32>();
        for (var j = 0u; j < hs4; j++) {
            x += transpose(tok_qkv(qo, j)) * tok_qkv(ko, j);
        }
        x *= d.scale;
        m = put_scores(s, tk, ok, k0, x[0], m);
        m = put_scores(s, tk, ok, k0 + 1u, x[1], m);
        m = put_scores(s, tk, ok, k0 + 2u, x[2], m);
        m = put_scores(s, tk, ok, k0 + 3u, x[3], m);
    }
    for (var r = 0u; r < 4u; r++) {
        if (ok[r]) { softmax_slots(row_slots(s, r), tk[r], m[r]); }
    }
    // out = p · v, from the f32 probabilities
    let c34 = 3u * (d.c / 4u);
    let vb = qkv_at(b, h, 2u, vec4<u32>(0u)).x;
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jc = chunk_ids(j0);
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t2 = 0u; t2 <= last; t2++) {
            let v = chunks_qkv(vb + t2 * c34, jc);
            let p = probs(s, tk, t2);
            a0 += p.x * v;
            a1 += p.y * v;
            a2 += p.z * v;
            a3 += p.w * v;
        }
        store_tile(btc_at(b, h, tk), ok, j0, a0, a1, a2, a3);
    }
    for (var r = 0u; r < 4u; r++) {
        if (ok[r]) { pack_row(row_slots(s, r), tk[r]); }
    }
}

// ---- attention_forward_vec4(out, att, qkv) ----
@compute @workgroup_size(64)
fn attention_forward_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    let half = d.t / 2u;
    let nq = (half + 3u) / 4u;
    if (i >= d.b * d.nh * nq) { return; }
    let bh = i / nq;
    let p0 = (i % nq) * 4u;
    let pr = min(vec4<u32>(p0) + IOTA, vec4<u32>(half - 1u));   // pairs (short rows), clamped
    let ok = vec4<u32>(p0) + IOTA < vec4<u32>(half);
    let lr = vec4<u32>(d.t - 1u) - pr;                            // their long rows
    let a_s = (vec4<u32>(bh * d.t) + pr) * half;
    let a_l = (vec4<u32>(bh * d.t) + lr) * half;
    forward_tile(bh / d.nh, bh % d.nh, lr, ok, Slots4(a_l, a_s), lr.x);
    forward_tile(bh / d.nh, bh % d.nh, pr, ok, Slots4(a_s, a_s + vec4<u32>(half)), pr.w);
}

// dpre[row tk_r, t2] of 4 rows: the triangle in scratch below the diagonal, `diag` on it, 0 above.
fn dpre_rows(bh: u32, tk: vec4<u32>, t2: u32, diag: vec4<f32>) -> vec4<f32> {
    var p = vec4<f32>(0.0);
    for (var r = 0u; r < 4u; r++) {
        if (t2 < tk[r]) {
            p[r] = bitcast<f32>(rows[tri(bh, tk[r], t2)]);
        } else if (t2 == tk[r]) {
            p[r] = diag[r];
        }
    }
    return p;
}

// ---- attention_backward_rows_vec4(dqkv, scratch, dout, qkv, att): dpre rows and dq ----
@compute @workgroup_size(64)
fn attention_backward_rows_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let bh = tl.b * d.nh + tl.h;
    let tk = toks(tl.t0);
    let ok = real(tl.t0);
    let ar = vec4<u32>(tl.a_head) + tk * d.t;   // att rows, elements
    let hs4 = d.hs / 4u;
    let dyo = btc_at(tl.b, tl.h, tk);
    // datt = dy · v: below the diagonal into scratch, on it into diag; Σ att·datt
    var dot = vec4<f32>(0.0);
    var diag = vec4<f32>(0.0);
    for (var k0 = 0u; k0 <= tl.last; k0 += 4u) {
        let vo = qkv_at(tl.b, tl.h, 2u, toks(k0));
        var x = mat4x4<f32>();
        for (var j = 0u; j < hs4; j++) {
            x += transpose(tok_dout(dyo, j)) * tok_bqkv(vo, j);
        }
        for (var u = 0u; u < 4u; u++) {
            let t2 = k0 + u;
            let da = x[u];
            let keep = ok & (vec4<u32>(t2) <= tk);
            for (var r = 0u; r < 4u; r++) {
                if (keep[r] && t2 < tk[r]) { rows[tri(bh, tk[r], t2)] = bitcast<u32>(da[r]); }
            }
            diag = select(diag, da, keep & (vec4<u32>(t2) == tk));
            let c = min(t2, d.t - 1u);
            let a = vec4<f32>(att_at(ar.x + c), att_at(ar.y + c), att_at(ar.z + c), att_at(ar.w + c));
            dot = select(dot, fma(a, da, dot), keep);
        }
    }
    // dpre = att ⊙ (datt − dot) · scale, in place; the diagonal parked in dk's first word
    for (var r = 0u; r < 4u; r++) {
        if (ok[r]) {
            for (var t2 = 0u; t2 < tk[r]; t2++) {
                let e = tri(bh, tk[r], t2);
                rows[e] = bitcast<u32>(att_at(ar[r] + t2) * (bitcast<f32>(rows[e]) - dot[r]) * d.scale);
            }
        }
    }
    let ad = vec4<f32>(att_at(ar.x + tk.x), att_at(ar.y + tk.y), att_at(ar.z + tk.z), att_at(ar.w + tk.w));
    diag = ad * (diag - dot) * d.scale;
    let kd = qkv_at(tl.b, tl.h, 1u, tk);
    for (var r = 0u; r < 4u; r++) {
        if (ok[r]) { out_v[kd[r]].x = bitcast<u32>(diag[r]); }
    }
    // dq = dpre · k
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
            let p = dpre_rows(bh, tk, t2, diag);
            a0 += p.x * k;
            a1 += p.y * k;
            a2 += p.z * k;
            a3 += p.w * k;
        }
        store_tile(qkv_at(tl.b, tl.h, 0u, tk), ok, j0, a0, a1, a2, a3);
    }
}

// dpre[t, column tk_r] of 4 columns: the triangle in scratch below the diagonal, `diag` on it,
// 0 above.
fn dpre_cols(bh: u32, t: u32, tk: vec4<u32>, diag: vec4<f32>) -> vec4<f32> {
    var p = vec4<f32>(0.0);
    for (var r = 0u; r < 4u; r++) {
        if (t > tk[r]) {
            p[r] = bitcast<f32>(rows[tri(bh, t, tk[r])]);
        } else if (t == tk[r]) {
            p[r] = diag[r];
        }
    }
    return p;
}

// ---- attention_backward_cols_vec4(dqkv, scratch, dout, qkv, att): dk and dv ----
@compute @workgroup_size(64)
fn attention_backward_cols_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= n_tiles()) { return; }
    let tl = tile_of(i);
    let bh = tl.b * d.nh + tl.h;
    let tk = toks(tl.t0);   // this thread's key/value tokens t2
    let ok = real(tl.t0);
    let hs4 = d.hs / 4u;
    let c4 = d.c / 4u;
    let qb = qkv_at(tl.b, tl.h, 0u, vec4<u32>(0u)).x;
    let dyb = btc_at(tl.b, tl.h, vec4<u32>(0u)).x;
    let kd = qkv_at(tl.b, tl.h, 1u, tk);
    let vd = qkv_at(tl.b, tl.h, 2u, tk);
    // dpre[t2,t2], parked by the rows pass (read before dk is written over it)
    let diag = vec4<f32>(bitcast<f32>(out_v[kd.x].x), bitcast<f32>(out_v[kd.y].x),
                         bitcast<f32>(out_v[kd.z].x), bitcast<f32>(out_v[kd.w].x));
    for (var j0 = 0u; j0 < hs4; j0 += 4u) {
        let jc = chunk_ids(j0);
        // dk[t2] = Σ_{t ≥ t2} dpre[t, t2] · q[t]
        var a0 = mat4x4<f32>();
        var a1 = mat4x4<f32>();
        var a2 = mat4x4<f32>();
        var a3 = mat4x4<f32>();
        for (var t = tl.t0; t < d.t; t++) {
            let p = dpre_cols(bh, t, tk, diag);
            let q = chunks_bqkv(qb + t * 3u * c4, jc);
            a0 += p.x * q;
            a1 += p.y * q;
            a2 += p.z * q;
            a3 += p.w * q;
        }
        store_tile(kd, ok, j0, a0, a1, a2, a3);
        // dv[t2] = Σ_{t ≥ t2} att[t, t2] · dout[t]
        a0 = mat4x4<f32>();
        a1 = mat4x4<f32>();
        a2 = mat4x4<f32>();
        a3 = mat4x4<f32>();
        for (var t = tl.t0; t < d.t; t++) {
            let e = vec4<u32>(tl.a_head + t * d.t) + tk;
            let a = vec4<f32>(att_at(e.x), att_at(e.y), att_at(e.z), att_at(e.w));
            let p = select(vec4<f32>(0.0), a, tk <= vec4<u32>(t));
            let dy = chunks_dout(dyb + t * c4, jc);
            a0 += p.x * dy;
            a1 += p.y * dy;
            a2 += p.z * dy;
            a3 += p.w * dy;
        }
        store_tile(vd, ok, j0, a0, a1, a2, a3);
    }
}
