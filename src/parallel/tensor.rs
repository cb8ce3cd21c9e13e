//! Megatron tensor parallelism for one transformer layer: the layer's matrices are split over t
//! devices so each holds 1/t of the weights and does 1/t of the matmul and attention work, at
//! the price of 2 all-reduces of the [B·T, C] activations forward and 2 backward.
//!
//! ```text
//! rank r of t (heads [r·nh/t, (r+1)·nh/t), MLP units [r·4C/t, (r+1)·4C/t)):
//!   x ─▶ ln1 ─f─▶ qkv_r (column) ─▶ attention (nh/t heads) ─▶ attproj_r (row) ─g─▶ +x ─▶ x2
//!   x2 ─▶ ln2 ─f─▶ fc_r (column) ─▶ gelu ─▶ fcproj_r (row) ─g─▶ +x2 ─▶ out
//! f = copy_to_tp:     identity forward, all-reduce (sum) of dinp backward
//! g = reduce_from_tp: all-reduce (sum) of the partial products forward, identity backward
//! ```
//!
//! Layernorms and the row-parallel biases are replicated: every rank holds them and computes
//! identical gradients for them (their inputs are identical after each all-reduce). A
//! row-parallel bias is added once, by rank 0, before the all-reduce. Each pass is three
//! pre-built `Op` segments per rank with a host all-reduce between consecutive segments; the
//! ranks run one after another on the calling thread.
//!
//! Rank-local parameter tensors keep the one-device names (`h{l}.qkvw`, …) with local shapes:
//! qkvw [3C/t, C] (the rank's rows of q, then of k, then of v), qkvb [3C/t], attprojw [C, C/t],
//! fcw [4C/t, C], fcb [4C/t], fcprojw [C, 4C/t]; the rest full size.

use crate::collective::{self, Algo, Ledger, Opts};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::kernels::{attention as ka, elementwise as ke, matmul as km, norm as kn, Op};
use crate::model::{GptConfig, Micro};
use crate::params::{Buffers, Layout, Spec};
use crate::pipeline::simulate::Link;

/// Checks that `t` ranks can split `cfg`'s heads and MLP width evenly.
pub fn check_split(cfg: &GptConfig, t: usize) -> Result<()> {
    cfg.validate()?;
    if t == 0 {
        return Err(Error::Config(
            "tensor parallelism needs at least one rank (t = 0)".into(),
        ));
    }
    if !cfg.heads.is_multiple_of(t) {
        return Err(Error::Config(format!(
            "tensor-parallel degree {t} must divide the heads ({}): each rank takes whole heads",
            cfg.heads
        )));
    }
    if !(4 * cfg.channels).is_multiple_of(t) {
        return Err(Error::Config(format!(
            "tensor-parallel degree {t} must divide the MLP width 4C ({})",
            4 * cfg.channels
        )));
    }
    Ok(())
}

/// The rank-local parameter layout of layer `l` split over `t` ranks (same for every rank).
pub fn local_layout(cfg: &GptConfig, l: usize, t: usize) -> Result<Layout> {
    check_split(cfg, t)?;
    let (c, ct) = (cfg.channels, cfg.channels / t);
    let s = |x: &str, shape: &[usize], decay: bool| Spec {
        name: format!("h{l}.{x}"),
        shape: shape.to_vec(),
        decay,
    };
    Ok(Layout::new(&[
        s("ln1w", &[c], false),
        s("ln1b", &[c], false),
        s("qkvw", &[3 * ct, c], true),
        s("qkvb", &[3 * ct], false),
        s("attprojw", &[c, ct], true),
        s("attprojb", &[c], false),
        s("ln2w", &[c], false),
        s("ln2b", &[c], false),
        s("fcw", &[4 * ct, c], true),
        s("fcb", &[4 * ct], false),
        s("fcprojw", &[c, 4 * ct], true),
        s("fcprojb", &[c], false),
    ]))
}

/// How one tensor is split: (rows, cols) of the full row-major matrix and the rank's part.
enum Split {
    /// Replicated on every rank.
    Whole,
    /// Rows `[p·rows/3 + r·rows/(3t), …)` for each of the 3 parts q, k, v.
    Qkv,
    /// Rows `[r·rows/t, (r+1)·rows/t)` (column-parallel weight or bias).
    Rows,
    /// Columns `[r·cols/t, (r+1)·cols/t)` (row-parallel weight).
    Cols,
}

fn split_of(short: &str) -> Split {
    match short {
        "qkvw" | "qkvb" => Split::Qkv,
        "fcw" | "fcb" => Split::Rows,
        "attprojw" | "fcprojw" => Split::Cols,
        _ => Split::Whole,
    }
}

/// For each element of rank `r`'s local tensor (in local order), its index in the full tensor.
fn local_indices(split: Split, shape: &[usize], t: usize, r: usize) -> Vec<usize> {
    let rows = shape[0];
    let cols = shape.get(1).copied().unwrap_or(1);
    let row_range = |lo: usize, len: usize| (lo * cols..(lo + len) * cols).collect::<Vec<_>>();
    match split {
        Split::Whole => (0..rows * cols).collect(),
        Split::Rows => row_range(r * rows / t, rows / t),
        Split::Qkv => {
            let part = rows / 3;
            (0..3)
                .flat_map(|p| row_range(p * part + r * part / t, part / t))
                .collect()
        }
        Split::Cols => {
            let w = cols / t;
            (0..rows)
                .flat_map(|i| (0..w).map(move |j| i * cols + r * w + j))
                .collect()
        }
    }
}

/// The 12 short tensor names of a layer.
const NAMES: [&str; 12] = [
    "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
    "fcprojw", "fcprojb",
];

/// Splits layer `l`'s tensors of `flat` (laid out by `layout`, any layout holding them) into
/// `t` rank-local flat buffers laid out by [`local_layout`].
pub fn shard_layer(
    cfg: &GptConfig,
    layout: &Layout,
    flat: &[f32],
    l: usize,
    t: usize,
) -> Result<Vec<Vec<f32>>> {
    let local = local_layout(cfg, l, t)?;
    let mut out = vec![vec![0.0f32; local.total]; t];
    for x in NAMES {
        let name = format!("h{l}.{x}");
        let full = layout.slice(flat, &name)?;
        let shape = &layout.get(&name)?.shape;
        for (r, dst) in out.iter_mut().enumerate() {
            let d = local.slice_mut(dst, &name)?;
            for (k, i) in local_indices(split_of(x), shape, t, r)
                .into_iter()
                .enumerate()
            {
                d[k] = full[i];
            }
        }
    }
    Ok(out)
}

/// The inverse of [`shard_layer`]: writes the rank-local buffers (parameters or gradients) of
/// layer `l` back into `flat` (laid out by `layout`). Replicated tensors come from rank 0.
pub fn gather_layer(
    cfg: &GptConfig,
    layout: &Layout,
    flat: &mut [f32],
    l: usize,
    ranks: &[Vec<f32>],
) -> Result<()> {
    let t = ranks.len();
    let local = local_layout(cfg, l, t)?;
    if let Some(r) = ranks.iter().position(|b| b.len() != local.total) {
        return Err(Error::Config(format!(
            "rank {r} buffer has {} elements but the local layout needs {}",
            ranks[r].len(),
            local.total
        )));
    }
    for x in NAMES {
        let name = format!("h{l}.{x}");
        let shape = layout.get(&name)?.shape.clone();
        let full = layout.slice_mut(flat, &name)?;
        for (r, src) in ranks.iter().enumerate() {
            if matches!(split_of(x), Split::Whole) && r > 0 {
                continue;
            }
            let s = local.slice(src, &name)?;
            for (k, i) in local_indices(split_of(x), &shape, t, r)
                .into_iter()
                .enumerate()
            {
                full[i] = s[k];
            }
        }
    }
    Ok(())
}

/// `g` forward: sums the row-parallel partial products over the ranks (all-reduce). Its
/// backward is the identity (each rank keeps the replicated output gradient).
pub fn reduce_from_tp_forward(
    gpus: &[Gpu],
    views: &[View],
    algo: Algo,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    collective::all_reduce(gpus, views, algo, &Opts::default(), ledger, link)
}

/// `f` backward: sums the column-parallel layers' partial input gradients over the ranks
/// (all-reduce). Its forward is the identity (every rank reads the replicated input).
pub fn copy_to_tp_backward(
    gpus: &[Gpu],
    views: &[View],
    algo: Algo,
    ledger: &mut Ledger,
    link: &Link,
) -> Result<()> {
    collective::all_reduce(gpus, views, algo, &Opts::default(), ledger, link)
}

/// One rank's buffers and pre-built segments. Shapes for n = B·T rows, ct = C/t, ht = nh/t.
pub struct Rank {
    pub buffers: Buffers,
    /// Layer input [n, C] (replicated).
    pub x: View,
    /// Layer output [n, C] (replicated).
    pub out: View,
    /// Gradient w.r.t. the output on entry to backward, w.r.t. the input after it [n, C].
    pub dx: View,
    /// Attention projection [n, C]: the rank's partial product, then (after g) the sum.
    attproj: View,
    /// MLP projection [n, C]: the rank's partial product, then (after g) the sum.
    fcproj: View,
    /// Partial dinp of qkv / fc [n, C], summed in place by `copy_to_tp_backward`.
    dln: View,
    forward: [Vec<Op>; 3],
    backward: [Vec<Op>; 3],
}

/// A transformer layer split over `gpus.len()` ranks.
pub struct TpLayer {
    pub gpus: Vec<Gpu>,
    pub cfg: GptConfig,
    pub layer: usize,
    pub micro: Micro,
    pub local: Layout,
    pub ranks: Vec<Rank>,
    pub algo: Algo,
    pub link: Link,
    /// Every all-reduce this layer made.
    pub ledger: Ledger,
    /// Which conjugate operation made each ledger call, in call order.
    pub calls: Vec<&'static str>,
}

impl TpLayer {
    /// Allocates layer `l` over `gpus` (one rank each) for microbatches of shape `micro`.
    pub fn new(
        gpus: &[Gpu],
        cfg: GptConfig,
        l: usize,
        micro: Micro,
        algo: Algo,
        link: Link,
    ) -> Result<TpLayer> {
        let t = gpus.len();
        let local = local_layout(&cfg, l, t)?;
        micro.validate(&cfg)?;
        if l >= cfg.layers {
            return Err(Error::Config(format!(
                "layer {l} does not exist (the model has {})",
                cfg.layers
            )));
        }
        let ranks = gpus
            .iter()
            .enumerate()
            .map(|(r, g)| build_rank(g, &cfg, &local, l, micro, t, r))
            .collect::<Result<Vec<_>>>()?;
        Ok(TpLayer {
            gpus: gpus.to_vec(),
            cfg,
            layer: l,
            micro,
            local,
            ranks,
            algo,
            link,
            ledger: Ledger::new(),
            calls: Vec::new(),
        })
    }

    /// Uploads each rank's local parameters (from [`shard_layer`]).
    pub fn set_params(&self, ranks: &[Vec<f32>]) -> Result<()> {
        self.check_ranks(ranks.len())?;
        for ((g, rk), p) in self.gpus.iter().zip(&self.ranks).zip(ranks) {
            g.upload(&rk.buffers.params, p)?;
        }
        Ok(())
    }

    /// Downloads each rank's local gradients (for [`gather_layer`]).
    pub fn grads(&self) -> Result<Vec<Vec<f32>>> {
        self.gpus
            .iter()
            .zip(&self.ranks)
            .map(|(g, rk)| g.download(&rk.buffers.grads))
            .collect()
    }

    /// Uploads the layer input [n, C] to every rank.
    pub fn set_input(&self, x: &[f32]) -> Result<()> {
        for (g, rk) in self.gpus.iter().zip(&self.ranks) {
            g.upload(&rk.x, x)?;
        }
        Ok(())
    }

    /// Uploads the output gradient [n, C] to every rank.
    pub fn set_dout(&self, dout: &[f32]) -> Result<()> {
        for (g, rk) in self.gpus.iter().zip(&self.ranks) {
            g.upload(&rk.dx, dout)?;
        }
        Ok(())
    }

    /// Output [n, C] of rank `r` after [`TpLayer::forward`].
    pub fn output(&self, r: usize) -> Result<Vec<f32>> {
        self.gpus[r].download(&self.ranks[r].out)
    }

    /// Input gradient [n, C] of rank `r` after [`TpLayer::backward`].
    pub fn dx(&self, r: usize) -> Result<Vec<f32>> {
        self.gpus[r].download(&self.ranks[r].dx)
    }

    /// Forward: segment 0 (ln1 … attproj partial), g, segment 1 (+x, ln2 … fcproj partial),
    /// g, segment 2 (+x2).
    pub fn forward(&mut self) -> Result<()> {
        self.segment(true, 0)?;
        let views: Vec<View> = self.ranks.iter().map(|r| r.attproj.clone()).collect();
        self.reduce_from_tp(&views, "reduce_from_tp.attproj")?;
        self.segment(true, 1)?;
        let views: Vec<View> = self.ranks.iter().map(|r| r.fcproj.clone()).collect();
        self.reduce_from_tp(&views, "reduce_from_tp.fcproj")?;
        self.segment(true, 2)
    }

    /// Backward (parameter gradients accumulate): segment 0 (fcproj … fc), f, segment 1
    /// (ln2 … qkv), f, segment 2 (ln1). `dx` holds ∂L/∂out on entry, ∂L/∂x on return.
    pub fn backward(&mut self) -> Result<()> {
        self.segment(false, 0)?;
        self.copy_to_tp("copy_to_tp.ln2")?;
        self.segment(false, 1)?;
        self.copy_to_tp("copy_to_tp.ln1")?;
        self.segment(false, 2)
    }

    fn segment(&self, forward: bool, k: usize) -> Result<()> {
        for (g, rk) in self.gpus.iter().zip(&self.ranks) {
            g.run(if forward {
                &rk.forward[k]
            } else {
                &rk.backward[k]
            })?;
        }
        Ok(())
    }

    fn reduce_from_tp(&mut self, views: &[View], what: &'static str) -> Result<()> {
        reduce_from_tp_forward(&self.gpus, views, self.algo, &mut self.ledger, &self.link)?;
        self.calls.push(what);
        Ok(())
    }

    fn copy_to_tp(&mut self, what: &'static str) -> Result<()> {
        let views: Vec<View> = self.ranks.iter().map(|r| r.dln.clone()).collect();
        copy_to_tp_backward(&self.gpus, &views, self.algo, &mut self.ledger, &self.link)?;
        self.calls.push(what);
        Ok(())
    }

    fn check_ranks(&self, got: usize) -> Result<()> {
        if got != self.ranks.len() {
            return Err(Error::Config(format!(
                "{got} rank buffers for {} tensor-parallel ranks",
                self.ranks.len()
            )));
        }
        Ok(())
    }
}

/// Allocates rank `r`'s buffers and builds its forward and backward segments.
fn build_rank(
    g: &Gpu,
    cfg: &GptConfig,
    local: &Layout,
    l: usize,
    micro: Micro,
    t: usize,
    r: usize,
) -> Result<Rank> {
    let (b, tt) = (micro.b, micro.t);
    let (n, c) = (micro.tokens(), cfg.channels);
    let (ct, ht) = (c / t, cfg.heads / t);
    let buf = |name: &str, len: usize| g.buffer(name, len);
    let buffers = Buffers::new(g, local);
    let p = |x: &str| buffers.p(&format!("h{l}.{x}"));
    let d = |x: &str| buffers.g(&format!("h{l}.{x}"));
    let att_len = b * ht * tt * tt;
    let (x, out, dx) = (
        buf("tp.x", n * c),
        buf("tp.out", n * c),
        buf("tp.dx", n * c),
    );
    let (ln1, ln1_mean, ln1_rstd) = (buf("ln1", n * c), buf("ln1.mean", n), buf("ln1.rstd", n));
    let qkv = buf("qkv", n * 3 * ct);
    let (atty, att) = (buf("atty", n * ct), buf("att", att_len));
    let attproj = buf("attproj", n * c);
    let x2 = buf("x2", n * c);
    let (ln2, ln2_mean, ln2_rstd) = (buf("ln2", n * c), buf("ln2.mean", n), buf("ln2.rstd", n));
    let (fch, fch_gelu) = (buf("fch", n * 4 * ct), buf("fch_gelu", n * 4 * ct));
    let fcproj = buf("fcproj", n * c);
    let dln = buf("dln", n * c);
    let (dqkv, datty, datt) = (
        buf("dqkv", n * 3 * ct),
        buf("datty", n * ct),
        buf("datt", att_len),
    );
    let (dfch, dfch_gelu) = (buf("dfch", n * 4 * ct), buf("dfch_gelu", n * 4 * ct));
    // row-parallel biases: added by rank 0 only, before the all-reduce
    let once = |x: &str| -> Result<Option<View>> { (r == 0).then(|| p(x)).transpose() };

    // ---- forward ----
    let mut f0 = kn::layernorm_forward(
        g,
        &ln1,
        &ln1_mean,
        &ln1_rstd,
        &x,
        &p("ln1w")?,
        &p("ln1b")?,
        n,
        c,
    )?;
    f0.extend(km::matmul_forward(
        g,
        &qkv,
        &ln1,
        &p("qkvw")?,
        Some(&p("qkvb")?),
        n,
        c,
        3 * ct,
    )?);
    f0.extend(ka::attention_forward(g, &atty, &att, &qkv, b, tt, ct, ht)?);
    f0.extend(km::matmul_forward(
        g,
        &attproj,
        &atty,
        &p("attprojw")?,
        once("attprojb")?.as_ref(),
        n,
        ct,
        c,
    )?);
    let mut f1 = vec![ke::residual_forward(g, &x2, &x, &attproj, n * c)?];
    f1.extend(kn::layernorm_forward(
        g,
        &ln2,
        &ln2_mean,
        &ln2_rstd,
        &x2,
        &p("ln2w")?,
        &p("ln2b")?,
        n,
        c,
    )?);
    f1.extend(km::matmul_forward(
        g,
        &fch,
        &ln2,
        &p("fcw")?,
        Some(&p("fcb")?),
        n,
        c,
        4 * ct,
    )?);
    f1.push(ke::gelu_forward(g, &fch_gelu, &fch, n * 4 * ct)?);
    f1.extend(km::matmul_forward(
        g,
        &fcproj,
        &fch_gelu,
        &p("fcprojw")?,
        once("fcprojb")?.as_ref(),
        n,
        4 * ct,
        c,
    )?);
    let f2 = vec![ke::residual_forward(g, &out, &x2, &fcproj, n * c)?];

    // ---- backward: dx holds ∂L/∂out = ∂L/∂fcproj (g's backward is the identity) ----
    let mut b0 = km::matmul_backward(
        g,
        &dfch_gelu,
        &d("fcprojw")?,
        Some(&d("fcprojb")?),
        &dx,
        &fch_gelu,
        &p("fcprojw")?,
        n,
        4 * ct,
        c,
    )?;
    b0.push(ke::gelu_backward(g, &dfch, &fch, &dfch_gelu, n * 4 * ct)?);
    b0.extend(km::matmul_backward(
        g,
        &dln,
        &d("fcw")?,
        Some(&d("fcb")?),
        &dfch,
        &ln2,
        &p("fcw")?,
        n,
        c,
        4 * ct,
    )?);
    // f's backward sums dln over the ranks here
    let mut b1 = kn::layernorm_backward(
        g,
        &dx,
        &d("ln2w")?,
        &d("ln2b")?,
        &dln,
        &x2,
        &p("ln2w")?,
        &ln2_mean,
        &ln2_rstd,
        n,
        c,
    )?;
    b1.extend(km::matmul_backward(
        g,
        &datty,
        &d("attprojw")?,
        Some(&d("attprojb")?),
        &dx,
        &atty,
        &p("attprojw")?,
        n,
        ct,
        c,
    )?);
    b1.extend(ka::attention_backward(
        g, &dqkv, &datt, &datty, &qkv, &att, b, tt, ct, ht,
    )?);
    b1.extend(km::matmul_backward(
        g,
        &dln,
        &d("qkvw")?,
        Some(&d("qkvb")?),
        &dqkv,
        &ln1,
        &p("qkvw")?,
        n,
        c,
        3 * ct,
    )?);
    // f's backward sums dln over the ranks here
    let b2 = kn::layernorm_backward(
        g,
        &dx,
        &d("ln1w")?,
        &d("ln1b")?,
        &dln,
        &x,
        &p("ln1w")?,
        &ln1_mean,
        &ln1_rstd,
        n,
        c,
    )?;
    Ok(Rank {
        buffers,
        x,
        out,
        dx,
        attproj,
        fcproj,
        dln,
        forward: [f0, f1, f2],
        backward: [b0, b1, b2],
    })
}
