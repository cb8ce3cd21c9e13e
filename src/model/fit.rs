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

#[cfg(test)]
mod tests {
    use super::*;

    /// WebGPU's default limits: 128 MiB per storage binding, 256 MiB per buffer.
    fn limits() -> wgpu::Limits {
        wgpu::Limits::default()
    }

    fn err(r: Result<()>) -> String {
        match r {
            Err(Error::Config(m)) => m,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn counts_what_the_model_allocates() {
        let cfg = GptConfig::default();
        let micro = Micro { b: 4, t: 64 };
        check_model(&cfg, micro, 1, &limits()).unwrap();
        let all = needs(&cfg, &cfg.blocks(), micro, 1).unwrap();
        let get = |what: &str| all.iter().find(|n| n.what == what).unwrap().elements;
        let flat = get("flat parameters (and each of gradients, Adam m, Adam v)");
        assert_eq!(flat, Some(cfg.layout(&cfg.blocks()).total as u64));
        assert_eq!(get("attention scores"), Some(4 * 4 * 64 * 64));
        assert_eq!(get("MLP activations"), Some(4 * 64 * 4 * 128));
        assert_eq!(get("logits"), Some(4 * 64 * 256));
        assert_eq!(get("residual stream"), Some(4 * 64 * 128));
        // any stage as any tensor-parallel rank: the flat count is the layout's
        let blocks = cfg.blocks();
        for range in [0..1, 1..3, 2..6, 5..6, 0..6] {
            for tp in [1, 2, 4] {
                let stage = &blocks[range.clone()];
                let n = needs(&cfg, stage, micro, tp).unwrap();
                assert_eq!(
                    n[0].elements,
                    Some(cfg.layout_tp(stage, tp).total as u64),
                    "{range:?} tp {tp}"
                );
                let has_layer = stage.iter().any(|b| matches!(b, Block::Layer(_)));
                assert_eq!(n.iter().any(|x| x.what == "attention scores"), has_layer);
                let has_head = stage.contains(&Block::Head);
                assert_eq!(n.iter().any(|x| x.what == "logits"), has_head);
            }
        }
    }

    #[test]
    fn refuses_each_buffer_over_the_limit_with_its_size_and_flag() {
        let long = GptConfig {
            ctx: 4096,
            ..GptConfig::default()
        };
        // 8·4·4096·4096 f32 = 2 GiB of attention scores
        let m = err(check_model(&long, Micro { b: 8, t: 4096 }, 1, &limits()));
        println!("{m}");
        for part in [
            "attention scores",
            "b·(heads/tp)·t·t = 8·4·4096·4096",
            "2147483648 B (2.0 GiB)",
            "max_storage_buffer_binding_size of 134217728 B (128.0 MiB)",
            "lower --micro-batch (train: --batch) or --seq",
        ] {
            assert!(m.contains(part), "{m:?} lacks {part:?}");
        }
        // tensor parallelism splits the heads: 4 ranks hold a quarter each, 512 MiB, still over
        let m = err(check_model(&long, Micro { b: 8, t: 4096 }, 4, &limits()));
        assert!(m.contains("8·1·4096·4096"), "{m}");
        check_model(&long, Micro { b: 1, t: 2048 }, 4, &limits()).unwrap();
        let wide_vocab = GptConfig {
            vocab: 1 << 20,
            ..GptConfig::default()
        };
        let m = err(check_model(
            &wide_vocab,
            Micro { b: 8, t: 64 },
            1,
            &limits(),
        ));
        assert!(m.contains("the logits") && m.contains("b·t·vocab"), "{m}");
        // the head's stage holds the logits, the other stages do not
        let blocks = wide_vocab.blocks();
        let (front, back) = blocks.split_at(blocks.len() - 1);
        let small = Micro { b: 1, t: 64 };
        check(
            &wide_vocab,
            &front[1..],
            Micro { b: 8, t: 64 },
            1,
            &limits(),
        )
        .unwrap();
        assert!(err(check(
            &wide_vocab,
            back,
            Micro { b: 8, t: 64 },
            1,
            &limits()
        ))
        .contains("logits"));
        // 4096 layers of width 4096: 3.3 TB of parameters
        let deep = GptConfig {
            layers: 4096,
            channels: 4096,
            heads: 32,
            ..GptConfig::default()
        };
        let m = err(check_model(&deep, small, 1, &limits()));
        assert!(
            m.contains("flat parameters") && m.contains("--layers or --channels"),
            "{m}"
        );
        assert!(!m.contains("attention scores"), "{m}");
    }

    #[test]
    fn names_the_smaller_limit_and_survives_sizes_beyond_64_bits() {
        let cfg = GptConfig {
            ctx: 1024,
            ..GptConfig::default()
        };
        let tight = wgpu::Limits {
            max_buffer_size: 1 << 20,
            ..limits()
        };
        let m = err(check_model(&cfg, Micro { b: 1, t: 1024 }, 1, &tight));
        assert!(m.contains("max_buffer_size of 1048576 B (1.0 MiB)"), "{m}");
        let huge = GptConfig {
            vocab: 1 << 20,
            ctx: 1 << 16,
            channels: 1 << 16,
            heads: 1 << 16,
            layers: 1 << 12,
        };
        // 2¹⁶·2¹⁶·2¹⁶·2¹⁶ attention scores are 2⁶⁴ elements: one more than u64 holds
        let m = err(check_model(
            &huge,
            Micro {
                b: 1 << 16,
                t: 1 << 16,
            },
            1,
            &limits(),
        ));
        assert!(m.contains("attention scores (b·(heads/tp)·t·t = 65536·65536·65536·65536) overflow a 64-bit size"), "{m}");
        let absurd = GptConfig {
            channels: usize::MAX,
            heads: 1,
            ..GptConfig::default()
        };
        let m = err(check_model(&absurd, Micro { b: 1, t: 1 }, 1, &limits()));
        assert!(
            m.contains("flat parameters") && m.contains("overflow"),
            "{m}"
        );
        assert!(err(check_model(&cfg, Micro { b: 1, t: 1 }, 0, &limits())).contains("tp = 0"));
    }
}
