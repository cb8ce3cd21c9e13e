// Fused softmax + cross-entropy, forward and backward in one dispatch.
// logits [n,v], targets u32 [n] → losses [n] = −log softmax(logits)[target],
// dlogits [n,v] = (softmax − onehot(target)) · dloss (assigned).
//
// One thread per row (index folded over y past 65535 groups), three passes over the row in
// column order: max, sum of exp(x − max), write. On the software adapter this beats a workgroup
// per row by 5–50× (no barriers; the row stays in cache between passes). The target logit is
// read before the write pass, so dlogits may be the same view as logits (in place, as llm.c).

struct Dims { n: u32, v: u32, dloss: f32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

@group(0) @binding(1) var<storage, read_write> losses: array<f32>;
@group(0) @binding(2) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(3) var<storage, read_write> logits: array<f32>; // read only; rw for in place
@group(0) @binding(4) var<storage, read> targets: array<u32>;

const WG: u32 = 64u;
const NAN: u32 = 0x7fc00000u;

@compute @workgroup_size(64)
fn crossentropy_forward_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let v = d.v;
    let base = r * v;
    let tgt = targets[r];
    var mx = -3.4028235e38;
    for (var j = 0u; j < v; j++) { mx = max(mx, logits[base + j]); }
    var sum = 0.0;
    for (var j = 0u; j < v; j++) { sum += exp(logits[base + j] - mx); }
    let xt = logits[base + min(tgt, v - 1u)];
    for (var j = 0u; j < v; j++) {
        let p = exp(logits[base + j] - mx) / sum;
        dlogits[base + j] = select(p, p - 1.0, j == tgt) * d.dloss;
    }
    losses[r] = select(bitcast<f32>(NAN), -(xt - mx - log(sum)), tgt < v);
}

// The same on vec4 (v % 4 == 0, so every row is 16-byte aligned): one vector load per lane
// instead of four scalar ones; the sum of exponentials runs as 4 interleaved partial sums.
@group(0) @binding(2) var<storage, read_write> dlogits4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> logits4: array<vec4<f32>>;

@compute @workgroup_size(64)
fn crossentropy_forward_backward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let v4 = d.v / 4u;
    let base = r * v4;
    let tgt = targets[r];
    var m4 = vec4<f32>(-3.4028235e38);
    for (var j = 0u; j < v4; j++) { m4 = max(m4, logits4[base + j]); }
    let mx = max(max(m4.x, m4.y), max(m4.z, m4.w));
    var s4 = vec4<f32>(0.0);
    for (var j = 0u; j < v4; j++) { s4 += exp(logits4[base + j] - mx); }
    let sum = (s4.x + s4.y) + (s4.z + s4.w);
    let tv = min(tgt, d.v - 1u);
    let xt = logits4[base + tv / 4u][tv % 4u];
    for (var j = 0u; j < v4; j++) {
        let p = exp(logits4[base + j] - mx) / sum;
        let hot = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u) == vec4<u32>(tgt);
        dlogits4[base + j] = select(p, p - 1.0, hot) * d.dloss;
    }
    losses[r] = select(bitcast<f32>(NAN), -(xt - mx - log(sum)), tgt < d.v);
}
