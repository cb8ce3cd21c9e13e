// LayerNorm over rows: inp [n,c] → out [n,c], with mean [n] and rstd [n] kept for the backward.
//
// Row passes (forward, backward dinp) run one thread per row: no barriers, the row stays in
// cache between its passes. The `…4` entries are the same arithmetic on vec4<f32> (one vector
// load per lane instead of four scalar ones, ~4× faster on the software adapter); they are used
// when c % 4 == 0, which keeps every row 16-byte aligned. Column sums (dweight, dbias) never use
// atomics: each column is summed over the rows in a fixed order, either directly (few rows) or
// as per-chunk partials followed by a pass that adds the chunks in order.
//
//   layernorm_forward[4]           (out, mean, rstd | inp, weight, bias)         thread per row
//   layernorm_backward_dinp[4]     (dinp | dout, inp, weight, mean, rstd)        thread per row
//   layernorm_backward_dparams     (dweight, dbias | dout, inp, mean, rstd)      thread per column
//   layernorm_dparams_partial[4]   (part | dout, inp, mean, rstd)   thread per (row chunk, column)
//   layernorm_dparams_final        (dweight, dbias | part)          thread per column
//
// part [2, chunks, c] holds Σ norm·dout then Σ dout over each chunk of CHUNK rows.

struct Dims { n: u32, c: u32, chunks: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const EPS: f32 = 1e-5; // cpu::LN_EPS
const CHUNK: u32 = 64u; // rows per partial; kernels/norm.rs relies on the same value
const WG: u32 = 256u;

fn hsum(x: vec4<f32>) -> f32 {
    return (x.x + x.y) + (x.z + x.w);
}

// ---- layernorm_forward ----
@group(0) @binding(1) var<storage, read_write> f_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> f_mean: array<f32>;
@group(0) @binding(3) var<storage, read_write> f_rstd: array<f32>;
@group(0) @binding(4) var<storage, read> f_inp: array<f32>;
@group(0) @binding(5) var<storage, read> f_weight: array<f32>;
@group(0) @binding(6) var<storage, read> f_bias: array<f32>;

@compute @workgroup_size(256)
fn layernorm_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let c = d.c;
    let base = r * c;
    var s = 0.0;
    for (var i = 0u; i < c; i++) { s += f_inp[base + i]; }
    let m = s / f32(c);
    var q = 0.0;
    for (var i = 0u; i < c; i++) {
        let x = f_inp[base + i] - m;
        q += x * x;
    }
    let rs = 1.0 / sqrt(q / f32(c) + EPS);
    for (var i = 0u; i < c; i++) {
        f_out[base + i] = (f_inp[base + i] - m) * rs * f_weight[i] + f_bias[i];
    }
    f_mean[r] = m;
    f_rstd[r] = rs;
}

@group(0) @binding(1) var<storage, read_write> f4_out: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> f4_inp: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> f4_weight: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> f4_bias: array<vec4<f32>>;

@compute @workgroup_size(256)
fn layernorm_forward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let c4 = d.c / 4u;
    let base = r * c4;
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) { s += f4_inp[base + i]; }
    let m = hsum(s) / f32(d.c);
    var q = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) {
        let x = f4_inp[base + i] - m;
        q += x * x;
    }
    let rs = 1.0 / sqrt(hsum(q) / f32(d.c) + EPS);
    for (var i = 0u; i < c4; i++) {
        f4_out[base + i] = (f4_inp[base + i] - m) * rs * f4_weight[i] + f4_bias[i];
    }
    f_mean[r] = m;
    f_rstd[r] = rs;
}

// ---- layernorm_backward_dinp: dinp[r,:] += (dnorm − mean(dnorm) − norm·mean(dnorm·norm))·rstd,
//      dnorm = weight · dout ----
@group(0) @binding(1) var<storage, read_write> b_dinp: array<f32>;
@group(0) @binding(2) var<storage, read> b_dout: array<f32>;
@group(0) @binding(3) var<storage, read> b_inp: array<f32>;
@group(0) @binding(4) var<storage, read> b_weight: array<f32>;
@group(0) @binding(5) var<storage, read> b_mean: array<f32>;
@group(0) @binding(6) var<storage, read> b_rstd: array<f32>;

@compute @workgroup_size(256)
fn layernorm_backward_dinp(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let c = d.c;
    let base = r * c;
    let m = b_mean[r];
    let s = b_rstd[r];
    var dmean = 0.0;
    var dnmean = 0.0;
    for (var i = 0u; i < c; i++) {
        let norm = (b_inp[base + i] - m) * s;
        let dnorm = b_weight[i] * b_dout[base + i];
        dmean += dnorm;
        dnmean += dnorm * norm;
    }
    dmean = dmean / f32(c);
    dnmean = dnmean / f32(c);
    for (var i = 0u; i < c; i++) {
        let norm = (b_inp[base + i] - m) * s;
        let dnorm = b_weight[i] * b_dout[base + i];
        b_dinp[base + i] += (dnorm - dmean - norm * dnmean) * s;
    }
}

@group(0) @binding(1) var<storage, read_write> b4_dinp: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b4_dout: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> b4_inp: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> b4_weight: array<vec4<f32>>;

@compute @workgroup_size(256)
fn layernorm_backward_dinp4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let c4 = d.c / 4u;
    let base = r * c4;
    let m = b_mean[r];
    let s = b_rstd[r];
    var dm = vec4<f32>(0.0);
    var dn = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) {
        let norm = (b4_inp[base + i] - m) * s;
        let dnorm = b4_weight[i] * b4_dout[base + i];
        dm += dnorm;
        dn += dnorm * norm;
    }
    let dmean = hsum(dm) / f32(d.c);
    let dnmean = hsum(dn) / f32(d.c);
    for (var i = 0u; i < c4; i++) {
        let norm = (b4_inp[base + i] - m) * s;
        let dnorm = b4_weight[i] * b4_dout[base + i];
        b4_dinp[base + i] += (dnorm - dmean - norm * dnmean) * s;
    }
}

// ---- column sums: dweight[i] += Σ_r norm[r,i]·dout[r,i],  dbias[i] += Σ_r dout[r,i] ----
@group(0) @binding(1) var<storage, read_write> p_dweight: array<f32>;
@group(0) @binding(2) var<storage, read_write> p_dbias: array<f32>;
@group(0) @binding(3) var<storage, read> p_dout: array<f32>;
@group(0) @binding(4) var<storage, read> p_inp: array<f32>;
@group(0) @binding(5) var<storage, read> p_mean: array<f32>;
@group(0) @binding(6) var<storage, read> p_rstd: array<f32>;

// Few rows: each column walks all rows in order.
@compute @workgroup_size(256)
fn layernorm_backward_dparams(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    let c = d.c;
    if (i >= c) { return; }
    var dw = p_dweight[i];
    var db = p_dbias[i];
    for (var r = 0u; r < d.n; r++) {
        let dy = p_dout[r * c + i];
        let norm = (p_inp[r * c + i] - p_mean[r]) * p_rstd[r];
        db += dy;
        dw += norm * dy;
    }
    p_dweight[i] = dw;
    p_dbias[i] = db;
}

// Many rows: chunk k of CHUNK rows → part[0,k,i] = Σ norm·dout, part[1,k,i] = Σ dout.
@group(0) @binding(1) var<storage, read_write> q_part: array<f32>;
@group(0) @binding(2) var<storage, read> q_dout: array<f32>;
@group(0) @binding(3) var<storage, read> q_inp: array<f32>;
@group(0) @binding(4) var<storage, read> q_mean: array<f32>;
@group(0) @binding(5) var<storage, read> q_rstd: array<f32>;

@compute @workgroup_size(256)
fn layernorm_dparams_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    let c = d.c;
    if (e >= d.chunks * c) { return; }
    let k = e / c;
    let i = e - k * c;
    var dw = 0.0;
    var db = 0.0;
    for (var r = k * CHUNK; r < min(d.n, (k + 1u) * CHUNK); r++) {
        let dy = q_dout[r * c + i];
        let norm = (q_inp[r * c + i] - q_mean[r]) * q_rstd[r];
        db += dy;
        dw += norm * dy;
    }
    q_part[e] = dw;
    q_part[d.chunks * c + e] = db;
}

@group(0) @binding(1) var<storage, read_write> q4_part: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> q4_dout: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> q4_inp: array<vec4<f32>>;

@compute @workgroup_size(256)
fn layernorm_dparams_partial4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    let c4 = d.c / 4u;
    if (e >= d.chunks * c4) { return; }
    let k = e / c4;
    let i = e - k * c4;
    var dw = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    for (var r = k * CHUNK; r < min(d.n, (k + 1u) * CHUNK); r++) {
        let dy = q4_dout[r * c4 + i];
        let norm = (q4_inp[r * c4 + i] - q_mean[r]) * q_rstd[r];
        db += dy;
        dw += norm * dy;
    }
    q4_part[e] = dw;
    q4_part[d.chunks * c4 + e] = db;
}

@group(0) @binding(3) var<storage, read> z_part: array<f32>;

@compute @workgroup_size(256)
fn layernorm_dparams_final(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    let c = d.c;
    if (i >= c) { return; }
    var dw = p_dweight[i];
    var db = p_dbias[i];
    for (var k = 0u; k < d.chunks; k++) {
        dw += z_part[k * c + i];
        db += z_part[(d.chunks + k) * c + i];
    }
    p_dweight[i] = dw;
    p_dbias[i] = db;
}
