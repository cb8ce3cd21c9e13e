// Packed-bf16 elementwise ops: every buffer holds bf16 pairs in u32 words (element 2i in the low
// half of word i), declared array<u32>. One invocation per word; index folded over y past 65535
// groups. Arithmetic in f32 (widen on load), one round-to-nearest-even per stored element.
// For an odd n the high half of the last output word is 0, as bf16.wgsl's pack leaves it.
//
//   gelu_forward     (out | inp)           out = gelu(inp)
//   gelu_backward    (dinp | inp, dout)    dinp = gelu'(inp)·dout (assigned)
//   residual_forward (out | a, b)          out = a + b
//   fill             (out)                 out = bf16(value), both halves
//   copy             (out | a)             out = a, raw words
//   add              (out | a)             out += a, both halves

struct Dims { n: u32, words: u32, value: u32, _b: u32 } // value: f32 bits
@group(0) @binding(0) var<uniform> d: Dims;

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.

fn lo(w: u32) -> f32 { return bitcast<f32>(widen(w)); }
fn hi(w: u32) -> f32 { return bitcast<f32>(widen(w >> 16u)); }

// Word i from its two f32 elements; the high half is 0 past n.
fn pack2(i: u32, a: f32, b: f32) -> u32 {
    let h = select(0u, narrow(bitcast<u32>(b)), 2u * i + 1u < d.n);
    return narrow(bitcast<u32>(a)) | (h << 16u);
}

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

@group(0) @binding(1) var<storage, read_write> g_out: array<u32>;
@group(0) @binding(2) var<storage, read> g_inp: array<u32>;
@group(0) @binding(3) var<storage, read> g_dout: array<u32>;

// ---- gelu_forward(out, inp) ----
@compute @workgroup_size(256)
fn gelu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let x = g_inp[i];
    g_out[i] = pack2(i, gelu_f(lo(x)), gelu_f(hi(x)));
}

// ---- gelu_backward(dinp, inp, dout) ----
@compute @workgroup_size(256)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let x = g_inp[i];
    let dy = g_dout[i];
    g_out[i] = pack2(i, gelu_grad(lo(x), lo(dy)), gelu_grad(hi(x), hi(dy)));
}

// ---- residual_forward(out, a, b): out = a + b ----
@compute @workgroup_size(256)
fn residual_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let a = g_inp[i];
    let b = g_dout[i];
    g_out[i] = pack2(i, lo(a) + lo(b), hi(a) + hi(b));
}

// ---- fill(out): both halves = bf16(value) ----
@compute @workgroup_size(256)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let h = narrow(d.value);
    g_out[i] = h | (h << 16u);
}

// ---- copy(out, a): out = a, word for word ----
@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    g_out[i] = g_inp[i];
}

// ---- add(out, a): out += a on both halves ----
@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let o = g_out[i];
    let a = g_inp[i];
    g_out[i] = pack2(i, lo(o) + lo(a), hi(o) + hi(a));
}
