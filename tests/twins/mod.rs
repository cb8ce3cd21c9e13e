//! Plain-Rust twins of every kernel: the specification the kernels are tested against. Naive
//! loops, never optimised. `packed` holds the bf16 twins, `cpu_model` the whole model and one
//! training step on the CPU.
//!
//! Argument order follows llm.c: outputs, inputs, dims. Gradients are prefixed `d`.
//! Accumulation rule: parameter gradients accumulate (`+=`), activation gradients assign (`=`),
//! except `layernorm_backward`'s `dinp`, which adds into the residual stream's gradient
//! (the residual connection's backward is the identity, so the block's backward updates one
//! residual-gradient buffer in place).
//!
//! Shapes: `n` rows (B·T tokens), `c` channels, `oc` output channels, `nh` heads, `v` vocabulary.

// each test binary uses the twins of its own kernels
#![allow(dead_code, unused_imports)]

/// GELU, tanh approximation (GPT-2).
pub const GELU_SCALE: f32 = 0.797_884_6; // sqrt(2/pi)
pub const LN_EPS: f32 = 1e-5;

pub mod cpu_model;
pub mod packed;
pub use cpu_model::{cpu_step, cpu_step_in};
pub use triaxis::cpu::{pack_bf16, round_bf16, unpack_bf16, AdamW};

/// `out[b,t,:]` = `wte[tokens[b,t],:]` + `wpe[t,:]`        out `[B,T,C]`, wte `[V,C]`, wpe `[maxT,C]`
pub fn encoder_forward(
    out: &mut [f32],
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    b: usize,
    t: usize,
    c: usize,
) {
    for bt in 0..b * t {
        let tok = tokens[bt] as usize;
        let pos = bt % t;
        for i in 0..c {
            out[bt * c + i] = wte[tok * c + i] + wpe[pos * c + i];
        }
    }
}

/// `dwte[tok]` += `dout[b,t]`, `dwpe[t]` += `dout[b,t]`
pub fn encoder_backward(
    dwte: &mut [f32],
    dwpe: &mut [f32],
    dout: &[f32],
    tokens: &[u32],
    b: usize,
    t: usize,
    c: usize,
) {
    for bt in 0..b * t {
        let tok = tokens[bt] as usize;
        let pos = bt % t;
        for i in 0..c {
            dwte[tok * c + i] += dout[bt * c + i];
            dwpe[pos * c + i] += dout[bt * c + i];
        }
    }
}

/// out = (inp - mean) * rstd * weight + bias per row; also stores `mean[n]`, `rstd[n]`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    out: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    n: usize,
    c: usize,
) {
    for r in 0..n {
        let x = &inp[r * c..(r + 1) * c];
        let m = x.iter().sum::<f32>() / c as f32;
        let var = x.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / c as f32;
        let s = 1.0 / (var + LN_EPS).sqrt();
        for i in 0..c {
            out[r * c + i] = (x[i] - m) * s * weight[i] + bias[i];
        }
        mean[r] = m;
        rstd[r] = s;
    }
}

/// dinp += ∂/∂inp, dweight += ∂/∂weight, dbias += ∂/∂bias.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    dinp: &mut [f32],
    dweight: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    mean: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    for r in 0..n {
        let (m, s) = (mean[r], rstd[r]);
        let mut dnorm_mean = 0.0;
        let mut dnorm_norm_mean = 0.0;
        for i in 0..c {
            let norm = (inp[r * c + i] - m) * s;
            let dnorm = weight[i] * dout[r * c + i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= c as f32;
        dnorm_norm_mean /= c as f32;
        for i in 0..c {
            let norm = (inp[r * c + i] - m) * s;
            let dnorm = weight[i] * dout[r * c + i];
            dbias[i] += dout[r * c + i];
            dweight[i] += norm * dout[r * c + i];
            dinp[r * c + i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

/// `out[n,oc]` = `inp[n,c]` · `weight[oc,c]ᵀ` + `bias[oc]`
pub fn matmul_forward(
    out: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    c: usize,
    oc: usize,
) {
    for r in 0..n {
        for o in 0..oc {
            let mut acc = bias.map_or(0.0, |b| b[o]);
            for i in 0..c {
                acc += inp[r * c + i] * weight[o * c + i];
            }
            out[r * oc + o] = acc;
        }
    }
}

/// `dinp[n,c]` = `dout[n,oc]` · `weight[oc,c]`;  `dweight[oc,c]` += doutᵀ · inp;  `dbias[oc]` += Σ_rows dout.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    dinp: &mut [f32],
    dweight: &mut [f32],
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    n: usize,
    c: usize,
    oc: usize,
) {
    for r in 0..n {
        for i in 0..c {
            let mut acc = 0.0;
            for o in 0..oc {
                acc += dout[r * oc + o] * weight[o * c + i];
            }
            dinp[r * c + i] = acc;
        }
    }
    for o in 0..oc {
        for i in 0..c {
            let mut acc = 0.0;
            for r in 0..n {
                acc += dout[r * oc + o] * inp[r * c + i];
            }
            dweight[o * c + i] += acc;
        }
    }
    if let Some(db) = dbias {
        for o in 0..oc {
            db[o] += (0..n).map(|r| dout[r * oc + o]).sum::<f32>();
        }
    }
}

/// Causal multi-head attention. qkv `[B,T,3C]` holds q | k | v, each head a contiguous hs = C/NH
/// slice. att `[B,NH,T,T]` keeps the softmax (zero above the diagonal); out `[B,T,C]`.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward(
    out: &mut [f32],
    att: &mut [f32],
    qkv: &[f32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) {
    let hs = c / nh;
    let scale = 1.0 / (hs as f32).sqrt();
    for bi in 0..b {
        for h in 0..nh {
            for ti in 0..t {
                let q = &qkv[(bi * t + ti) * 3 * c + h * hs..][..hs];
                let row = &mut att[((bi * nh + h) * t + ti) * t..][..t];
                let mut max = f32::NEG_INFINITY;
                for t2 in 0..=ti {
                    let k = &qkv[(bi * t + t2) * 3 * c + c + h * hs..][..hs];
                    let s = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
                    row[t2] = s;
                    max = max.max(s);
                }
                let mut sum = 0.0;
                for a in &mut row[..=ti] {
                    *a = (*a - max).exp();
                    sum += *a;
                }
                for (t2, a) in row.iter_mut().enumerate() {
                    *a = if t2 <= ti { *a / sum } else { 0.0 };
                }
                for i in 0..hs {
                    let mut acc = 0.0;
                    for t2 in 0..=ti {
                        acc += row[t2] * qkv[(bi * t + t2) * 3 * c + 2 * c + h * hs + i];
                    }
                    out[(bi * t + ti) * c + h * hs + i] = acc;
                }
            }
        }
    }
}

/// dqkv `[B,T,3C]` = ∂/∂qkv (assigned), from dout `[B,T,C]` and the forward's att.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    dqkv: &mut [f32],
    dout: &[f32],
    qkv: &[f32],
    att: &[f32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) {
    let hs = c / nh;
    let scale = 1.0 / (hs as f32).sqrt();
    dqkv.iter_mut().for_each(|x| *x = 0.0);
    for bi in 0..b {
        for h in 0..nh {
            for ti in 0..t {
                let row = &att[((bi * nh + h) * t + ti) * t..][..t];
                let dy = &dout[(bi * t + ti) * c + h * hs..][..hs];
                // datt[t2] = dy · v[t2];  dv[t2] += att[t2] dy
                let mut datt = vec![0.0f32; ti + 1];
                for t2 in 0..=ti {
                    let vo = (bi * t + t2) * 3 * c + 2 * c + h * hs;
                    for i in 0..hs {
                        datt[t2] += dy[i] * qkv[vo + i];
                        dqkv[vo + i] += row[t2] * dy[i];
                    }
                }
                // softmax backward: dpre = att ⊙ (datt − Σ att·datt)
                let dot: f32 = (0..=ti).map(|j| row[j] * datt[j]).sum();
                for t2 in 0..=ti {
                    let dpre = row[t2] * (datt[t2] - dot) * scale;
                    let qo = (bi * t + ti) * 3 * c + h * hs;
                    let ko = (bi * t + t2) * 3 * c + c + h * hs;
                    for i in 0..hs {
                        dqkv[qo + i] += dpre * qkv[ko + i];
                        dqkv[ko + i] += dpre * qkv[qo + i];
                    }
                }
            }
        }
    }
}

pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (GELU_SCALE * (x + 0.044715 * x * x * x)).tanh())
}

pub fn gelu_forward(out: &mut [f32], inp: &[f32]) {
    for (o, &x) in out.iter_mut().zip(inp) {
        *o = gelu(x);
    }
}

/// dinp = gelu'(inp) · dout (assigned).
pub fn gelu_backward(dinp: &mut [f32], inp: &[f32], dout: &[f32]) {
    for i in 0..inp.len() {
        let x = inp[i];
        let u = GELU_SCALE * (x + 0.044715 * x * x * x);
        let th = u.tanh();
        let sech2 = 1.0 - th * th;
        let du = GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] = (0.5 * (1.0 + th) + 0.5 * x * sech2 * du) * dout[i];
    }
}

/// out = a + b
pub fn residual_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    for i in 0..out.len() {
        out[i] = a[i] + b[i];
    }
}

pub fn fill(out: &mut [f32], value: f32) {
    out.iter_mut().for_each(|x| *x = value);
}

/// out *= s
pub fn scale(out: &mut [f32], s: f32) {
    out.iter_mut().for_each(|x| *x *= s);
}

/// out += a
pub fn add(out: &mut [f32], a: &[f32]) {
    for (o, x) in out.iter_mut().zip(a) {
        *o += x;
    }
}

/// Fused softmax + cross-entropy over rows of logits `[n,v]`: `losses[r]` = −log `p[target]`,
/// dlogits = (p − onehot(target)) · dloss (assigned). `dloss` is ∂L/∂loss_r, e.g. 1/(B·T).
pub fn crossentropy_forward_backward(
    losses: &mut [f32],
    dlogits: &mut [f32],
    logits: &[f32],
    targets: &[u32],
    n: usize,
    v: usize,
    dloss: f32,
) {
    for r in 0..n {
        let row = &logits[r * v..(r + 1) * v];
        let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|x| (x - max).exp()).sum();
        let tgt = targets[r] as usize;
        losses[r] = -(row[tgt] - max - sum.ln());
        for j in 0..v {
            let p = (row[j] - max).exp() / sum;
            dlogits[r * v + j] = (p - if j == tgt { 1.0 } else { 0.0 }) * dloss;
        }
    }
}

/// ‖g‖₂ over a gradient range (accumulated in f64 here; the GPU uses fixed-order f32 partials).
pub fn grad_norm(grads: &[f32]) -> f32 {
    grads
        .iter()
        .map(|&g| g as f64 * g as f64)
        .sum::<f64>()
        .sqrt() as f32
}

/// One AdamW step over a range. Elements inside the ranges `decay` get weight decay (matrices
/// and embeddings); the rest (biases, layernorm gains) do not. `grad_scale` comes from clipping.
pub fn adamw(
    params: &mut [f32],
    grads: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    h: &AdamW,
    grad_scale: f32,
    decay: &[std::ops::Range<usize>],
) {
    let bc1 = 1.0 - h.beta1.powi(h.t as i32);
    let bc2 = 1.0 - h.beta2.powi(h.t as i32);
    let mut decays = vec![false; params.len()];
    for r in decay {
        decays[r.clone()].fill(true);
    }
    for i in 0..params.len() {
        let g = grads[i] * grad_scale;
        m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
        v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
        let mhat = m[i] / bc1;
        let vhat = v[i] / bc2;
        let wd = if decays[i] { h.weight_decay } else { 0.0 };
        params[i] -= h.lr * (mhat / (vhat.sqrt() + h.eps) + wd * params[i]);
    }
}
