//! Packed-bf16 kernels: the bf16-mode twins of the f32 kernel families, one module per family
//! (`shaders/packed_<family>.wgsl`). Every float tensor of the model is bf16, two per u32 word
//! (element `2i` in the low half of word `i`, as in [`super::bf16`]), except the few kept in f32
//! (layernorm mean/rstd, losses, logits/dlogits, the optimizer's master weights and moments).
//! Inside a kernel all arithmetic is f32: widen on load, accumulate in f32, narrow (round to
//! nearest even) only when storing; a `+=` output is widened, added to in f32 and narrowed.
//! Every invocation writes whole words, so kernels that write rows need even row lengths and
//! refuse odd ones with [`crate::error::Error::Config`]. Views are in u32 words for packed operands and in
//! elements for f32 ones. Twins: [`crate::cpu::packed`].

pub mod attention;
pub mod norm;
pub mod optim;

pub(crate) use super::{even_rows, need_words};
use crate::error::Result;
use crate::gpu::View;

/// The first `words` words of packed `v`, after checking there are that many.
pub(crate) fn first_words(name: &str, v: &View, words: usize) -> Result<View> {
    need_words(name, v, words)?;
    Ok(v.slice(0, words))
}
