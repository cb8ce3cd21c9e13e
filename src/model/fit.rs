//! Whether one device can hold a model stage's buffers, decided before anything is allocated.
//!
//! wgpu refuses a buffer larger than the device's `max_buffer_size`, and a storage binding
//! larger than `max_storage_buffer_binding_size` (128 MiB on many adapters, Mesa's lavapipe
//! among them), only with a validation error at a later submit; a size that overflows `usize`
//! panics in the allocation arithmetic. [`check`] computes, in checked 64-bit arithmetic, the
//! largest single buffers a stage allocates (as [`super::gpu_model::GpuModel`] and
//! [`crate::params::Buffers`] lay them out) and refuses the stage with the buffer, its size,
//! the limit and the flags that shrink it named.
//!
//! The buffers (f32 elements; n = b·t tokens of a microbatch, tp tensor-parallel ranks):
//!
//! | buffer | elements | exists when the stage holds |
//! |---|---|---|
//! | flat parameters (also gradients, Adam m and v) | Σ tensors, each padded to 64 | always |
//! | attention scores (and their gradient) | b·(heads/tp)·t·t | a layer |
//! | MLP activations (and their gradients) | n·4C/tp | a layer |
//! | logits (and their gradient) | n·V | the head |
//! | residual stream | n·C | always |
//!
//! Every other buffer is no larger than one of these (qkv is n·3C/tp, layernorm statistics n).

use super::{Block, GptConfig, Micro};
use crate::error::{Error, Result};
use crate::params::ALIGN;

/// One buffer a stage allocates: what it holds, its size as a formula with the values put in,
/// its f32 element count (`None`: beyond 64 bits) and the flags that shrink it.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    pub what: &'static str,
    pub formula: String,
    pub elements: Option<u64>,
    pub fix: &'static str,
}

impl Need {
    /// Bytes of the buffer (`None`: beyond 64 bits).
    pub fn bytes(&self) -> Option<u64> {
        self.elements?.checked_mul(4)
    }

    fn product(what: &'static str, names: &str, factors: &[usize], fix: &'static str) -> Need {
        let values: Vec<String> = factors.iter().map(|f| f.to_string()).collect();
        Need {
            what,
            formula: format!("{names} = {}", values.join("·")),
            elements: factors
                .iter()
                .try_fold(1u64, |acc, &f| acc.checked_mul(f as u64)),
            fix,
        }
    }
}

/// The largest buffers of `blocks` (contiguous, in order) as tensor-parallel rank of `tp` for
/// microbatches of shape `micro`. `tp` must be at least 1 (see [`GptConfig::check_tp`]).
pub fn needs(cfg: &GptConfig, blocks: &[Block], micro: Micro, tp: usize) -> Result<Vec<Need>> {
    let layers = blocks
        .iter()
        .filter(|b| matches!(b, Block::Layer(_)))
        .count();
    let has = |b: Block| blocks.contains(&b);
    needs_of(
        cfg,
        has(Block::Embedding),
        layers,
        has(Block::Head),
        micro,
        tp,
    )
}

/// [`needs`] of a stage given by what it holds: the embedding?, `layers` layers, the head?
fn needs_of(
    cfg: &GptConfig,
    embedding: bool,
    layers: usize,
    head: bool,
    micro: Micro,
    tp: usize,
) -> Result<Vec<Need>> {
    if tp == 0 {
        return Err(Error::Config(
            "tensor parallelism needs at least one rank (tp = 0)".into(),
        ));
    }
    let (b, t, c) = (micro.b, micro.t, cfg.channels);
    let mut out = vec![Need {
        what: "flat parameters (and each of gradients, Adam m, Adam v)",
        formula: format!(
            "{}{layers} layer(s){} of width {c} as 1 of {tp} tensor-parallel rank(s), each tensor padded to {ALIGN} elements",
            if embedding { "embedding + " } else { "" },
            if head { " + head" } else { "" },
        ),
        elements: flat_elements(cfg, embedding, layers, head, tp),
        fix: "--layers or --channels, or split the model over more pipeline stages or tensor-parallel ranks",
    }];
    if layers > 0 {
        out.push(Need::product(
            "attention scores",
            "b·(heads/tp)·t·t",
            &[b, cfg.heads / tp, t, t],
            "--micro-batch (train: --batch) or --seq",
        ));
        out.push(Need::product(
            "MLP activations",
            "b·t·4C/tp",
            &[b, t, c.saturating_mul(4) / tp],
            "--micro-batch (train: --batch), --seq or --channels",
        ));
    }
    if head {
        out.push(Need::product(
            "logits",
            "b·t·vocab",
            &[b, t, cfg.vocab],
            "--micro-batch (train: --batch) or --seq",
        ));
    }
    out.push(Need::product(
        "residual stream",
        "b·t·C",
        &[b, t, c],
        "--micro-batch (train: --batch), --seq or --channels",
    ));
    Ok(out)
}

/// Flat elements of a stage: the parameter tensors of its blocks, each padded to [`ALIGN`],
/// as [`crate::params::Layout`] places them. All layers have one size, so the count needs no
/// list of `layers` entries.
fn flat_elements(
    cfg: &GptConfig,
    embedding: bool,
    layers: usize,
    head: bool,
    tp: usize,
) -> Option<u64> {
    // the specs compute 4C and 3C/tp in usize: refuse widths where that overflows
    cfg.channels.checked_mul(4)?;
    let block = |b: Block| {
        b.specs(cfg, tp).iter().try_fold(0u64, |acc, s| {
            let len = s
                .shape
                .iter()
                .try_fold(1u64, |p, &d| p.checked_mul(d as u64))?;
            acc.checked_add(len.checked_next_multiple_of(ALIGN as u64)?)
        })
    };
    let mut total = 0u64;
    if embedding {
        total = total.checked_add(block(Block::Embedding)?)?;
    }
    if layers > 0 {
        total = total.checked_add(block(Block::Layer(0))?.checked_mul(layers as u64)?)?;
    }
    if head {
        total = total.checked_add(block(Block::Head)?)?;
    }
    Some(total)
}

/// Refuses `blocks` on a device with `limits` when one of its buffers is larger than a
/// storage binding or a buffer may be; every such buffer is named with its size, the limit
/// and the flags to lower.
pub fn check(
    cfg: &GptConfig,
    blocks: &[Block],
    micro: Micro,
    tp: usize,
    limits: &wgpu::Limits,
) -> Result<()> {
    refuse(needs(cfg, blocks, micro, tp)?, limits)
}

/// [`check`] for the whole model (every block) on one device as a rank of `tp`.
pub fn check_model(cfg: &GptConfig, micro: Micro, tp: usize, limits: &wgpu::Limits) -> Result<()> {
    refuse(needs_of(cfg, true, cfg.layers, true, micro, tp)?, limits)
}

/// The error naming every buffer of `needs` over the smaller of the two limits.
fn refuse(needs: Vec<Need>, limits: &wgpu::Limits) -> Result<()> {
    let (binding, buffer) = (
        limits.max_storage_buffer_binding_size,
        limits.max_buffer_size,
    );
    let (limit, limit_name) = if binding <= buffer {
        (binding, "max_storage_buffer_binding_size")
    } else {
        (buffer, "max_buffer_size")
    };
    let over: Vec<String> = needs
        .into_iter()
        .filter_map(|n| match n.bytes() {
            Some(b) if b <= limit => None,
            Some(b) => Some(format!(
                "the {} ({} f32 elements: {}) need {} in one buffer, over this device's \
                 {limit_name} of {}; lower {}",
                n.what,
                n.elements.unwrap_or(0),
                n.formula,
                human(b),
                human(limit),
                n.fix
            )),
            None => Some(format!(
                "the {} ({}) overflow a 64-bit size; lower {}",
                n.what, n.formula, n.fix
            )),
        })
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    Err(Error::Config(format!(
        "the model does not fit on one device: {}",
        over.join("; ")
    )))
}

/// "134217728 B (128.0 MiB)".
fn human(bytes: u64) -> String {
    let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut unit = "B";
    for u in units {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    if unit == "B" {
        format!("{bytes} B")
    } else {
        format!("{bytes} B ({v:.1} {unit})")
    }
}
