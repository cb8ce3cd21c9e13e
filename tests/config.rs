//! Model configuration, parameter layout and adapter-selection errors (no GPU needed).
use triaxis::gpu::parse_backends;
use triaxis::model::{Block, GptConfig, Micro};
use triaxis::params::ALIGN;
use triaxis::Error;

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
