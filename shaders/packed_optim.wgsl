// Gradient norm and AdamW for bf16 mixed precision: the gradients are packed bf16 (two per u32
// word, element 2i in the low half of word i), the master weights and Adam moments are f32, and
// the step writes the updated master weights both in f32 and rounded to packed bf16 parameters.
//
//   norm_partials_bf16 (scratch | grads words)   partial p sums the squares of one contiguous
//                                                chunk of the words (both halves) → scratch[p]
//   norm_final_bf16    (out, scratch)            one workgroup sums the partials in a fixed tree
//   adamw_bf16 (params words, master, m, v | grads words, hp, norm_sq)   thread per word
//
// Gradients are bound read_write only so that they may share one buffer with the views the same
// dispatch writes. Every storage buffer is array<u32> (f32 ones read through bitcast), so no float operation
// touches a value on its way in or out. Widening and narrowing follow shaders/bf16_bits.wgsl (the
// `half` crate's rules): round to nearest even, NaN kept quiet. The partition depends only on
// the length, so the norm repeats bit for bit.

struct Dims { n: u32, words: u32, parts: u32, decay_end: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const WG: u32 = 256u;

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.
fn widen_f(h: u32) -> f32 { return bitcast<f32>(widen(h)); }

// ---- grad norm over packed words (an odd n leaves the last high half 0: it adds nothing) ----
@group(0) @binding(1) var<storage, read_write> n_scratch: array<u32>;
@group(0) @binding(2) var<storage, read_write> n_grads: array<u32>;

@compute @workgroup_size(256)
fn norm_partials_bf16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let p = gid.x + gid.y * nwg.x * WG;
    if (p >= d.parts) { return; }
    let k = (d.words + d.parts - 1u) / d.parts;
    var s = vec2<f32>(0.0);
    for (var i = p * k; i < min(d.words, p * k + k); i++) {
        let w = n_grads[i];
        let x = vec2<f32>(widen_f(w), widen_f(w >> 16u));
        s = fma(x, x, s);
    }
    n_scratch[p] = bitcast<u32>(s.x + s.y);
}

@group(0) @binding(1) var<storage, read_write> f_out: array<u32>;
@group(0) @binding(2) var<storage, read> f_scratch: array<u32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn norm_final_bf16(@builtin(local_invocation_index) l: u32) {
    var s = 0.0;
    for (var p = l; p < d.parts; p += WG) { s += bitcast<f32>(f_scratch[p]); }
    red[l] = s;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w = w >> 1u) {
        if (l < w) { red[l] = red[l] + red[l + w]; }
        workgroupBarrier();
    }
    if (l == 0u) { f_out[0] = bitcast<u32>(red[0]); }
}

// ---- adamw: hyper-parameters as in shaders/optim.wgsl (cpu::AdamW) ----
struct Hyper { lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, t: u32, clip: f32, _pad: u32 }

@group(0) @binding(1) var<storage, read_write> a_params: array<u32>;
@group(0) @binding(2) var<storage, read_write> a_master: array<u32>;
@group(0) @binding(3) var<storage, read_write> a_m: array<u32>;
@group(0) @binding(4) var<storage, read_write> a_v: array<u32>;
@group(0) @binding(5) var<storage, read_write> a_grads: array<u32>;
@group(0) @binding(6) var<storage, read> hp: Hyper;
@group(0) @binding(7) var<storage, read> norm_sq: array<u32>;

// a^b by square-and-multiply: the same f32 steps as Rust's f32::powi.
fn powi(a0: f32, b0: u32) -> f32 {
    var a = a0;
    var b = b0;
    var r = 1.0;
    loop {
        if ((b & 1u) != 0u) { r *= a; }
        b = b >> 1u;
        if (b == 0u) { break; }
        a *= a;
    }
    return r;
}

// One element: the f32 steps of cpu::adamw; returns the new master weight's bits.
fn update(i: u32, g0: f32, scale: f32, bc1: f32, bc2: f32, h: Hyper) -> u32 {
    let g = g0 * scale;
    let m = h.beta1 * bitcast<f32>(a_m[i]) + (1.0 - h.beta1) * g;
    let v = h.beta2 * bitcast<f32>(a_v[i]) + (1.0 - h.beta2) * g * g;
    a_m[i] = bitcast<u32>(m);
    a_v[i] = bitcast<u32>(v);
    let mhat = m / bc1;
    let vhat = v / bc2;
    let wd = select(0.0, h.weight_decay, i < d.decay_end);
    let p = bitcast<f32>(a_master[i]);
    let q = bitcast<u32>(p - h.lr * (mhat / (sqrt(vhat) + h.eps) + wd * p));
    a_master[i] = q;
    return q;
}

@compute @workgroup_size(256)
fn adamw_bf16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * WG;
    if (w >= d.words) { return; }
    let h = hp;
    let norm = sqrt(bitcast<f32>(norm_sq[0]));
    let scale = select(1.0, h.clip / norm, h.clip > 0.0 && norm > h.clip);
    let bc1 = 1.0 - powi(h.beta1, h.t);
    let bc2 = 1.0 - powi(h.beta2, h.t);
    let gw = a_grads[w];
    let lo = narrow(update(2u * w, widen_f(gw), scale, bc1, bc2, h));
    var hi = 0u;
    if (2u * w + 1u < d.n) {
        hi = narrow(update(2u * w + 1u, widen_f(gw >> 16u), scale, bc1, bc2, h));
    }
    a_params[w] = lo | (hi << 16u);
}
