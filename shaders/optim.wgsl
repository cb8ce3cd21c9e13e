// Global gradient norm and AdamW, one body for both precisions behind the storage prelude
// (store_f32.wgsl / store_bf16.wgsl): gradients and parameters are words of the run's
// precision; the master weights and Adam moments are always f32 words. Under f32 the master
// weights are the parameters, bound twice.
//
//   norm_partials (scratch | grads)    partial p sums the squares of one contiguous chunk of
//                                      the leading units → scratch[p]. A unit is four f32
//                                      words or one bf16 word, widened into a vec4 (bf16: the
//                                      two halves, then zeros); partials sum lane-wise.
//   norm_final    (out, scratch | grads)  one workgroup: the elements past the last whole unit
//                                      (f32: n % 4) plus the partials, in a fixed tree → out[0]
//   adamw (params, master, m, v, grads | hp, norm_sq)  thread per parameter word
//
// Contiguous chunks per thread stream through memory (8 sequential streams per SIMD row on the
// software adapter, ~3× faster than a strided partition there). The partition depends only on
// the length, so the norm repeats bit for bit. Gradients are bound read_write only so that they
// may share one buffer with the views written by the same dispatch.

struct Dims { n: u32, parts: u32, decay_end: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const WG: u32 = 256u;
// Words and elements of one norm unit.
const UNIT_WORDS: u32 = 4u / (LANES * LANES);
const UNIT: u32 = UNIT_WORDS * LANES;

// ---- grad norm ----
@group(0) @binding(1) var<storage, read_write> n_scratch: array<u32>;
@group(0) @binding(2) var<storage, read_write> n_grads: array<u32>;

// Unit u of the gradients, widened; lanes past the unit's elements are 0.
fn unit(u: u32) -> vec4<f32> {
    var x = vec4<f32>(0.0);
    for (var j = 0u; j < UNIT; j++) {
        x[j] = lane(n_grads[u * UNIT_WORDS + j / LANES], j % LANES);
    }
    return x;
}

// Whole units of n elements: f32 n / 4; bf16 every word (an odd n's last high half is 0).
fn units(n: u32) -> u32 {
    return (n + LANES - 1u) / LANES / UNIT_WORDS;
}

@compute @workgroup_size(256)
fn norm_partials(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let p = gid.x + gid.y * nwg.x * WG;
    if (p >= d.parts) { return; }
    let nu = units(d.n);
    let k = (nu + d.parts - 1u) / d.parts;
    var s = vec4<f32>(0.0);
    for (var i = p * k; i < min(nu, p * k + k); i++) {
        let x = unit(i);
        s = fma(x, x, s);
    }
    n_scratch[p] = bitcast<u32>((s.x + s.y) + (s.z + s.w));
}

@group(0) @binding(1) var<storage, read_write> f_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> f_scratch: array<u32>;
@group(0) @binding(3) var<storage, read_write> f_grads: array<u32>;

var<workgroup> red: array<f32, 256>;

// d.parts is 0 when there are no whole units.
@compute @workgroup_size(256)
fn norm_final(@builtin(local_invocation_index) l: u32) {
    var s = 0.0;
    let tail = units(d.n) * UNIT;
    if (tail + l < d.n) {
        let x = lane(f_grads[(tail + l) / LANES], (tail + l) % LANES);
        s = x * x;
    }
    for (var p = l; p < d.parts; p += WG) { s += bitcast<f32>(f_scratch[p]); }
    red[l] = s;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w = w >> 1u) {
        if (l < w) { red[l] = red[l] + red[l + w]; }
        workgroupBarrier();
    }
    if (l == 0u) { f_out[0] = bitcast<u32>(red[0]); }
}

// ---- adamw ----
// Hyper-parameters of this step (cpu::AdamW), uploaded every step; t counts from 1.
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

// The per-step constants every thread derives from hp and the norm.
struct Step { scale: f32, bc1: f32, bc2: f32 }

fn step_constants(h: Hyper) -> Step {
    // Clip: scale = clip / ‖g‖ when clip > 0 and ‖g‖ > clip (cpu::AdamW::clip_scale).
    let norm = sqrt(bitcast<f32>(norm_sq[0]));
    let scale = select(1.0, h.clip / norm, h.clip > 0.0 && norm > h.clip);
    return Step(scale, 1.0 - powi(h.beta1, h.t), 1.0 - powi(h.beta2, h.t));
}

// Element i: the f32 steps of cpu::adamw on its master weight and moments; returns the new
// master weight.
fn update(i: u32, g0: f32, k: Step, h: Hyper) -> f32 {
    let g = g0 * k.scale;
    let m = h.beta1 * bitcast<f32>(a_m[i]) + (1.0 - h.beta1) * g;
    let v = h.beta2 * bitcast<f32>(a_v[i]) + (1.0 - h.beta2) * g * g;
    a_m[i] = bitcast<u32>(m);
    a_v[i] = bitcast<u32>(v);
    let mhat = m / k.bc1;
    let vhat = v / k.bc2;
    let wd = select(0.0, h.weight_decay, i < d.decay_end);
    let p = bitcast<f32>(a_master[i]);
    let q = p - h.lr * (mhat / (sqrt(vhat) + h.eps) + wd * p);
    a_master[i] = bitcast<u32>(q);
    return q;
}

@compute @workgroup_size(256)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * WG;
    if (LANES * w >= d.n) { return; }
    let h = hp;
    let k = step_constants(h);
    let gw = a_grads[w];
    var q = vec2<f32>(0.0);
    for (var j = 0u; j < LANES; j++) {
        let i = LANES * w + j;
        if (i < d.n) { q[j] = update(i, lane(gw, j), k, h); }
    }
    // f32: the master weights are the parameters, already written
    if (LANES > 1u) { a_params[w] = word(w, q, d.n); }
}
