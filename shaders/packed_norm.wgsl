// Packed-bf16 LayerNorm over rows: inp [n,c] → out [n,c], with mean [n] and rstd [n] (f32) kept
// for the backward. bf16 tensors are pairs in u32 words (element 2i in the low half of word i);
// every buffer is declared array<u32>, f32 ones read and written with bitcast. c is even, so a
// row is cw = c/2 whole words. Arithmetic is f32 (widen on load), summed in element order as in
// the CPU twin; each stored bf16 element is rounded once (round to nearest even).
//
// Row passes run one thread per row; column sums (dweight, dbias) run one thread per column
// pair (one word) and never use atomics: each column is summed over the rows in a fixed order,
// directly (few rows) or as f32 per-chunk partials followed by a pass adding the chunks in order.
//
//   layernorm_forward           (out, mean, rstd | inp, weight, bias)      thread per row
//   layernorm_backward_dinp     (dinp | dout, inp, weight, mean, rstd)     thread per row
//   layernorm_backward_dparams  (dweight, dbias | dout, inp, mean, rstd)   thread per word of c
//   layernorm_dparams_partial   (part | dout, inp, mean, rstd)   thread per (row chunk, word of c)
//   layernorm_dparams_final     (dweight, dbias | part)          thread per word of c
//
// part f32 [2, chunks, c] holds Σ norm·dout then Σ dout over each chunk of CHUNK rows.

struct Dims { n: u32, c: u32, chunks: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const EPS: f32 = 1e-5; // cpu::LN_EPS
const CHUNK: u32 = 64u; // rows per partial; kernels/packed/norm.rs relies on the same value
const WG: u32 = 256u;

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.

fn lo(w: u32) -> f32 { return bitcast<f32>(widen(w)); }
fn hi(w: u32) -> f32 { return bitcast<f32>(widen(w >> 16u)); }
fn pack2(a: f32, b: f32) -> u32 {
    return narrow(bitcast<u32>(a)) | (narrow(bitcast<u32>(b)) << 16u);
}

// ---- layernorm_forward ----
@group(0) @binding(1) var<storage, read_write> f_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> f_mean: array<u32>;
@group(0) @binding(3) var<storage, read_write> f_rstd: array<u32>;
@group(0) @binding(4) var<storage, read> f_inp: array<u32>;
@group(0) @binding(5) var<storage, read> f_weight: array<u32>;
@group(0) @binding(6) var<storage, read> f_bias: array<u32>;

@compute @workgroup_size(256)
fn layernorm_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let cw = d.c / 2u;
    let base = r * cw;
    var s = 0.0;
    for (var j = 0u; j < cw; j++) {
        let x = f_inp[base + j];
        s += lo(x);
        s += hi(x);
    }
    let m = s / f32(d.c);
    var q = 0.0;
    for (var j = 0u; j < cw; j++) {
        let x = f_inp[base + j];
        let a = lo(x) - m;
        q += a * a;
        let b = hi(x) - m;
        q += b * b;
    }
    let rs = 1.0 / sqrt(q / f32(d.c) + EPS);
    for (var j = 0u; j < cw; j++) {
        let x = f_inp[base + j];
        let w = f_weight[j];
        let b = f_bias[j];
        f_out[base + j] = pack2((lo(x) - m) * rs * lo(w) + lo(b), (hi(x) - m) * rs * hi(w) + hi(b));
    }
    f_mean[r] = bitcast<u32>(m);
    f_rstd[r] = bitcast<u32>(rs);
}

// ---- layernorm_backward_dinp: dinp[r,:] += (dnorm − mean(dnorm) − norm·mean(dnorm·norm))·rstd,
//      dnorm = weight · dout ----
@group(0) @binding(1) var<storage, read_write> b_dinp: array<u32>;
@group(0) @binding(2) var<storage, read> b_dout: array<u32>;
@group(0) @binding(3) var<storage, read> b_inp: array<u32>;
@group(0) @binding(4) var<storage, read> b_weight: array<u32>;
@group(0) @binding(5) var<storage, read> b_mean: array<u32>;
@group(0) @binding(6) var<storage, read> b_rstd: array<u32>;

@compute @workgroup_size(256)
fn layernorm_backward_dinp(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let cw = d.c / 2u;
    let base = r * cw;
    let m = bitcast<f32>(b_mean[r]);
    let s = bitcast<f32>(b_rstd[r]);
    var dmean = 0.0;
    var dnmean = 0.0;
    for (var j = 0u; j < cw; j++) {
        let x = b_inp[base + j];
        let dy = b_dout[base + j];
        let w = b_weight[j];
        let n0 = (lo(x) - m) * s;
        let dn0 = lo(w) * lo(dy);
        dmean += dn0;
        dnmean += dn0 * n0;
        let n1 = (hi(x) - m) * s;
        let dn1 = hi(w) * hi(dy);
        dmean += dn1;
        dnmean += dn1 * n1;
    }
    dmean = dmean / f32(d.c);
    dnmean = dnmean / f32(d.c);
    for (var j = 0u; j < cw; j++) {
        let x = b_inp[base + j];
        let dy = b_dout[base + j];
        let w = b_weight[j];
        let n0 = (lo(x) - m) * s;
        let dn0 = lo(w) * lo(dy);
        let n1 = (hi(x) - m) * s;
        let dn1 = hi(w) * hi(dy);
        let old = b_dinp[base + j];
        b_dinp[base + j] = pack2(
            lo(old) + (dn0 - dmean - n0 * dnmean) * s,
            hi(old) + (dn1 - dmean - n1 * dnmean) * s,
        );
    }
}

// ---- column sums: dweight[i] += Σ_r norm[r,i]·dout[r,i],  dbias[i] += Σ_r dout[r,i] ----
@group(0) @binding(1) var<storage, read_write> p_dweight: array<u32>;
@group(0) @binding(2) var<storage, read_write> p_dbias: array<u32>;
@group(0) @binding(3) var<storage, read> p_dout: array<u32>;
@group(0) @binding(4) var<storage, read> p_inp: array<u32>;
@group(0) @binding(5) var<storage, read> p_mean: array<u32>;
@group(0) @binding(6) var<storage, read> p_rstd: array<u32>;

// Few rows: each column pair (word j) walks all rows in order, from the widened old values.
@compute @workgroup_size(256)
fn layernorm_backward_dparams(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let cw = d.c / 2u;
    if (j >= cw) { return; }
    let w0 = p_dweight[j];
    let b0 = p_dbias[j];
    var dw = vec2<f32>(lo(w0), hi(w0));
    var db = vec2<f32>(lo(b0), hi(b0));
    for (var r = 0u; r < d.n; r++) {
        let dy = p_dout[r * cw + j];
        let x = p_inp[r * cw + j];
        let m = bitcast<f32>(p_mean[r]);
        let s = bitcast<f32>(p_rstd[r]);
        let y = vec2<f32>(lo(dy), hi(dy));
        let norm = (vec2<f32>(lo(x), hi(x)) - m) * s;
        db += y;
        dw += norm * y;
    }
    p_dweight[j] = pack2(dw.x, dw.y);
    p_dbias[j] = pack2(db.x, db.y);
}

// Many rows: chunk k of CHUNK rows → part[0,k,i] = Σ norm·dout, part[1,k,i] = Σ dout (f32).
@group(0) @binding(1) var<storage, read_write> q_part: array<u32>;
@group(0) @binding(2) var<storage, read> q_dout: array<u32>;
@group(0) @binding(3) var<storage, read> q_inp: array<u32>;
@group(0) @binding(4) var<storage, read> q_mean: array<u32>;
@group(0) @binding(5) var<storage, read> q_rstd: array<u32>;

@compute @workgroup_size(256)
fn layernorm_dparams_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    let cw = d.c / 2u;
    if (e >= d.chunks * cw) { return; }
    let k = e / cw;
    let j = e - k * cw;
    var dw = vec2<f32>(0.0);
    var db = vec2<f32>(0.0);
    for (var r = k * CHUNK; r < min(d.n, (k + 1u) * CHUNK); r++) {
        let dy = q_dout[r * cw + j];
        let x = q_inp[r * cw + j];
        let m = bitcast<f32>(q_mean[r]);
        let s = bitcast<f32>(q_rstd[r]);
        let y = vec2<f32>(lo(dy), hi(dy));
        let norm = (vec2<f32>(lo(x), hi(x)) - m) * s;
        db += y;
        dw += norm * y;
    }
    let o = k * d.c + 2u * j;
    let ob = (d.chunks + k) * d.c + 2u * j;
    q_part[o] = bitcast<u32>(dw.x);
    q_part[o + 1u] = bitcast<u32>(dw.y);
    q_part[ob] = bitcast<u32>(db.x);
    q_part[ob + 1u] = bitcast<u32>(db.y);
}

@group(0) @binding(3) var<storage, read> z_part: array<u32>;

@compute @workgroup_size(256)
fn layernorm_dparams_final(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let cw = d.c / 2u;
    if (j >= cw) { return; }
    let w0 = p_dweight[j];
    let b0 = p_dbias[j];
    var dw = vec2<f32>(lo(w0), hi(w0));
    var db = vec2<f32>(lo(b0), hi(b0));
    for (var k = 0u; k < d.chunks; k++) {
        let o = k * d.c + 2u * j;
        let ob = (d.chunks + k) * d.c + 2u * j;
        dw += vec2<f32>(bitcast<f32>(z_part[o]), bitcast<f32>(z_part[o + 1u]));
        db += vec2<f32>(bitcast<f32>(z_part[ob]), bitcast<f32>(z_part[ob + 1u]));
    }
    p_dweight[j] = pack2(dw.x, dw.y);
    p_dbias[j] = pack2(db.x, db.y);
}
