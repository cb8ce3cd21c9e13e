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
// Every sum runs in a fixed order (that of the f32 kernels and twins), so results are
// bit-identical run to run. Thread index: gid.x + gid.y * nwg.x * 256 (groups folded over y).

struct Dims { b: u32, t: u32, c: u32, nh: u32, hs: u32, scale: f32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

@group(0) @binding(1) var<storage, read_write> outw: array<u32>;  // out [B,T,C] or dqkv [B,T,3C]
@group(0) @binding(2) var<storage, read_write> rows: array<u32>;  // att (forward) or scratch (backward)
@group(0) @binding(3) var<storage, read> qkv_f: array<u32>;       // forward: qkv
@group(0) @binding(3) var<storage, read> dout: array<u32>;        // backward: dout [B,T,C]
@group(0) @binding(4) var<storage, read> qkv_b: array<u32>;       // backward: qkv
@group(0) @binding(5) var<storage, read> att: array<u32>;         // backward: att

// ---- the bit rules of bf16.wgsl ----
// f32 bits -> bf16 bits (low 16 bits): round to nearest even, NaN kept quiet.
fn narrow(x: u32) -> u32 {
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (x >> 16u) | 0x0040u;
    }
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}

// bf16 bits (low 16 bits of h) -> f32 bits; a NaN gets its quiet bit.
fn widen(h: u32) -> u32 {
    let x = (h & 0xffffu) << 16u;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return x | 0x00400000u;
    }
    return x;
}

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
    var sum = 0.0;
    for (var t2 = 0u; t2 <= r; t2++) {
        let e = exp(slot_get(s, t2) - m);
        slot_put(s, t2, e);
        sum += e;
    }
    for (var t2 = 0u; t2 <= r; t2++) {
        slot_put(s, t2, slot_get(s, t2) / sum);
    }
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
    for (var w = 0u; w < d.t / 2u; w++) {
        var p0 = 0.0;
        var p1 = 0.0;
        if (2u * w <= r) { p0 = slot_get(s, 2u * w); }
        if (2u * w + 1u <= r) { p1 = slot_get(s, 2u * w + 1u); }
        rows[s.a + w] = pack2(p0, p1);
    }
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
