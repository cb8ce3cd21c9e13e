// Fused softmax + cross-entropy, forward and backward in one dispatch.
// logits [n,v], targets u32 [n] → losses [n] = −log softmax(logits)[target],
// dlogits [n,v] = (softmax − onehot(target)) · dloss (assigned).
//
// One workgroup of CW threads per row (row index folded over y past 65535 groups). Thread l
// owns columns l, l+CW, l+2·CW, …; the row max and the sum of exponentials are reduced in a
// fixed tree, so the result is the same every run. Each column is read and written by the same
// thread, so dlogits may be the same view as logits (in place, as llm.c does).

struct Dims { n: u32, v: u32, dloss: f32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

@group(0) @binding(1) var<storage, read_write> losses: array<f32>;
@group(0) @binding(2) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(3) var<storage, read_write> logits: array<f32>; // read only; rw for in place
@group(0) @binding(4) var<storage, read> targets: array<u32>;

const CW: u32 = 256u;
const NAN: u32 = 0x7fc00000u;
var<workgroup> red: array<f32, CW>;

// Tree reduction of red[0..CW] into red[0] (max when is_max, else sum); all threads return it.
fn reduce(l: u32, is_max: bool) -> f32 {
    workgroupBarrier();
    for (var s = CW / 2u; s > 0u; s = s >> 1u) {
        if (l < s) {
            let a = red[l];
            let b = red[l + s];
            red[l] = select(a + b, max(a, b), is_max);
        }
        workgroupBarrier();
    }
    let out = red[0];
    workgroupBarrier(); // red is reused by the next reduction
    return out;
}

@compute @workgroup_size(256)
fn crossentropy_forward_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) l: u32,
) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= d.n) { return; }
    let v = d.v;
    let base = r * v;
    let tgt = targets[r];

    var m = -3.4028235e38;
    for (var j = l; j < v; j += CW) { m = max(m, logits[base + j]); }
    red[l] = m;
    let mx = reduce(l, true);

    var s = 0.0;
    for (var j = l; j < v; j += CW) { s += exp(logits[base + j] - mx); }
    red[l] = s;
    let sum = reduce(l, false);

    let lse = log(sum);
    for (var j = l; j < v; j += CW) {
        let x = logits[base + j];
        let p = exp(x - mx) / sum;
        if (j == tgt) {
            losses[r] = -(x - mx - lse);
            dlogits[base + j] = (p - 1.0) * d.dloss;
        } else {
            dlogits[base + j] = p * d.dloss;
        }
    }
    if (l == 0u && tgt >= v) { losses[r] = bitcast<f32>(NAN); }
}
