//! The model flags the measuring examples share (`--layers`, `--channels`, `--heads`, `--seq`,
//! `--micro-batch`), checked before any device work against the shared caps of
//! `flags` (support/flags.rs), then against the model's own constraints (heads divide channels) and
//! the built-in corpus (a sequence needs one more token than it holds).
//!
//! Included by each example with `#[path = "support/model_flags.rs"] mod model_flags;`.

use crate::flags;
use triaxis::data::{Batcher, Corpus};
use triaxis::model::{GptConfig, Micro};

/// The model of a run on the built-in throughput corpus, its flags checked.
pub struct Model {
    pub corpus: Corpus,
    pub model: GptConfig,
    pub micro: Micro,
}

/// Checks the shared model flags; the error names the flag and the constraint.
pub fn check(
    layers: usize,
    channels: usize,
    heads: usize,
    seq: usize,
    micro_batch: usize,
) -> anyhow::Result<Model> {
    flags::in_range("--layers", layers, 1, flags::MAX_LAYERS)?;
    flags::in_range("--channels", channels, 1, flags::MAX_CHANNELS)?;
    flags::in_range("--heads", heads, 1, flags::MAX_CHANNELS)?;
    flags::in_range("--seq", seq, 1, flags::MAX_SEQ)?;
    flags::in_range("--micro-batch", micro_batch, 1, flags::MAX_MICRO_BATCH)?;
    let corpus = Corpus::throughput()?;
    let model = GptConfig {
        vocab: corpus.vocab.size(),
        ctx: seq,
        channels,
        heads,
        layers,
    };
    model.validate()?;
    let micro = Micro {
        b: micro_batch,
        t: seq,
    };
    micro.validate(&model)?;
    // one window of the training split, as every step draws them
    corpus
        .train_batch(&mut Batcher::new(0), micro)
        .map_err(|e| anyhow::anyhow!("--seq {seq}: {e}"))?;
    Ok(Model {
        corpus,
        model,
        micro,
    })
}
