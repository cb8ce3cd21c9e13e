// Global gradient norm and AdamW over flat views of n elements.
//
//   norm_partials4 (scratch | grads4)        partial p sums the squares of one contiguous chunk
//                                            of the n/4 leading vec4s → scratch[p]
//   norm_final     (out, scratch | grads)    one workgroup: the n % 4 tail elements plus the
//                                            partials, summed in a fixed tree → out[0]
//   adamw4 (params4, grads4, m4, v4 | hp, norm_sq)  thread per vec4 of the leading n/4·4 elements
//   adamw  (params, grads, m, v | hp, norm_sq)      thread per element from `start` (the tail)
//
// Contiguous chunks per thread stream through memory (8 sequential streams per SIMD row on the
// software adapter, ~3× faster than a strided partition there). The partition depends only on n,
// so the norm repeats bit for bit. Gradient views are bound read_write only so that they may
// share one buffer with the views written by the same dispatch.

struct Dims { n: u32, parts: u32, start: u32, decay_end: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const WG: u32 = 256u;

// ---- grad norm ----
@group(0) @binding(1) var<storage, read_write> n_scratch: array<f32>;
@group(0) @binding(2) var<storage, read_write> n_grads4: array<vec4<f32>>;

@compute @workgroup_size(256)
fn norm_partials4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let p = gid.x + gid.y * nwg.x * WG;
    if (p >= d.parts) { return; }
    let n4 = d.n / 4u;
    let k = (n4 + d.parts - 1u) / d.parts;
    var s = vec4<f32>(0.0);
    for (var i = p * k; i < min(n4, p * k + k); i++) {
        let x = n_grads4[i];
        s = fma(x, x, s);
    }
    n_scratch[p] = (s.x + s.y) + (s.z + s.w);
}

@group(0) @binding(1) var<storage, read_write> f_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> f_scratch: array<f32>;
@group(0) @binding(3) var<storage, read_write> f_grads: array<f32>;

var<workgroup> red: array<f32, 256>;

// d.parts is 0 when there are no vec4 partials (n < 4).
@compute @workgroup_size(256)
fn norm_final(@builtin(local_invocation_index) l: u32) {
    var s = 0.0;
    let tail = d.n & ~3u;
    if (tail + l < d.n) {
        let x = f_grads[tail + l];
        s = x * x;
    }
    for (var p = l; p < d.parts; p += WG) { s += f_scratch[p]; }
    red[l] = s;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w = w >> 1u) {
        if (l < w) { red[l] = red[l] + red[l + w]; }
        workgroupBarrier();
    }
    if (l == 0u) { f_out[0] = red[0]; }
}

// ---- adamw ----
// Hyper-parameters of this step (cpu::AdamW), uploaded every step; t counts from 1.
struct Hyper { lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, t: u32, clip: f32, _pad: u32 }

@group(0) @binding(5) var<storage, read> hp: Hyper;
@group(0) @binding(6) var<storage, read> norm_sq: array<f32>;

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
    let norm = sqrt(norm_sq[0]);
    let scale = select(1.0, h.clip / norm, h.clip > 0.0 && norm > h.clip);
    return Step(scale, 1.0 - powi(h.beta1, h.t), 1.0 - powi(h.beta2, h.t));
}

@group(0) @binding(1) var<storage, read_write> a_params: array<f32>;
@group(0) @binding(2) var<storage, read_write> a_grads: array<f32>;
@group(0) @binding(3) var<storage, read_write> a_m: array<f32>;
@group(0) @binding(4) var<storage, read_write> a_v: array<f32>;

@compute @workgroup_size(256)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = d.start + gid.x + gid.y * nwg.x * WG;
    if (i >= d.n) { return; }
    let h = hp;
    let k = step_constants(h);
    let g = a_grads[i] * k.scale;
    let m = h.beta1 * a_m[i] + (1.0 - h.beta1) * g;
    let v = h.beta2 * a_v[i] + (1.0 - h.beta2) * g * g;
    a_m[i] = m;
    a_v[i] = v;
    let mhat = m / k.bc1;
    let vhat = v / k.bc2;
    let wd = select(0.0, h.weight_decay, i < d.decay_end);
    let p = a_params[i];
    a_params[i] = p - h.lr * (mhat / (sqrt(vhat) + h.eps) + wd * p);
}

@group(0) @binding(1) var<storage, read_write> a4_params: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> a4_grads: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> a4_m: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> a4_v: array<vec4<f32>>;

@compute @workgroup_size(256)
fn adamw4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= d.n / 4u) { return; }
    let h = hp;
    let k = step_constants(h);
    let g = a4_grads[i] * k.scale;
    let m = h.beta1 * a4_m[i] + (1.0 - h.beta1) * g;
    let v = h.beta2 * a4_v[i] + (1.0 - h.beta2) * g * g;
    a4_m[i] = m;
    a4_v[i] = v;
    let mhat = m / k.bc1;
    let vhat = v / k.bc2;
    let idx = vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u);
    let wd = select(vec4<f32>(0.0), vec4<f32>(h.weight_decay), idx < vec4<u32>(d.decay_end));
    let p = a4_params[i];
    a4_params[i] = p - h.lr * (mhat / (sqrt(vhat) + h.eps) + wd * p);
}
