//! Model configuration, parameter layout and adapter-selection errors (no GPU needed).
use triaxis::gpu::parse_backends;
use triaxis::mesh::{Coords, Mesh};
use triaxis::model::fit::{check, check_model, needs};
use triaxis::model::{Block, GptConfig, Micro};
use triaxis::params::ALIGN;
use triaxis::{Error, Result};

#[test]
fn heads_must_divide_channels() {
    let e = GptConfig {
        channels: 10,
        heads: 3,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("must divide channels"),
        "{e}"
    );
    let e = GptConfig {
        layers: 0,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("positive"), "{e}");
}

#[test]
fn sequence_longer_than_context_is_rejected() {
    let cfg = GptConfig {
        ctx: 16,
        ..Default::default()
    };
    let e = Micro { b: 2, t: 17 }.validate(&cfg).unwrap_err();
    assert!(e.to_string().contains("exceeds the model context"), "{e}");
}

#[test]
fn unknown_backend_is_a_clear_error() {
    let e = parse_backends("vulcan").unwrap_err();
    assert!(
        matches!(e, Error::UnknownBackend(_)) && e.to_string().contains("vulkan, gl"),
        "{e}"
    );
    assert_eq!(parse_backends("gl").unwrap(), wgpu::Backends::GL);
    assert_eq!(
        parse_backends("Vulkan,gl").unwrap(),
        wgpu::Backends::VULKAN | wgpu::Backends::GL
    );
}

#[test]
fn layout_is_aligned_in_block_order_and_counts_params() {
    let cfg = GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 12,
        heads: 3,
        layers: 2,
    };
    let layout = cfg.layout(&cfg.blocks());
    let (c, v, t, l) = (12, 13, 8, 2);
    let per_layer =
        2 * c + 3 * c * c + 3 * c + c * c + c + 2 * c + 4 * c * c + 4 * c + 4 * c * c + c;
    assert_eq!(
        cfg.param_count(),
        v * c + t * c + l * per_layer + 2 * c + v * c
    );
    assert_eq!(layout.count(), cfg.param_count());
    for w in layout.tensors.windows(2) {
        assert_eq!(w[0].offset % ALIGN, 0);
        assert!(w[0].offset + w[0].len <= w[1].offset, "tensors overlap");
    }
    assert!(layout.tensors.iter().all(|t| layout
        .decay_segments()
        .iter()
        .any(|(r, d)| r.contains(&t.offset) && *d == t.decay)));
    // block order: each block's tensors are one contiguous range; 2 segments per layer
    // emb | ln1 | qkvw | qkvb | attprojw | attprojb ln2 | fcw | fcb | fcprojw | fcprojb + next ln1 … | headw
    assert_eq!(layout.decay_segments().len(), 8 * l + 3);
    // init is per tensor: a stage's layout gets the same values as the full model's
    let full = cfg.init(&layout, 3);
    let stage_blocks = [Block::Layer(1), Block::Head];
    let stage = cfg.layout(&stage_blocks);
    let part = cfg.init(&stage, 3);
    for t in &stage.tensors {
        assert_eq!(
            stage.slice(&part, &t.name).unwrap(),
            layout.slice(&full, &t.name).unwrap(),
            "{}",
            t.name
        );
    }
    assert_eq!(layout.slice(&full, "h0.ln1w").unwrap(), &[1.0; 12]);
    assert_eq!(layout.slice(&full, "h0.qkvb").unwrap(), &[0.0; 36]);
}

#[test]
fn non_contiguous_blocks_are_rejected() {
    let cfg = GptConfig {
        layers: 3,
        ..Default::default()
    };
    let e = triaxis::model::gpu_model::check_contiguous(&cfg, &[Block::Layer(0), Block::Layer(2)])
        .unwrap_err();
    assert!(e.to_string().contains("contiguous"), "{e}");
    triaxis::model::gpu_model::check_contiguous(
        &cfg,
        &[Block::Layer(1), Block::Layer(2), Block::Head],
    )
    .unwrap();
}

// --- the fit checks: what a model needs per buffer against the device limits

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
    assert!(
        m.contains(
            "attention scores (b·(heads/tp)·t·t = 65536·65536·65536·65536) overflow a 64-bit size"
        ),
        "{m}"
    );
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

#[test]
fn coordinates_round_trip() {
    let m = Mesh {
        dp: 2,
        tp: 2,
        pp: 3,
        ..Mesh::default()
    };
    for d in 0..m.devices() {
        assert_eq!(m.device(m.coords(d)), d);
    }
    assert_eq!(
        m.coords(7),
        Coords {
            replica: 1,
            stage: 0,
            tp_rank: 1
        }
    );
}
