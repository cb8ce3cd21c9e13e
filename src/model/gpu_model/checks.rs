//! What a model checks before it allocates: its blocks are a contiguous range, and a bf16
//! model's shapes let every kernel write whole words.

use crate::error::{Error, Result};
use crate::model::{Block, GptConfig, Precision};
use crate::params::Buffers;

/// bf16: the buffers are packed, and every row a kernel writes has an even length (a word never
/// holds elements of two rows, so no two invocations write one word): C/NH and 4C/t even.
/// (Attention's `[T,T]` rows are packed in one flat pass, so T may be odd.)
pub(super) fn check_precision(
    cfg: &GptConfig,
    t: usize,
    prec: Precision,
    buffers: &Buffers,
) -> Result<()> {
    if buffers.packed() != (prec == Precision::Bf16) {
        return Err(Error::Config(format!(
            "a {prec} model needs {} parameter buffers",
            if prec == Precision::Bf16 {
                "packed bf16"
            } else {
                "f32"
            }
        )));
    }
    if prec == Precision::F32 {
        return Ok(());
    }
    let hs = cfg.channels / cfg.heads;
    let mlp = 4 * cfg.channels / t;
    if !hs.is_multiple_of(2) || !mlp.is_multiple_of(2) {
        return Err(Error::Config(format!(
            "bf16 needs an even head size (channels / heads = {hs}) and an even MLP width per \
             tensor-parallel rank (4·channels / tp = {mlp}): two bf16 share a word, and every \
             row a kernel writes must own its words"
        )));
    }
    Ok(())
}

/// Blocks must be a non-empty contiguous run of `cfg.blocks()`.
pub fn check_contiguous(cfg: &GptConfig, blocks: &[Block]) -> Result<()> {
    let all = cfg.blocks();
    let start = blocks.first().and_then(|b| all.iter().position(|x| x == b));
    match start {
        Some(s) if all.get(s..s + blocks.len()) == Some(blocks) => Ok(()),
        _ => Err(Error::Config(format!(
            "blocks {blocks:?} are not a contiguous range of the model"
        ))),
    }
}
