// LayerNorm over rows: inp [n,c] → out [n,c], with mean [n] and rstd [n] (f32) kept for the
// backward. One body for both precisions behind the storage prelude (store_f32.wgsl /
// store_bf16.wgsl): out, inp, weight, bias, dinp, dout, dweight, dbias are words of the run's
// precision (a row is c / LANES words; bf16 rows are even); mean, rstd and the column partials
// are f32 words. Arithmetic is f32; each stored bf16 element is rounded once.
//
// Row passes (forward, backward dinp) run one thread per row: no barriers, the row stays in
// cache between its passes. The plain entries sum a row in element order (the CPU twin's
// order); the `…4` entries sum it in four lane-wise partials over Quads (one vector load per
// lane, ~4× faster on the software adapter) and need c % 4 == 0; the `…_q` entries (bf16 rows
// with c % 4 == 0) read Quads too but sum in element order, the plain entries' bits. Column sums (dweight, dbias)
// sum each column over the rows in row order, so the partition of columns over threads (a word,
// or a Quad) does not change their bits; they never use atomics: directly (few rows) or as
// per-chunk partials followed by a pass that adds the chunks in order.
//
//   layernorm_forward[4|_q]        (out, mean, rstd, inp | weight, bias)         thread per row
//   residual_layernorm_forward[4|_q] (out, mean, rstd, inp | weight, bias, a, b) thread per row:
//                                  inp = a + b (the residual add, stored), then layernorm_forward
//   layernorm_backward_dinp[4|_q]  (dinp | dout, inp, weight, mean, rstd)        thread per row
//   layernorm_backward_dparams     (dweight, dbias | dout, inp, mean, rstd)      thread per word of c
//   layernorm_dparams_partial[4]   (part | dout, inp, mean, rstd)   thread per (row chunk, word / Quad)
//   layernorm_dparams_final        (dweight, dbias | part)          thread per word of c
//
// part f32 [2, chunks, c] holds Σ norm·dout then Σ dout over each chunk of CHUNK rows.

struct Dims { n: u32, c: u32, chunks: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

const EPS: f32 = 1e-5; // cpu::LN_EPS
const CHUNK: u32 = 64u; // rows per partial; kernels/norm.rs relies on the same value
const WG: u32 = 256u;

fn hsum(x: vec4<f32>) -> f32 {
    return (x.x + x.y) + (x.z + x.w);
}

fn f(w: u32) -> f32 {
    return bitcast<f32>(w);
}

// ---- layernorm_forward ----
@group(0) @binding(1) var<storage, read_write> f_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> f_mean: array<u32>;
@group(0) @binding(3) var<storage, read_write> f_rstd: array<u32>;
// read_write: the fused entries store the residual sum here before normalising it
@group(0) @binding(4) var<storage, read_write> f_inp: array<u32>;
@group(0) @binding(5) var<storage, read> f_weight: array<u32>;
@group(0) @binding(6) var<storage, read> f_bias: array<u32>;

@compute @workgroup_size(256)
fn layernorm_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    layernorm_row(r);
}

// The residual operands of the fused entries.
@group(0) @binding(7) var<storage, read> r_a: array<u32>;
@group(0) @binding(8) var<storage, read> r_b: array<u32>;

@compute @workgroup_size(256)
fn residual_layernorm_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let cw = d.c / LANES;
    // residual_forward's store (elementwise.wgsl), word for word
    for (var j = r * cw; j < r * cw + cw; j++) {
        f_inp[j] = word(j, lanes(r_a[j]) + lanes(r_b[j]), d.n * d.c);
    }
    layernorm_row(r);
}

// Row r of layernorm_forward, in element order.
fn layernorm_row(r: u32) {
    let cw = d.c / LANES;
    let base = r * cw;
    var s = 0.0;
    for (var j = 0u; j < cw; j++) {
        let x = lanes(f_inp[base + j]);
        for (var l = 0u; l < LANES; l++) { s += x[l]; }
    }
    let m = s / f32(d.c);
    var q = 0.0;
    for (var j = 0u; j < cw; j++) {
        let x = lanes(f_inp[base + j]);
        for (var l = 0u; l < LANES; l++) {
            let a = x[l] - m;
            q += a * a;
        }
    }
    let rs = 1.0 / sqrt(q / f32(d.c) + EPS);
    for (var j = 0u; j < cw; j++) {
        let x = lanes(f_inp[base + j]);
        f_out[base + j] = pack((x - m) * rs * lanes(f_weight[j]) + lanes(f_bias[j]));
    }
    f_mean[r] = bitcast<u32>(m);
    f_rstd[r] = bitcast<u32>(rs);
}

@group(0) @binding(1) var<storage, read_write> f4_out: array<Quad>;
@group(0) @binding(4) var<storage, read_write> f4_inp: array<Quad>;
@group(0) @binding(5) var<storage, read> f4_weight: array<Quad>;
@group(0) @binding(6) var<storage, read> f4_bias: array<Quad>;

@compute @workgroup_size(256)
fn layernorm_forward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    layernorm_row_quads(r, false);
}

@group(0) @binding(7) var<storage, read> r4_a: array<Quad>;
@group(0) @binding(8) var<storage, read> r4_b: array<Quad>;

@compute @workgroup_size(256)
fn residual_layernorm_forward4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    residual_quads(r);
    layernorm_row_quads(r, false);
}

// ---- the `…_q` row entries (c % 4 == 0, used under bf16): the plain entries' sums in element
//      order, each element read from a Quad (four elements in one load instead of two words) ----

@compute @workgroup_size(256)
fn layernorm_forward_q(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    layernorm_row_quads(r, true);
}

@compute @workgroup_size(256)
fn residual_layernorm_forward_q(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    residual_quads(r);
    layernorm_row_quads(r, true);
}

// residual_forward's store (elementwise.wgsl) of row r, a Quad at a time: inp = a + b.
fn residual_quads(r: u32) {
    let c4 = d.c / 4u;
    for (var i = r * c4; i < r * c4 + c4; i++) {
        f4_inp[i] = quad_pack(quad(r4_a[i]) + quad(r4_b[i]));
    }
}

// acc + x: lane-wise (four partials), or `ordered`, x's elements added in order into acc.x
// (the plain entries' element order).
fn quad_sum(acc: vec4<f32>, x: vec4<f32>, ordered: bool) -> vec4<f32> {
    if (ordered) {
        var s = acc.x;
        s += x.x;
        s += x.y;
        s += x.z;
        s += x.w;
        return vec4<f32>(s, 0.0, 0.0, 0.0);
    }
    return acc + x;
}

// The total of a quad_sum accumulator.
fn quad_total(acc: vec4<f32>, ordered: bool) -> f32 {
    if (ordered) { return acc.x; }
    return hsum(acc);
}

// Row r of layernorm_forward over Quads: sums in four lane-wise partials, or in element order.
fn layernorm_row_quads(r: u32, ordered: bool) {
    let c4 = d.c / 4u;
    let base = r * c4;
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) { s = quad_sum(s, quad(f4_inp[base + i]), ordered); }
    let m = quad_total(s, ordered) / f32(d.c);
    var q = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) {
        let x = quad(f4_inp[base + i]) - m;
        q = quad_sum(q, x * x, ordered);
    }
    let rs = 1.0 / sqrt(quad_total(q, ordered) / f32(d.c) + EPS);
    for (var i = 0u; i < c4; i++) {
        let y = (quad(f4_inp[base + i]) - m) * rs * quad(f4_weight[i]) + quad(f4_bias[i]);
        f4_out[base + i] = quad_pack(y);
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
    let cw = d.c / LANES;
    let base = r * cw;
    let m = f(b_mean[r]);
    let s = f(b_rstd[r]);
    var dmean = 0.0;
    var dnmean = 0.0;
    for (var j = 0u; j < cw; j++) {
        let x = lanes(b_inp[base + j]);
        let dy = lanes(b_dout[base + j]);
        let w = lanes(b_weight[j]);
        for (var l = 0u; l < LANES; l++) {
            let norm = (x[l] - m) * s;
            let dnorm = w[l] * dy[l];
            dmean += dnorm;
            dnmean += dnorm * norm;
        }
    }
    dmean = dmean / f32(d.c);
    dnmean = dnmean / f32(d.c);
    for (var j = 0u; j < cw; j++) {
        let norm = (lanes(b_inp[base + j]) - m) * s;
        let dnorm = lanes(b_weight[j]) * lanes(b_dout[base + j]);
        b_dinp[base + j] = pack(lanes(b_dinp[base + j]) + (dnorm - dmean - norm * dnmean) * s);
    }
}

@group(0) @binding(1) var<storage, read_write> b4_dinp: array<Quad>;
@group(0) @binding(2) var<storage, read> b4_dout: array<Quad>;
@group(0) @binding(3) var<storage, read> b4_inp: array<Quad>;
@group(0) @binding(4) var<storage, read> b4_weight: array<Quad>;

@compute @workgroup_size(256)
fn layernorm_backward_dinp4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    dinp_row_quads(r, false);
}

// layernorm_backward_dinp over Quads, summed in element order (c % 4 == 0, under bf16).
@compute @workgroup_size(256)
fn layernorm_backward_dinp_q(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    dinp_row_quads(r, true);
}

// Row r of layernorm_backward_dinp over Quads: sums in four lane-wise partials, or in element
// order (quad_sum).
fn dinp_row_quads(r: u32, ordered: bool) {
    let c4 = d.c / 4u;
    let base = r * c4;
    let m = f(b_mean[r]);
    let s = f(b_rstd[r]);
    var dm = vec4<f32>(0.0);
    var dn = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) {
        let norm = (quad(b4_inp[base + i]) - m) * s;
        let dnorm = quad(b4_weight[i]) * quad(b4_dout[base + i]);
        dm = quad_sum(dm, dnorm, ordered);
        dn = quad_sum(dn, dnorm * norm, ordered);
    }
    let dmean = quad_total(dm, ordered) / f32(d.c);
    let dnmean = quad_total(dn, ordered) / f32(d.c);
    for (var i = 0u; i < c4; i++) {
        let norm = (quad(b4_inp[base + i]) - m) * s;
        let dnorm = quad(b4_weight[i]) * quad(b4_dout[base + i]);
        let old = quad(b4_dinp[base + i]);
        b4_dinp[base + i] = quad_pack(old + (dnorm - dmean - norm * dnmean) * s);
    }
}

// ---- column sums: dweight[i] += Σ_r norm[r,i]·dout[r,i],  dbias[i] += Σ_r dout[r,i] ----
@group(0) @binding(1) var<storage, read_write> p_dweight: array<u32>;
@group(0) @binding(2) var<storage, read_write> p_dbias: array<u32>;
@group(0) @binding(3) var<storage, read> p_dout: array<u32>;
@group(0) @binding(4) var<storage, read> p_inp: array<u32>;
@group(0) @binding(5) var<storage, read> p_mean: array<u32>;
@group(0) @binding(6) var<storage, read> p_rstd: array<u32>;

// Few rows: the columns of word j walk all rows in order, from the old values.
@compute @workgroup_size(256)
fn layernorm_backward_dparams(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let cw = d.c / LANES;
    if (j >= cw) { return; }
    var dw = lanes(p_dweight[j]);
    var db = lanes(p_dbias[j]);
    for (var r = 0u; r < d.n; r++) {
        let y = lanes(p_dout[r * cw + j]);
        let norm = (lanes(p_inp[r * cw + j]) - f(p_mean[r])) * f(p_rstd[r]);
        db += y;
        dw += norm * y;
    }
    p_dweight[j] = pack(dw);
    p_dbias[j] = pack(db);
}

// Many rows: chunk k of CHUNK rows → part[0,k,i] = Σ norm·dout, part[1,k,i] = Σ dout.
@group(0) @binding(1) var<storage, read_write> q_part: array<u32>;
@group(0) @binding(2) var<storage, read> q_dout: array<u32>;
@group(0) @binding(3) var<storage, read> q_inp: array<u32>;
@group(0) @binding(4) var<storage, read> q_mean: array<u32>;
@group(0) @binding(5) var<storage, read> q_rstd: array<u32>;

@compute @workgroup_size(256)
fn layernorm_dparams_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    let cw = d.c / LANES;
    if (e >= d.chunks * cw) { return; }
    let k = e / cw;
    let j = e - k * cw;
    var dw = vec2<f32>(0.0);
    var db = vec2<f32>(0.0);
    for (var r = k * CHUNK; r < min(d.n, (k + 1u) * CHUNK); r++) {
        let y = lanes(q_dout[r * cw + j]);
        let norm = (lanes(q_inp[r * cw + j]) - f(q_mean[r])) * f(q_rstd[r]);
        db += y;
        dw += norm * y;
    }
    let o = k * d.c + LANES * j;
    let ob = (d.chunks + k) * d.c + LANES * j;
    for (var l = 0u; l < LANES; l++) {
        q_part[o + l] = bitcast<u32>(dw[l]);
        q_part[ob + l] = bitcast<u32>(db[l]);
    }
}

@group(0) @binding(1) var<storage, read_write> q4_part: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> q4_dout: array<Quad>;
@group(0) @binding(3) var<storage, read> q4_inp: array<Quad>;

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
        let dy = quad(q4_dout[r * c4 + i]);
        let norm = (quad(q4_inp[r * c4 + i]) - f(q_mean[r])) * f(q_rstd[r]);
        db += dy;
        dw += norm * dy;
    }
    q4_part[e] = bitcast<vec4<u32>>(dw);
    q4_part[d.chunks * c4 + e] = bitcast<vec4<u32>>(db);
}

@group(0) @binding(3) var<storage, read> z_part: array<u32>;

@compute @workgroup_size(256)
fn layernorm_dparams_final(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let cw = d.c / LANES;
    if (j >= cw) { return; }
    var dw = lanes(p_dweight[j]);
    var db = lanes(p_dbias[j]);
    for (var k = 0u; k < d.chunks; k++) {
        let o = k * d.c + LANES * j;
        let ob = (d.chunks + k) * d.c + LANES * j;
        var tw = vec2<f32>(0.0);
        var tb = vec2<f32>(0.0);
        for (var l = 0u; l < LANES; l++) {
            tw[l] = f(z_part[o + l]);
            tb[l] = f(z_part[ob + l]);
        }
        dw += tw;
        db += tb;
    }
    p_dweight[j] = pack(dw);
    p_dbias[j] = pack(db);
}

// ---- the `_t` entries: the row passes and the partials with their tensors read from flat
//      texture copies (kernels/texels.rs) where the buffer entries read storage; c % 4 == 0.
//      The same sums in the same order as the entries each precision takes otherwise (lane-wise
//      partials under f32, the `…4` entries; element order under bf16, the `…_q` ones), so the
//      same bits. mean and rstd are flat f32 copies (n % 4 == 0). ----

// Element r of a flat copy of f32 words.
fn flat_f32(t: texture_2d<u32>, r: u32) -> f32 {
    return bitcast<f32>(texel(t, r / 4u)[r % 4u]);
}

// Quad q of the layernorm's input: a copy of it, or under `sum` the residual add of two copies
// as the fused entries store it (rounded to the run's precision once).
fn ln_in(x: texture_2d<u32>, y: texture_2d<u32>, sum: bool, q: u32) -> vec4<f32> {
    if (sum) {
        return quad(quad_pack(quad(flat(x, q)) + quad(flat(y, q))));
    }
    return quad(flat(x, q));
}

// layernorm_row_quads of row r, its input from ln_in, weight and bias from copies.
fn layernorm_row_texels(r: u32, x: texture_2d<u32>, y: texture_2d<u32>, sum: bool, w: texture_2d<u32>, b: texture_2d<u32>) {
    let ordered = LANES == 2u;
    let c4 = d.c / 4u;
    let base = r * c4;
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) { s = quad_sum(s, ln_in(x, y, sum, base + i), ordered); }
    let m = quad_total(s, ordered) / f32(d.c);
    var q = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) {
        let v = ln_in(x, y, sum, base + i) - m;
        q = quad_sum(q, v * v, ordered);
    }
    let rs = 1.0 / sqrt(quad_total(q, ordered) / f32(d.c) + EPS);
    for (var i = 0u; i < c4; i++) {
        let v = (ln_in(x, y, sum, base + i) - m) * rs * quad(flat(w, i)) + quad(flat(b, i));
        f4_out[base + i] = quad_pack(v);
    }
    f_mean[r] = bitcast<u32>(m);
    f_rstd[r] = bitcast<u32>(rs);
}

@group(0) @binding(4) var t_inp: texture_2d<u32>;
@group(0) @binding(5) var t_weight: texture_2d<u32>;
@group(0) @binding(6) var t_bias: texture_2d<u32>;

// (out, mean, rstd, inp | weight, bias): layernorm_forward4 / _q
@compute @workgroup_size(256)
fn layernorm_forward_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    layernorm_row_texels(r, t_inp, t_inp, false, t_weight, t_bias);
}

@group(0) @binding(7) var t_a: texture_2d<u32>;
@group(0) @binding(8) var t_b: texture_2d<u32>;

// (out, mean, rstd, inp | weight, bias, a, b) with inp a buffer: residual_layernorm_forward4 / _q
@compute @workgroup_size(256)
fn residual_layernorm_forward_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let c4 = d.c / 4u;
    for (var i = r * c4; i < r * c4 + c4; i++) {
        f4_inp[i] = quad_pack(ln_in(t_a, t_b, true, i));
    }
    layernorm_row_texels(r, t_a, t_b, true, t_weight, t_bias);
}

@group(0) @binding(2) var t_dout: texture_2d<u32>;
@group(0) @binding(3) var tb_inp: texture_2d<u32>;
@group(0) @binding(4) var tb_weight: texture_2d<u32>;
@group(0) @binding(5) var t_mean: texture_2d<u32>;
@group(0) @binding(6) var t_rstd: texture_2d<u32>;
@group(0) @binding(7) var t_dinp: texture_2d<u32>;

// (dinp | dout, inp, weight, mean, rstd, dinp's copy): layernorm_backward_dinp4 / _q
@compute @workgroup_size(256)
fn layernorm_backward_dinp_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * WG;
    if (r >= d.n) { return; }
    let ordered = LANES == 2u;
    let c4 = d.c / 4u;
    let base = r * c4;
    let m = flat_f32(t_mean, r);
    let s = flat_f32(t_rstd, r);
    var dm = vec4<f32>(0.0);
    var dn = vec4<f32>(0.0);
    for (var i = 0u; i < c4; i++) {
        let norm = (quad(flat(tb_inp, base + i)) - m) * s;
        let dnorm = quad(flat(tb_weight, i)) * quad(flat(t_dout, base + i));
        dm = quad_sum(dm, dnorm, ordered);
        dn = quad_sum(dn, dnorm * norm, ordered);
    }
    let dmean = quad_total(dm, ordered) / f32(d.c);
    let dnmean = quad_total(dn, ordered) / f32(d.c);
    for (var i = 0u; i < c4; i++) {
        let norm = (quad(flat(tb_inp, base + i)) - m) * s;
        let dnorm = quad(flat(tb_weight, i)) * quad(flat(t_dout, base + i));
        let old = quad(flat(t_dinp, base + i));
        b4_dinp[base + i] = quad_pack(old + (dnorm - dmean - norm * dnmean) * s);
    }
}

@group(0) @binding(4) var tq_mean: texture_2d<u32>;
@group(0) @binding(5) var tq_rstd: texture_2d<u32>;

// (part | dout, inp, mean, rstd): layernorm_dparams_partial4
@compute @workgroup_size(256)
fn layernorm_dparams_partial_t(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    let c4 = d.c / 4u;
    if (e >= d.chunks * c4) { return; }
    let k = e / c4;
    let i = e - k * c4;
    var dw = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    for (var r = k * CHUNK; r < min(d.n, (k + 1u) * CHUNK); r++) {
        let dy = quad(flat(t_dout, r * c4 + i));
        let norm = (quad(flat(tb_inp, r * c4 + i)) - flat_f32(tq_mean, r)) * flat_f32(tq_rstd, r);
        db += dy;
        dw += norm * dy;
    }
    q4_part[e] = bitcast<vec4<u32>>(dw);
    q4_part[d.chunks * c4 + e] = bitcast<vec4<u32>>(db);
}
