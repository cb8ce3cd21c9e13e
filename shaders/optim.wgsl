// Global gradient norm and AdamW.
//
//   norm_partials (out, scratch | grads)  thread p of P sums grads[p], grads[p+P], … squared → scratch[p]
//   norm_final    (out, scratch)          one workgroup sums scratch[0..P] in a fixed tree → out[0]
//   adamw (params, grads, m, v | hp, norm_sq)  thread per element, index folded over y
//
// The partition into P partials depends only on the length, so the norm repeats bit for bit.
// grads is bound read_write only so that it may share one buffer with the written views.

struct Dims { n: u32, parts: u32, decay_end: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

// ---- norm_partials / norm_final ----
@group(0) @binding(1) var<storage, read_write> n_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> n_scratch: array<f32>;
@group(0) @binding(3) var<storage, read_write> n_grads: array<f32>;

@compute @workgroup_size(256)
fn norm_partials(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let p = gid.x + gid.y * nwg.x * 256u;
    if (p >= d.parts) { return; }
    var s = 0.0;
    for (var i = p; i < d.n; i += d.parts) {
        let x = n_grads[i];
        s = fma(x, x, s);
    }
    n_scratch[p] = s;
}

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn norm_final(@builtin(local_invocation_index) l: u32) {
    var s = 0.0;
    for (var p = l; p < d.parts; p += 256u) { s += n_scratch[p]; }
    red[l] = s;
    workgroupBarrier();
    for (var w = 128u; w > 0u; w = w >> 1u) {
        if (l < w) { red[l] = red[l] + red[l + w]; }
        workgroupBarrier();
    }
    if (l == 0u) { n_out[0] = red[0]; }
}

// ---- adamw ----
// Hyper-parameters of this step (cpu::AdamW), uploaded every step; t counts from 1.
struct Hyper { lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, t: u32, clip: f32, _pad: u32 }

@group(0) @binding(1) var<storage, read_write> a_params: array<f32>;
@group(0) @binding(2) var<storage, read_write> a_grads: array<f32>;
@group(0) @binding(3) var<storage, read_write> a_m: array<f32>;
@group(0) @binding(4) var<storage, read_write> a_v: array<f32>;
@group(0) @binding(5) var<storage, read> hp: Hyper;
@group(0) @binding(6) var<storage, read> norm_sq: array<f32>;

// a^b by square-and-multiply, the same f32 steps as Rust's f32::powi.
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

@compute @workgroup_size(256)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.n) { return; }
    let h = hp;
    // Clip: scale = clip / ‖g‖ when clip > 0 and ‖g‖ > clip (cpu::AdamW::clip_scale).
    let norm = sqrt(norm_sq[0]);
    let scale = select(1.0, h.clip / norm, h.clip > 0.0 && norm > h.clip);
    let bc1 = 1.0 - powi(h.beta1, h.t);
    let bc2 = 1.0 - powi(h.beta2, h.t);
    let g = a_grads[i] * scale;
    let m = h.beta1 * a_m[i] + (1.0 - h.beta1) * g;
    let v = h.beta2 * a_v[i] + (1.0 - h.beta2) * g * g;
    a_m[i] = m;
    a_v[i] = v;
    let mhat = m / bc1;
    let vhat = v / bc2;
    let wd = select(0.0, h.weight_decay, i < d.decay_end);
    let p = a_params[i];
    a_params[i] = p - h.lr * (mhat / (sqrt(vhat) + h.eps) + wd * p);
}
