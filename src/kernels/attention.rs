//! Causal multi-head self-attention (shaders/attention.wgsl, one source for both precisions
//! behind a storage prelude), forward and backward. Twins: `twins::{attention_forward,
//! attention_backward}` in f32, `twins::packed::attention` in bf16.
//!
//! qkv `[B,T,3C]` holds q | k | v per token; head h owns channels h·hs..(h+1)·hs of each part
//! (hs = C/NH, even under bf16, scale 1/√hs). out, dout, qkv, dqkv and att are words of
//! precision `p`; the kernels' own rows (scores and probabilities in the forward, dpre in the
//! backward) are f32 `[B,NH,T,T]` in both precisions, so every intermediate is f32 and every sum
//! runs in the same fixed order whatever the storage.
//!
//! The forward is one dispatch (threads own query rows) writing f32 probabilities: into `att`
//! itself under f32; under bf16 into the f32 `rows` scratch, which a second dispatch packs into
//! `att` (out is summed from the f32 probabilities, as the twin does). The backward is two
//! dispatches: rows (dpre into `rows`, dq) then columns (dk, dv gathered over t ≥ t2), so no
//! thread ever adds into another's output. When hs % 4 == 0 the tiled entry points run: a
//! thread owns 4 tokens of a head and loads q/k/v/dout as Quads into 4×4 register tiles (about
//! 4× faster on lavapipe than the scalar kernel, one token per thread, which runs otherwise).
//! Where the device's subgroups are exactly 8 lanes (lavapipe), the subgroup kernels
//! (shaders/attention_subgroup.wgsl) run the same tiles with one 8-lane workgroup per 32 tokens
//! of a head: every lane of a head needs the same k and v rows (q and dout for dk, dv), so each
//! lane fetches an eighth of them and the subgroup broadcasts, where a per-lane storage load is
//! a loop over the lanes. Same sums in the same order: the same bits as the tiled kernels.

use super::texels::{self, Bind};
use super::{bf16, groups_1d, need, need_in, op, shader, Arg, Dispatch};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, View};
use crate::precision::Precision;

/// Checks the shape (under bf16 also an even head size: a head slice owns whole words) and
/// returns hs = C/NH.
fn head_size(p: Precision, b: usize, t: usize, c: usize, nh: usize) -> Result<usize> {
    if nh == 0 || c == 0 || !c.is_multiple_of(nh) {
        return Err(Error::Config(format!(
            "attention: channels c = {c} must be a positive multiple of the head count nh = {nh}"
        )));
    }
    let fits = |dims: &[usize]| {
        dims.iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .is_some_and(|n| n <= u32::MAX as usize)
    };
    if !fits(&[b, nh, t, t]) || !fits(&[b, t, 3, c]) {
        return Err(Error::Config(format!(
            "attention: B={b}, T={t}, C={c}, NH={nh} overflows 32-bit indices"
        )));
    }
    let hs = c / nh;
    if p == Precision::Bf16 && !hs.is_multiple_of(2) {
        return Err(Error::Config(format!(
            "attention bf16: head size C/NH = {c}/{nh} = {hs} must be even (a bf16 word holds \
             two channels)"
        )));
    }
    Ok(hs)
}

/// Uniform: b, t, c, nh, hs, scale (f32 bits).
fn dims(b: usize, t: usize, c: usize, nh: usize, hs: usize) -> [u32; 8] {
    let scale = 1.0 / (hs as f32).sqrt();
    [
        b as u32,
        t as u32,
        c as u32,
        nh as u32,
        hs as u32,
        scale.to_bits(),
        0,
        0,
    ]
}

/// Workgroups for `n` of them, folded over y past the 65,535 limit of one dimension.
fn fold(n: usize) -> [u32; 3] {
    let g = (n as u32).max(1);
    if g <= 65535 {
        [g, 1, 1]
    } else {
        [65535, g.div_ceil(65535), 1]
    }
}

/// Which attention kernels run (head sizes not a multiple of 4 always take the scalar ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// The subgroup kernels where the device's subgroups are exactly 8 lanes, the tiled ones
    /// elsewhere.
    Auto,
    /// One thread per 4 tokens of a head, 64 a group, q/k/v/dout loaded as Quads into 4×4
    /// register tiles (the `_vec4` entries).
    Tiled,
    /// One 8-lane subgroup per 32 tokens of a head, the same tiles, each lane fetching a share of
    /// the rows every lane needs and the subgroup broadcasting them (the `_sg8` entries); the
    /// same sums in the same order as `Tiled`, so the same bits. Fails with `Error::Config` where
    /// the device's subgroups are not exactly 8 lanes.
    Subgroup,
}

/// The entries a shape runs: the scalar ones (one thread per token of a head) where hs % 4 != 0,
/// else those of the kernel.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Path {
    Subgroup,
    Tiled,
    Scalar,
}

impl Path {
    fn of(g: &Gpu, kernel: Kernel, hs: usize) -> Result<Path> {
        let lanes8 = g.subgroup_lanes() == Some(8);
        Ok(match kernel {
            _ if !hs.is_multiple_of(4) => Path::Scalar,
            Kernel::Auto if lanes8 => Path::Subgroup,
            Kernel::Auto | Kernel::Tiled => Path::Tiled,
            Kernel::Subgroup if lanes8 => Path::Subgroup,
            Kernel::Subgroup => {
                return Err(Error::Config(format!(
                    "attention: the subgroup kernels need subgroups of exactly 8 lanes; this \
                     device has {:?}",
                    g.subgroup_lanes()
                )))
            }
        })
    }

    /// The shader module of this path in precision `p`.
    fn shader(self, p: Precision) -> &'static str {
        match self {
            Path::Subgroup => shader("attention_subgroup", p),
            _ => shader("attention", p),
        }
    }

    /// The module of this path that reads its inputs from flat copies ([`texels`]: the
    /// `reads_texels` prelude, the copies at bindings 6..9), where it has one.
    fn texels_shader(self, p: Precision) -> Option<&'static str> {
        match self {
            Path::Subgroup => Some(shader("attention_subgroup_t", p)),
            Path::Tiled => Some(shader("attention_t", p)),
            Path::Scalar => None,
        }
    }

    /// This path's entry of `names` (scalar, tiled, subgroup) and its workgroups.
    fn entry(
        self,
        names: &[&'static str; 3],
        b: usize,
        t: usize,
        nh: usize,
    ) -> (&'static str, [u32; 3]) {
        match self {
            Path::Scalar => (names[0], groups_1d(b * nh * t)),
            Path::Tiled => (names[1], fold((b * nh * t.div_ceil(4)).div_ceil(64))),
            Path::Subgroup => (names[2], fold(b * nh * t.div_ceil(4).div_ceil(8))),
        }
    }
}

const FORWARD: [&str; 3] = [
    "attention_forward",
    "attention_forward_vec4",
    "attention_forward_sg8",
];
const ROWS: [&str; 3] = [
    "attention_backward_rows",
    "attention_backward_rows_vec4",
    "attention_backward_rows_sg8",
];
const COLS: [&str; 3] = [
    "attention_backward_cols",
    "attention_backward_cols_vec4",
    "attention_backward_cols_sg8",
];

/// qkv `[B,T,3C]` = q | k | v, head h uses channels h*hs..(h+1)*hs of each (hs = C/NH).
/// att `[B,NH,T,T]` receives the softmax probabilities (zero above the diagonal), out `[B,T,C]`
/// = att·v from the f32 probabilities; all three in words of `p`. rows: an f32 `[B,NH,T,T]`
/// scratch, used under bf16 only (f32 writes its probabilities into att directly).
/// Scale 1/sqrt(hs). One dispatch, plus the pack of att under bf16.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward(
    g: &Gpu,
    p: Precision,
    out: &View,
    att: &View,
    rows: &View,
    qkv: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Dispatch>> {
    attention_forward_with(g, Kernel::Auto, p, out, att, rows, qkv, b, t, c, nh)
}

/// [`attention_forward`] on the kernels `kernel` names.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward_with(
    g: &Gpu,
    kernel: Kernel,
    p: Precision,
    out: &View,
    att: &View,
    rows: &View,
    qkv: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Dispatch>> {
    let hs = head_size(p, b, t, c, nh)?;
    let (n_out, n_att, n_qkv) = (b * t * c, b * nh * t * t, b * t * 3 * c);
    let w = |n: usize| p.words(n);
    need_in(p, "attention out", out, w(n_out))?;
    need_in(p, "attention att", att, w(n_att))?;
    need_in(p, "attention qkv", qkv, w(n_qkv))?;
    if p == Precision::Bf16 {
        need("attention rows", rows, n_att)?;
    }
    if b * t == 0 {
        return Ok(Vec::new());
    }
    // Bind exactly the words used (whole Quads on the vec4 path).
    let (out, att, qkv) = (
        out.slice(0, w(n_out)),
        att.slice(0, w(n_att)),
        qkv.slice(0, w(n_qkv)),
    );
    let probs = match p {
        Precision::F32 => att.clone(),
        Precision::Bf16 => rows.slice(0, n_att),
    };
    let path = Path::of(g, kernel, hs)?;
    let (entry, groups) = path.entry(&FORWARD, b, t, nh);
    let mut ops = Vec::new();
    let d = dims(b, t, c, nh, hs);
    // the forward reading qkv from a flat copy ([`texels`]) where its path has a reads module
    let copy = |ops: &mut Vec<Dispatch>| texels::flats(g, ops, &[(p, &qkv, n_qkv)]);
    if let Some((shader, t)) = path
        .texels_shader(p)
        .and_then(|s| Some((s, copy(&mut ops)?)))
    {
        use Bind::Skip;
        let (o, pr) = (Bind::Buffer(&out), Bind::Buffer(&probs));
        let (qb, tq) = (Bind::Buffer(&qkv), Bind::Texture(&t[0]));
        // the subgroup kernel uses every buffer and texture slot of the family (reading only
        // qkv's data), the tiled one qkv's buffer slot and the prelude's qkv and dout slots
        let binds = match path {
            Path::Subgroup => vec![o, pr, qb, qb, qb, tq, tq, tq, tq],
            _ => vec![o, pr, qb, Skip, Skip, Skip, Skip, tq, tq],
        };
        ops.push(texels::op(g, (shader, entry), &d, &binds, groups)?);
    } else {
        // the subgroup forward binds qkv in all three read slots of the family (see its shader)
        let args = [
            Arg::W(&out),
            Arg::W(&probs),
            Arg::R(&qkv),
            Arg::R(&qkv),
            Arg::R(&qkv),
        ];
        let used = if path == Path::Subgroup { 5 } else { 3 };
        ops.push(op(g, path.shader(p), entry, &d, &args[..used], groups)?);
    }
    if p == Precision::Bf16 {
        ops.push(bf16::pack(g, &att, &probs)?);
    }
    Ok(ops)
}

/// dqkv `[B,T,3C]` ASSIGNED (every element written, zeros where no gradient), from dout `[B,T,C]`,
/// qkv and att (the forward's stored probabilities), all in words of `p`. rows: an f32
/// `[B,NH,T,T]` scratch the kernel uses for dpre (its upper triangle left untouched).
/// Two dispatches (rows, then columns).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    g: &Gpu,
    p: Precision,
    dqkv: &View,
    rows: &View,
    dout: &View,
    qkv: &View,
    att: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Dispatch>> {
    attention_backward_with(g, Kernel::Auto, p, dqkv, rows, dout, qkv, att, b, t, c, nh)
}

/// [`attention_backward`] on the kernels `kernel` names.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_with(
    g: &Gpu,
    kernel: Kernel,
    p: Precision,
    dqkv: &View,
    rows: &View,
    dout: &View,
    qkv: &View,
    att: &View,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> Result<Vec<Dispatch>> {
    let hs = head_size(p, b, t, c, nh)?;
    let (n_out, n_att, n_qkv) = (b * t * c, b * nh * t * t, b * t * 3 * c);
    let w = |n: usize| p.words(n);
    need_in(p, "attention dqkv", dqkv, w(n_qkv))?;
    need("attention rows", rows, n_att)?;
    need_in(p, "attention dout", dout, w(n_out))?;
    need_in(p, "attention qkv", qkv, w(n_qkv))?;
    need_in(p, "attention att", att, w(n_att))?;
    if b * t == 0 {
        return Ok(Vec::new());
    }
    let dqkv = dqkv.slice(0, w(n_qkv));
    let rows = rows.slice(0, n_att);
    let dout = dout.slice(0, w(n_out));
    let qkv = qkv.slice(0, w(n_qkv));
    let att = att.slice(0, w(n_att));
    let args = [
        Arg::W(&dqkv),
        Arg::W(&rows),
        Arg::R(&dout),
        Arg::R(&qkv),
        Arg::R(&att),
    ];
    let d = dims(b, t, c, nh, hs);
    let path = Path::of(g, kernel, hs)?;
    let (row_entry, row_groups) = path.entry(&ROWS, b, t, nh);
    let (col_entry, col_groups) = path.entry(&COLS, b, t, nh);
    if let Some(shader) = path.texels_shader(p) {
        let views = [&dqkv, &rows, &dout, &qkv, &att];
        let kernels = [(row_entry, row_groups), (col_entry, col_groups)];
        let sizes = (n_att, n_qkv, n_out);
        let tiled = path == Path::Tiled;
        if let Some(ops) = backward_texels(g, (p, shader, tiled), views, &d, kernels, sizes)? {
            return Ok(ops);
        }
    }
    Ok(vec![
        op(g, path.shader(p), row_entry, &d, &args, row_groups)?,
        op(g, path.shader(p), col_entry, &d, &args, col_groups)?,
    ])
}

/// The backward with att, qkv, dout (both kernels) and dpre (the columns kernel) read from flat
/// copies ([`texels`]; `shader`, the subgroup or, where `tiled`, the tiled kernels' reads
/// module): the inputs copied before the rows kernel, the dpre it writes after it. `None`
/// where the copies cannot be made.
fn backward_texels(
    g: &Gpu,
    (p, shader, tiled): (Precision, &'static str, bool),
    [dqkv, rows, dout, qkv, att]: [&View; 5],
    d: &[u32; 8],
    [(row_entry, row_groups), (col_entry, col_groups)]: [(&'static str, [u32; 3]); 2],
    (n_att, n_qkv, n_out): (usize, usize, usize),
) -> Result<Option<Vec<Dispatch>>> {
    let (mut ops, mut after_rows) = (Vec::new(), Vec::new());
    // places 0..3: att, qkv and dout, copied before the rows kernel; 3: the dpre it writes
    let inputs = [(p, att, n_att), (p, qkv, n_qkv), (p, dout, n_out)];
    let Some(t_in) = texels::flats(g, &mut ops, &inputs) else {
        return Ok(None);
    };
    let dpre = [(Precision::F32, rows, n_att)];
    let Some(t_rows) = texels::flats_in(g, &mut after_rows, &dpre, (inputs.len(), 0)) else {
        return Ok(None);
    };
    // bindings 1..5: the family's buffers; 6..: dpre, att, qkv, dout (shaders/reads_texels.wgsl)
    let binds = |dpre| {
        let mut b = Vec::from([dqkv, rows, dout, qkv, att].map(Bind::Buffer));
        b.push(dpre);
        b.extend(t_in.iter().map(Bind::Texture));
        b
    };
    // the tiled rows kernel reads no dpre copy: its binding stays empty
    let td = Bind::Texture(&t_rows[0]);
    let row_binds = binds(if tiled { Bind::Skip } else { td });
    let (rows_op, cols_op) = ((shader, row_entry), (shader, col_entry));
    ops.push(texels::op(g, rows_op, d, &row_binds, row_groups)?);
    ops.extend(after_rows);
    ops.push(texels::op(g, cols_op, d, &binds(td), col_groups)?);
    Ok(Some(ops))
}
