// LayerNorm over rows: inp [n,c] → out [n,c], with mean [n] and rstd [n] kept for the backward.
// Forward and the backward's dinp pass run one thread per row (index folded over y past 65535
// groups); the backward's dweight/dbias pass runs one thread per column and walks the rows in
// order, so every column sum has a fixed order and no atomics are needed.
//
//   layernorm_forward          (out, mean, rstd | inp, weight, bias)          thread per row
//   layernorm_backward_dinp    (dinp, dweight, dbias | dout, inp, weight, mean, rstd)   row
//   layernorm_backward_dparams (same bindings)                                 thread per column

struct Dims { n: u32, c: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const EPS: f32 = 1e-5; // cpu::LN_EPS

// ---- layernorm_forward ----
@group(0) @binding(1) var<storage, read_write> f_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> f_mean: array<f32>;
@group(0) @binding(3) var<storage, read_write> f_rstd: array<f32>;
@group(0) @binding(4) var<storage, read> f_inp: array<f32>;
@group(0) @binding(5) var<storage, read> f_weight: array<f32>;
@group(0) @binding(6) var<storage, read> f_bias: array<f32>;

@compute @workgroup_size(256)
fn layernorm_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * 256u;
    if (r >= d.n) { return; }
    let c = d.c;
    let base = r * c;
    var s = 0.0;
    for (var i = 0u; i < c; i++) { s += f_inp[base + i]; }
    let m = s / f32(c);
    var var_ = 0.0;
    for (var i = 0u; i < c; i++) {
        let x = f_inp[base + i] - m;
        var_ += x * x;
    }
    let rs = 1.0 / sqrt(var_ / f32(c) + EPS);
    for (var i = 0u; i < c; i++) {
        f_out[base + i] = (f_inp[base + i] - m) * rs * f_weight[i] + f_bias[i];
    }
    f_mean[r] = m;
    f_rstd[r] = rs;
}

// ---- layernorm_backward_{dinp,dparams} ----
@group(0) @binding(1) var<storage, read_write> b_dinp: array<f32>;
@group(0) @binding(2) var<storage, read_write> b_dweight: array<f32>;
@group(0) @binding(3) var<storage, read_write> b_dbias: array<f32>;
@group(0) @binding(4) var<storage, read> b_dout: array<f32>;
@group(0) @binding(5) var<storage, read> b_inp: array<f32>;
@group(0) @binding(6) var<storage, read> b_weight: array<f32>;
@group(0) @binding(7) var<storage, read> b_mean: array<f32>;
@group(0) @binding(8) var<storage, read> b_rstd: array<f32>;

// dinp[r,:] += (dnorm − mean(dnorm) − norm·mean(dnorm·norm)) · rstd,  dnorm = weight · dout
@compute @workgroup_size(256)
fn layernorm_backward_dinp(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * 256u;
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

// dweight[i] += Σ_r norm[r,i]·dout[r,i],  dbias[i] += Σ_r dout[r,i]   (rows in order)
@compute @workgroup_size(256)
fn layernorm_backward_dparams(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let c = d.c;
    if (i >= c) { return; }
    var dw = b_dweight[i];
    var db = b_dbias[i];
    for (var r = 0u; r < d.n; r++) {
        let dy = b_dout[r * c + i];
        let norm = (b_inp[r * c + i] - b_mean[r]) * b_rstd[r];
        db += dy;
        dw += norm * dy;
    }
    b_dweight[i] = dw;
    b_dbias[i] = db;
}
