// Global gradient norm and AdamW, one body for both precisions behind the storage prelude
// (store_f32.wgsl / store_bf16.wgsl): gradients and parameters are words of the run's
// precision; the master weights and Adam moments are always f32 words. Under f32 the master
// weights are the parameters (the in-place entries). Each entry covers all of a device's
// tensors in one dispatch: the norm reads a table of parts, AdamW a weight-decay mask.
//
//   norm_partials (scratch | grads, table)  workgroup row y = part y of the table; its thread
//                                      p sums the squares of chunk p of the part's leading
//                                      units → scratch[part's base + p]. A unit is four f32
//                                      words or one bf16 word, widened into a vec4 (bf16: the
//                                      two halves, then zeros); partials sum lane-wise.
//   norm_final    (out, scratch | grads, table)  workgroup y = part y: the elements past its
//                                      last whole unit (f32: n % 4) plus its partials, in a
//                                      fixed tree → out[y]
//   adamw (params, master, m, v, grads | hp, norm_sq, decay)  mixed precision: thread per
//                                      parameter word
//   adamw_in_place[4] (params, grads, m, v | hp, norm_sq, decay)  f32: the parameters are the
//                                      master weights; four elements a thread, then the tail
//
// Contiguous chunks per thread stream through memory (8 sequential streams per SIMD row on the
// software adapter, ~3× faster than a strided partition there). A part's partition depends only
// on its length, so the norm repeats bit for bit, and equals the part's norm computed alone.
// Gradients are bound read_write only so that they may share one buffer with the views written
// by the same dispatch.

struct Dims { n: u32, _a: u32, _b: u32, start: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const WG: u32 = 256u;
// Words and elements of one norm unit.
const UNIT_WORDS: u32 = 4u / (LANES * LANES);
const UNIT: u32 = UNIT_WORDS * LANES;

fn f(w: u32) -> f32 {
    return bitcast<f32>(w);
}

// ---- grad norm ----
// A norm part: `n` elements from word `base` of the gradients, summed in `parts` partials at
// scratch[sbase ..]. d.n counts the parts.
struct Part { base: u32, n: u32, parts: u32, sbase: u32 }

@group(0) @binding(1) var<storage, read_write> n_scratch: array<u32>;
@group(0) @binding(2) var<storage, read_write> n_grads: array<u32>;
@group(0) @binding(3) var<storage, read> n_table: array<Part>;

// Unit u of the gradients from word `base`, widened; lanes past the unit's elements are 0.
fn unit(base: u32, u: u32) -> vec4<f32> {
    var x = vec4<f32>(0.0);
    for (var j = 0u; j < UNIT; j++) {
        x[j] = lane(n_grads[base + u * UNIT_WORDS + j / LANES], j % LANES);
    }
    return x;
}

// Whole units of n elements: f32 n / 4; bf16 every word (an odd n's last high half is 0).
fn units(n: u32) -> u32 {
    return (n + LANES - 1u) / LANES / UNIT_WORDS;
}

@compute @workgroup_size(256)
fn norm_partials(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.y >= d.n) { return; }
    let t = n_table[gid.y];
    let p = gid.x;
    if (p >= t.parts) { return; }
    let nu = units(t.n);
    let k = (nu + t.parts - 1u) / t.parts;
    var s = vec4<f32>(0.0);
    for (var i = p * k; i < min(nu, p * k + k); i++) {
        let x = unit(t.base, i);
        s = fma(x, x, s);
    }
    n_scratch[t.sbase + p] = bitcast<u32>((s.x + s.y) + (s.z + s.w));
}

@group(0) @binding(1) var<storage, read_write> f_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> f_scratch: array<u32>;
@group(0) @binding(3) var<storage, read_write> f_grads: array<u32>;
@group(0) @binding(4) var<storage, read> f_table: array<Part>;

var<workgroup> red: array<f32, 256>;

// A part with no whole units reads no partials.
@compute @workgroup_size(256)
fn norm_final(@builtin(local_invocation_index) l: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = f_table[wg.y];
    var s = 0.0;
    let tail = units(t.n) * UNIT;
    if (tail + l < t.n) {
        let x = lane(f_grads[t.base + (tail + l) / LANES], (tail + l) % LANES);
        s = x * x;
    }
    let used = select(0u, t.parts, units(t.n) > 0u);
    for (var p = l; p < used; p += WG) { s += bitcast<f32>(f_scratch[t.sbase + p]); }
    red[l] = s;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w = w >> 1u) {
        if (l < w) { red[l] = red[l] + red[l + w]; }
        workgroupBarrier();
    }
    if (l == 0u) { f_out[wg.y] = bitcast<u32>(red[0]); }
}

// ---- adamw ----
// Hyper-parameters of this step (cpu::AdamW), uploaded every step; t counts from 1.
struct Hyper { lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, t: u32, clip: f32, _pad: u32 }

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

fn step_constants(h: Hyper, norm_sq: u32) -> Step {
    // Clip: scale = clip / ‖g‖ when clip > 0 and ‖g‖ > clip (cpu::AdamW::clip_scale).
    let norm = sqrt(bitcast<f32>(norm_sq));
    let scale = select(1.0, h.clip / norm, h.clip > 0.0 && norm > h.clip);
    return Step(scale, 1.0 - powi(h.beta1, h.t), 1.0 - powi(h.beta2, h.t));
}

// Whether element i gets weight decay, given word i / 2048 of the mask: one bit per 64 elements.
fn decays(mask_word: u32, i: u32) -> bool {
    return ((mask_word >> ((i / 64u) % 32u)) & 1u) != 0u;
}

// Element i with gradient g0, moments m0, v0 and master weight p: the f32 steps of cpu::adamw.
// Returns (m, v, the new master weight).
fn adam(decay: bool, g0: f32, m0: f32, v0: f32, p: f32, k: Step, h: Hyper) -> vec3<f32> {
    let g = g0 * k.scale;
    let m = h.beta1 * m0 + (1.0 - h.beta1) * g;
    let v = h.beta2 * v0 + (1.0 - h.beta2) * g * g;
    let mhat = m / k.bc1;
    let vhat = v / k.bc2;
    let wd = select(0.0, h.weight_decay, decay);
    return vec3<f32>(m, v, p - h.lr * (mhat / (sqrt(vhat) + h.eps) + wd * p));
}

// Mixed precision: f32 master weights beside the parameters, which receive them rounded.
//   adamw (params, master, m, v, grads | hp, norm_sq)   thread per parameter word
@group(0) @binding(1) var<storage, read_write> a_params: array<u32>;
@group(0) @binding(2) var<storage, read_write> a_master: array<u32>;
@group(0) @binding(3) var<storage, read_write> a_m: array<u32>;
@group(0) @binding(4) var<storage, read_write> a_v: array<u32>;
@group(0) @binding(5) var<storage, read_write> a_grads: array<u32>;
@group(0) @binding(6) var<storage, read> a_hp: Hyper;
@group(0) @binding(7) var<storage, read> a_norm_sq: array<u32>;
@group(0) @binding(8) var<storage, read> a_decay: array<u32>;

@compute @workgroup_size(256)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * WG;
    if (LANES * w >= d.n) { return; }
    let h = a_hp;
    let k = step_constants(h, a_norm_sq[0]);
    let gw = a_grads[w];
    var q = vec2<f32>(0.0);
    for (var j = 0u; j < LANES; j++) {
        let i = LANES * w + j;
        if (i < d.n) {
            let r = adam(decays(a_decay[i / 2048u], i), lane(gw, j), f(a_m[i]), f(a_v[i]), f(a_master[i]), k, h);
            a_m[i] = bitcast<u32>(r.x);
            a_v[i] = bitcast<u32>(r.y);
            a_master[i] = bitcast<u32>(r.z);
            q[j] = r.z;
        }
    }
    a_params[w] = word(w, q, d.n);
}

// f32: the parameters are the master weights, updated in place.
//   adamw_in_place4 (params, grads, m, v | hp, norm_sq)  thread per four elements of the leading n/4·4
//   adamw_in_place  (params, grads, m, v | hp, norm_sq)  thread per element from d.start (the tail)
@group(0) @binding(1) var<storage, read_write> p_params: array<u32>;
@group(0) @binding(2) var<storage, read_write> p_grads: array<u32>;
@group(0) @binding(3) var<storage, read_write> p_m: array<u32>;
@group(0) @binding(4) var<storage, read_write> p_v: array<u32>;
@group(0) @binding(5) var<storage, read> p_hp: Hyper;
@group(0) @binding(6) var<storage, read> p_norm_sq: array<u32>;
@group(0) @binding(7) var<storage, read> p_decay: array<u32>;

@compute @workgroup_size(256)
fn adamw_in_place(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = d.start + gid.x + gid.y * nwg.x * WG;
    if (i >= d.n) { return; }
    let h = p_hp;
    let k = step_constants(h, p_norm_sq[0]);
    let r = adam(decays(p_decay[i / 2048u], i), f(p_grads[i]), f(p_m[i]), f(p_v[i]), f(p_params[i]), k, h);
    p_m[i] = bitcast<u32>(r.x);
    p_v[i] = bitcast<u32>(r.y);
    p_params[i] = bitcast<u32>(r.z);
}

@group(0) @binding(1) var<storage, read_write> p4_params: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> p4_grads: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> p4_m: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> p4_v: array<vec4<u32>>;

@compute @workgroup_size(256)
fn adamw_in_place4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = gid.x + gid.y * nwg.x * WG;
    if (q >= d.n / 4u) { return; }
    let h = p_hp;
    let k = step_constants(h, p_norm_sq[0]);
    let g = p4_grads[q];
    let m = p4_m[q];
    let v = p4_v[q];
    let p = p4_params[q];
    var om = vec4<u32>(0u);
    var ov = vec4<u32>(0u);
    var op = vec4<u32>(0u);
    // a vec4 never straddles a 64-element mask block
    let decay = decays(p_decay[q / 512u], 4u * q);
    for (var j = 0u; j < 4u; j++) {
        let r = adam(decay, f(g[j]), f(m[j]), f(v[j]), f(p[j]), k, h);
        om[j] = bitcast<u32>(r.x);
        ov[j] = bitcast<u32>(r.y);
        op[j] = bitcast<u32>(r.z);
    }
    p4_m[q] = om;
    p4_v[q] = ov;
    p4_params[q] = op;
}

// ---- the `_t` entries: AdamW reading the gradients, the moments and the master weights from
//      flat texture copies (kernels/texels.rs), four elements a thread (n % 4 == 0); the same
//      f32 steps as the entries above, writing the same words. They run over a slice: d.n
//      elements from element d.start of the range (its buffers and copies bound from there;
//      the decay mask is the whole range's) ----
//   adamw_in_place_t (params, m, v | hp, norm_sq, decay, copies of params, grads, m, v)   f32
//   adamw_t (params, m, v | hp, norm_sq, decay, copies of master, grads, m, v; master)     bf16
@group(0) @binding(1) var<storage, read_write> t4_params: array<Quad>;
@group(0) @binding(2) var<storage, read_write> t4_m: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> t4_v: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> t_hp: Hyper;
@group(0) @binding(5) var<storage, read> t_norm_sq: array<u32>;
@group(0) @binding(6) var<storage, read> t_decay: array<u32>;
@group(0) @binding(7) var tx_master: texture_2d<u32>;   // f32: the parameters themselves
@group(0) @binding(8) var tx_grads: texture_2d<u32>;
@group(0) @binding(9) var tx_m: texture_2d<u32>;
@group(0) @binding(10) var tx_v: texture_2d<u32>;
@group(0) @binding(11) var<storage, read_write> t4_master: array<vec4<u32>>;

// Quad q's step: stores its moments and returns its new master weights' words.
fn adam_quad(q: u32) -> vec4<u32> {
    let h = t_hp;
    let k = step_constants(h, t_norm_sq[0]);
    let g = quad(flat(tx_grads, q));
    let m = texel(tx_m, q);
    let v = texel(tx_v, q);
    let p = texel(tx_master, q);
    var om = vec4<u32>(0u);
    var ov = vec4<u32>(0u);
    var op = vec4<u32>(0u);
    // a vec4 never straddles a 64-element mask block
    let e = d.start + 4u * q;
    let decay = decays(t_decay[e / 2048u], e);
    for (var j = 0u; j < 4u; j++) {
        let r = adam(decay, g[j], f(m[j]), f(v[j]), f(p[j]), k, h);
        om[j] = bitcast<u32>(r.x);
        ov[j] = bitcast<u32>(r.y);
        op[j] = bitcast<u32>(r.z);
    }
    t4_m[q] = om;
    t4_v[q] = ov;
    return op;
}

@compute @workgroup_size(256)
fn adamw_in_place_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = gid.x + gid.y * nwg.x * WG;
    if (q >= d.n / 4u) { return; }
    t4_params[q] = quad_pack(bitcast<vec4<f32>>(adam_quad(q)));
}

@compute @workgroup_size(256)
fn adamw_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = gid.x + gid.y * nwg.x * WG;
    if (q >= d.n / 4u) { return; }
    let p = adam_quad(q);
    t4_master[q] = p;
    // each element rounded to bf16 once, as `adamw` stores its words
    t4_params[q] = quad_pack(bitcast<vec4<f32>>(p));
}
