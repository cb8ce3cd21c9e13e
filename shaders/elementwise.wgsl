// Elementwise ops, one source for f32 and packed bf16 (a storage prelude, store_f32.wgsl or
// store_bf16.wgsl, comes first): one invocation per u32 word of LANES elements, arithmetic in
// f32; index folded over y past 65535 groups. Each op has a `4` twin entry for n % 4 == 0: one
// invocation per Quad (four elements as stored), the same arithmetic per element, so the same
// bits; a software adapter turns every storage load into a per-lane scalar load, so a quarter
// of the loads run the op 2–3× faster there.
//
//   gelu_forward     (out | inp)           out = gelu(inp)  (tanh approximation)
//   gelu_backward    (dinp | inp, dout)    dinp = gelu'(inp)·dout (assigned)
//   residual_forward (out | a, b)          out = a + b
//   fill             (out)                 out = value
//   scale            (out)                 out *= value
//   add              (out | a)             out += a
//   copy             (out | a)             out = a, word for word

// n: elements, words: u32 words (⌈n / LANES⌉), value: an f32 operand
struct Dims { n: u32, words: u32, value: f32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

@group(0) @binding(1) var<storage, read_write> g_out: array<u32>;
@group(0) @binding(2) var<storage, read> g_inp: array<u32>;
@group(0) @binding(3) var<storage, read> g_dout: array<u32>;

// The same bindings as Quads (the `4` entries).
@group(0) @binding(1) var<storage, read_write> q_out: array<Quad>;
@group(0) @binding(2) var<storage, read> q_inp: array<Quad>;
@group(0) @binding(3) var<storage, read> q_dout: array<Quad>;

const GELU_SCALE: f32 = 0.7978846;

fn gelu_f(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh(GELU_SCALE * (x + 0.044715 * x * x * x)));
}

fn gelu_grad(x: f32, dy: f32) -> f32 {
    let u = GELU_SCALE * (x + 0.044715 * x * x * x);
    let th = tanh(u);
    let sech2 = 1.0 - th * th;
    let du = GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
    return (0.5 * (1.0 + th) + 0.5 * x * sech2 * du) * dy;
}

fn gelu4(x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu_f(x.x), gelu_f(x.y), gelu_f(x.z), gelu_f(x.w));
}

fn gelu_grad4(x: vec4<f32>, dy: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu_grad(x.x, dy.x), gelu_grad(x.y, dy.y), gelu_grad(x.z, dy.z), gelu_grad(x.w, dy.w));
}

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// ---- gelu_forward(out, inp) ----
@compute @workgroup_size(256)
fn gelu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    let x = lanes(g_inp[i]);
    var y = vec2<f32>(gelu_f(x.x), 0.0);
    if (LANES == 2u) { y.y = gelu_f(x.y); }
    g_out[i] = word(i, y, d.n);
}

// ---- gelu_backward(dinp, inp, dout) ----
@compute @workgroup_size(256)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    let x = lanes(g_inp[i]);
    let dy = lanes(g_dout[i]);
    var y = vec2<f32>(gelu_grad(x.x, dy.x), 0.0);
    if (LANES == 2u) { y.y = gelu_grad(x.y, dy.y); }
    g_out[i] = word(i, y, d.n);
}

// ---- residual_forward(out, a, b): out = a + b ----
@compute @workgroup_size(256)
fn residual_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    g_out[i] = word(i, lanes(g_inp[i]) + lanes(g_dout[i]), d.n);
}

// ---- fill(out): out = value ----
@compute @workgroup_size(256)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    g_out[i] = splat(d.value);
}

// ---- scale(out): out *= value ----
@compute @workgroup_size(256)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    g_out[i] = word(i, lanes(g_out[i]) * d.value, d.n);
}

// ---- add(out, a): out += a ----
@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    g_out[i] = word(i, lanes(g_out[i]) + lanes(g_inp[i]), d.n);
}

// ---- copy(out, a): out = a, word for word ----
@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.words) { return; }
    g_out[i] = g_inp[i];
}

// ---- the `4` entries (n % 4 == 0): one invocation per Quad ----

@compute @workgroup_size(256)
fn gelu_forward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(gelu4(quad(q_inp[i])));
}

@compute @workgroup_size(256)
fn gelu_backward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(gelu_grad4(quad(q_inp[i]), quad(q_dout[i])));
}

@compute @workgroup_size(256)
fn residual_forward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(quad(q_inp[i]) + quad(q_dout[i]));
}

@compute @workgroup_size(256)
fn fill4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(vec4<f32>(d.value));
}

@compute @workgroup_size(256)
fn scale4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(quad(q_out[i]) * d.value);
}

@compute @workgroup_size(256)
fn add4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(quad(q_out[i]) + quad(q_inp[i]));
}

@compute @workgroup_size(256)
fn copy4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = q_inp[i];
}

// ---- the `_t` entries: gelu_forward4, gelu_backward4 and residual_forward4 with their inputs
//      read from flat texture copies (kernels/texels.rs); the same arithmetic ----
@group(0) @binding(2) var t_inp: texture_2d<u32>;
@group(0) @binding(3) var t_dout: texture_2d<u32>;

@compute @workgroup_size(256)
fn gelu_forward_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(gelu4(quad(flat(t_inp, i))));
}

@compute @workgroup_size(256)
fn gelu_backward_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(gelu_grad4(quad(flat(t_inp, i)), quad(flat(t_dout, i))));
}

@compute @workgroup_size(256)
fn residual_forward_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= d.n / 4u) { return; }
    q_out[i] = quad_pack(quad(flat(t_inp, i)) + quad(flat(t_dout, i)));
}
