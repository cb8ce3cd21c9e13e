//! Packed-bf16 kernels: the bf16-mode twins of the f32 kernel families, one module per family
//! (`shaders/packed_<family>.wgsl`). Every float tensor of the model is bf16, two per u32 word
//! (element `2i` in the low half of word `i`, as in [`super::bf16`]), except the few kept in f32
//! (layernorm mean/rstd, losses, logits/dlogits, the optimizer's master weights and moments).
//! Inside a kernel all arithmetic is f32: widen on load, accumulate in f32, narrow (round to
//! nearest even) only when storing; a `+=` output is widened, added to in f32 and narrowed.
//! Every invocation writes whole words, so kernels that write rows need even row lengths and
//! refuse odd ones with [`Error::Config`]. Views are in u32 words for packed operands and in
//! elements for f32 ones. Twins: [`crate::cpu::packed`].

pub mod attention;
pub mod matmul;
pub mod norm;
pub mod optim;

use crate::error::{Error, Result};
use crate::gpu::View;

/// Checks that packed `v` holds at least `words` u32 words, naming the operand.
pub(crate) fn need_words(name: &str, v: &View, words: usize) -> Result<()> {
    if v.len < words {
        return Err(Error::Config(format!(
            "{name}: view has {} u32 words, kernel needs {words} (bf16 pairs)",
            v.len
        )));
    }
    Ok(())
}

/// The first `words` words of packed `v`, after checking there are that many.
pub(crate) fn first_words(name: &str, v: &View, words: usize) -> Result<View> {
    need_words(name, v, words)?;
    Ok(v.slice(0, words))
}

/// Refuses an odd row length `c`: a row would end inside a word shared with the next row.
pub(crate) fn even_rows(family: &str, what: &str, c: usize) -> Result<()> {
    if !c.is_multiple_of(2) {
        return Err(Error::Config(format!(
            "{family} bf16: {what} = {c} must be even (each invocation writes whole bf16 pairs)"
        )));
    }
    Ok(())
}
