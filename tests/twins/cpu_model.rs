//! The whole model on the host, built from the CPU twins in the same order as the GPU passes:
//! the reference the GPU model's losses and gradients are tested against. Slow and plain.
//!
//! One source for both precisions: every tensor the device stores passes through
//! [`Precision::round`] right after the twin that writes it (f32: untouched; bf16: rounded to
//! nearest even, as the packed kernels store). So under bf16 each twin computes in f32 on
//! bf16 values and its output is rounded once, which is the packed twins' specification
//! (`packed`) chained: activations, parameter copies and gradients (the `+=` into
//! a bf16 gradient rounded after each kernel) are bf16; layernorm mean/rstd, the logits, their
//! gradient and the per-token losses stay f32, as in the bf16 GPU model.

use crate::twins as cpu;
use triaxis::model::{GptConfig, Micro, Precision};
use triaxis::params::Layout;
use triaxis::step::{StepStats, TrainConfig};
use triaxis::Result;

/// One microbatch through every block in f32: returns per-token losses and adds the parameter
/// gradients (scaled by `dloss` per token) into `grads`. `params`/`grads` use `layout`
/// (the full model's layout, `cfg.layout(&cfg.blocks())`).
#[allow(clippy::too_many_arguments)]
pub fn forward_backward(
    cfg: &GptConfig,
    layout: &Layout,
    params: &[f32],
    grads: &mut [f32],
    tokens: &[u32],
    targets: &[u32],
    micro: Micro,
    dloss: f32,
) -> Result<Vec<f32>> {
    forward_backward_in(
        Precision::F32,
        cfg,
        layout,
        params,
        grads,
        tokens,
        targets,
        micro,
        dloss,
    )
}

/// [`forward_backward`] with the stores of precision `prec`: `params` as the device holds them
/// (bf16: the master weights already rounded, [`Precision::round`]); `grads` holds values of
/// that precision and gets each tensor's `+=` rounded after every twin that adds into it.
#[allow(clippy::too_many_arguments)]
pub fn forward_backward_in(
    prec: Precision,
    cfg: &GptConfig,
    layout: &Layout,
    params: &[f32],
    grads: &mut [f32],
    tokens: &[u32],
    targets: &[u32],
    micro: Micro,
    dloss: f32,
) -> Result<Vec<f32>> {
    cfg.validate()?;
    micro.validate(cfg)?;
    let (b, t) = (micro.b, micro.t);
    let (n, c, nh, v) = (b * t, cfg.channels, cfg.heads, cfg.vocab);
    let p = |name: &str| layout.slice(params, name);
    let z = |len: usize| vec![0.0f32; len];
    // the store of a bf16 tensor (f32: nothing)
    let r = |x: &mut [f32]| prec.round(x);

    // ---- forward, keeping what backward needs ----
    let mut resid = vec![z(n * c)];
    cpu::encoder_forward(&mut resid[0], tokens, p("wte")?, p("wpe")?, b, t, c);
    r(&mut resid[0]);
    struct Saved {
        ln1: Vec<f32>,
        m1: Vec<f32>,
        r1: Vec<f32>,
        qkv: Vec<f32>,
        atty: Vec<f32>,
        att: Vec<f32>,
        x2: Vec<f32>,
        ln2: Vec<f32>,
        m2: Vec<f32>,
        r2: Vec<f32>,
        fch: Vec<f32>,
        fchg: Vec<f32>,
    }
    let mut saved = Vec::new();
    for l in 0..cfg.layers {
        let w = |x: &str| p(&format!("h{l}.{x}"));
        let x = resid[l].clone();
        let (mut ln1, mut m1, mut r1) = (z(n * c), z(n), z(n));
        cpu::layernorm_forward(&mut ln1, &mut m1, &mut r1, &x, w("ln1w")?, w("ln1b")?, n, c);
        r(&mut ln1); // mean and rstd stay f32
        let mut qkv = z(n * 3 * c);
        cpu::matmul_forward(&mut qkv, &ln1, w("qkvw")?, Some(w("qkvb")?), n, c, 3 * c);
        r(&mut qkv);
        let (mut atty, mut att) = (z(n * c), z(b * nh * t * t));
        cpu::attention_forward(&mut atty, &mut att, &qkv, b, t, c, nh);
        // atty is summed from the f32 probabilities, then both are stored
        r(&mut atty);
        r(&mut att);
        let mut attproj = z(n * c);
        cpu::matmul_forward(
            &mut attproj,
            &atty,
            w("attprojw")?,
            Some(w("attprojb")?),
            n,
            c,
            c,
        );
        r(&mut attproj);
        let mut x2 = z(n * c);
        cpu::residual_forward(&mut x2, &x, &attproj);
        r(&mut x2);
        let (mut ln2, mut m2, mut r2) = (z(n * c), z(n), z(n));
        cpu::layernorm_forward(
            &mut ln2,
            &mut m2,
            &mut r2,
            &x2,
            w("ln2w")?,
            w("ln2b")?,
            n,
            c,
        );
        r(&mut ln2);
        let mut fch = z(n * 4 * c);
        cpu::matmul_forward(&mut fch, &ln2, w("fcw")?, Some(w("fcb")?), n, c, 4 * c);
        r(&mut fch);
        let mut fchg = z(n * 4 * c);
        cpu::gelu_forward(&mut fchg, &fch);
        r(&mut fchg);
        let mut fcproj = z(n * c);
        cpu::matmul_forward(
            &mut fcproj,
            &fchg,
            w("fcprojw")?,
            Some(w("fcprojb")?),
            n,
            4 * c,
            c,
        );
        r(&mut fcproj);
        let mut out = z(n * c);
        cpu::residual_forward(&mut out, &x2, &fcproj);
        r(&mut out);
        resid.push(out);
        saved.push(Saved {
            ln1,
            m1,
            r1,
            qkv,
            atty,
            att,
            x2,
            ln2,
            m2,
            r2,
            fch,
            fchg,
        });
    }
    let xl = &resid[cfg.layers];
    let (mut lnf, mut mf, mut rf) = (z(n * c), z(n), z(n));
    cpu::layernorm_forward(&mut lnf, &mut mf, &mut rf, xl, p("lnfw")?, p("lnfb")?, n, c);
    r(&mut lnf);
    // the logits, their gradient and the losses stay f32
    let mut logits = z(n * v);
    cpu::matmul_forward(&mut logits, &lnf, p("headw")?, None, n, c, v);
    let (mut losses, mut dlogits) = (z(n), z(n * v));
    cpu::crossentropy_forward_backward(&mut losses, &mut dlogits, &logits, targets, n, v, dloss);

    // ---- backward ----
    let gsum = grads;
    let mut dx = z(n * c);
    let mut dln = z(n * c);
    cpu::matmul_backward(
        &mut dln,
        layout.slice_mut(gsum, "headw")?,
        None,
        &dlogits,
        &lnf,
        p("headw")?,
        n,
        c,
        v,
    );
    r(&mut dln);
    r(layout.slice_mut(gsum, "headw")?);
    {
        let (dw, db) = two(layout, gsum, "lnfw", "lnfb")?;
        cpu::layernorm_backward(&mut dx, dw, db, &dln, xl, p("lnfw")?, &mf, &rf, n, c);
        r(dw);
        r(db);
    }
    r(&mut dx);
    for l in (0..cfg.layers).rev() {
        let s = &saved[l];
        let w = |x: &str| p(&format!("h{l}.{x}"));
        let nm = |x: &str| format!("h{l}.{x}");
        let mut dfchg = z(n * 4 * c);
        {
            let (dw, db) = two(layout, gsum, &nm("fcprojw"), &nm("fcprojb"))?;
            cpu::matmul_backward(
                &mut dfchg,
                dw,
                Some(db),
                &dx,
                &s.fchg,
                w("fcprojw")?,
                n,
                4 * c,
                c,
            );
            r(dw);
            r(db);
        }
        r(&mut dfchg);
        let mut dfch = z(n * 4 * c);
        cpu::gelu_backward(&mut dfch, &s.fch, &dfchg);
        r(&mut dfch);
        {
            let (dw, db) = two(layout, gsum, &nm("fcw"), &nm("fcb"))?;
            cpu::matmul_backward(
                &mut dln,
                dw,
                Some(db),
                &dfch,
                &s.ln2,
                w("fcw")?,
                n,
                c,
                4 * c,
            );
            r(dw);
            r(db);
        }
        r(&mut dln);
        {
            let (dw, db) = two(layout, gsum, &nm("ln2w"), &nm("ln2b"))?;
            cpu::layernorm_backward(&mut dx, dw, db, &dln, &s.x2, w("ln2w")?, &s.m2, &s.r2, n, c);
            r(dw);
            r(db);
        }
        r(&mut dx);
        let mut datty = z(n * c);
        {
            let (dw, db) = two(layout, gsum, &nm("attprojw"), &nm("attprojb"))?;
            cpu::matmul_backward(
                &mut datty,
                dw,
                Some(db),
                &dx,
                &s.atty,
                w("attprojw")?,
                n,
                c,
                c,
            );
            r(dw);
            r(db);
        }
        r(&mut datty);
        let mut dqkv = z(n * 3 * c);
        // the probabilities' gradient stays f32 inside the kernel
        cpu::attention_backward(&mut dqkv, &datty, &s.qkv, &s.att, b, t, c, nh);
        r(&mut dqkv);
        {
            let (dw, db) = two(layout, gsum, &nm("qkvw"), &nm("qkvb"))?;
            cpu::matmul_backward(
                &mut dln,
                dw,
                Some(db),
                &dqkv,
                &s.ln1,
                w("qkvw")?,
                n,
                c,
                3 * c,
            );
            r(dw);
            r(db);
        }
        r(&mut dln);
        {
            let (dw, db) = two(layout, gsum, &nm("ln1w"), &nm("ln1b"))?;
            cpu::layernorm_backward(
                &mut dx,
                dw,
                db,
                &dln,
                &resid[l],
                w("ln1w")?,
                &s.m1,
                &s.r1,
                n,
                c,
            );
            r(dw);
            r(db);
        }
        r(&mut dx);
    }
    {
        let (dwte, dwpe) = two(layout, gsum, "wte", "wpe")?;
        cpu::encoder_backward(dwte, dwpe, &dx, tokens, b, t, c);
        r(dwte);
        r(dwpe);
    }
    Ok(losses)
}

/// Two disjoint mutable tensor slices of one flat buffer.
fn two<'a>(
    layout: &Layout,
    flat: &'a mut [f32],
    a: &str,
    b: &str,
) -> Result<(&'a mut [f32], &'a mut [f32])> {
    let (ta, tb) = (layout.get(a)?.clone(), layout.get(b)?.clone());
    assert!(
        ta.offset + ta.len <= tb.offset || tb.offset + tb.len <= ta.offset,
        "overlapping tensors"
    );
    if ta.offset < tb.offset {
        let (lo, hi) = flat.split_at_mut(tb.offset);
        Ok((&mut lo[ta.offset..ta.offset + ta.len], &mut hi[..tb.len]))
    } else {
        let (lo, hi) = flat.split_at_mut(ta.offset);
        Ok((&mut hi[..ta.len], &mut lo[tb.offset..tb.offset + tb.len]))
    }
}

/// The CPU twin of `Trainer::step` on host vectors (the full model's layout). Returns the
/// step's mean loss and the gradient norm.
pub fn cpu_step(
    cfg: &TrainConfig,
    params: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    batches: &[(Vec<u32>, Vec<u32>)],
    s: usize,
) -> Result<StepStats> {
    cpu_step_in(Precision::F32, cfg, params, m, v, batches, s)
}

/// The CPU twin of one step in precision `prec` (the full model's layout): `params` are the
/// f32 parameters (bf16: the f32 master weights), `m`, `v` the f32 moments. The forward and
/// backward see the parameters as stored (`Precision::round`: bf16 rounded from the
/// masters), each microbatch's gradients are added into the stored gradients (bf16: rounded
/// after every kernel's `+=`, [`forward_backward_in`]), then the global norm (f64)
/// and AdamW update the f32 parameters and moments from the stored gradients; the next step's
/// bf16 copy is rounded from the new masters, as the packed AdamW writes it. Under f32 every
/// rounding is the identity: [`cpu_step`]'s bits.
pub fn cpu_step_in(
    prec: Precision,
    cfg: &TrainConfig,
    params: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    batches: &[(Vec<u32>, Vec<u32>)],
    s: usize,
) -> Result<StepStats> {
    let layout = cfg.model.layout(&cfg.model.blocks());
    let dloss = 1.0 / cfg.tokens_per_step() as f32;
    let mut stored = params.to_vec();
    prec.round(&mut stored);
    let mut grads = vec![0.0; layout.total];
    let mut loss = 0.0f64;
    for (x, y) in batches {
        let l = forward_backward_in(
            prec, &cfg.model, &layout, &stored, &mut grads, x, y, cfg.micro, dloss,
        )?;
        loss += l.iter().map(|&x| x as f64).sum::<f64>();
    }
    let h = cfg.adam_at(s);
    let norm = cpu::grad_norm(&grads);
    let decay = layout.decay_ranges();
    let scale = h.clip_scale(norm);
    cpu::adamw(params, &grads, m, v, &h, scale, &decay);
    Ok(StepStats {
        loss: (loss / cfg.tokens_per_step() as f64) as f32,
        grad_norm: norm,
        lr: h.lr,
    })
}
