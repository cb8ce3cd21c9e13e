//! Packed-bf16 kernels of the one family not yet written once for both precisions: attention
//! (`shaders/packed_attention.wgsl`). bf16 tensors are two per u32 word (element `2i` in the
//! low half of word `i`, as in [`super::bf16`]); inside a kernel all arithmetic is f32: widen on
//! load, accumulate in f32, narrow (round to nearest even) only when storing; a `+=` output is
//! widened, added to in f32 and narrowed. Every invocation writes whole words, so rows need even
//! lengths and odd ones are refused with [`crate::error::Error::Config`]. Twins:
//! [`crate::cpu::packed`].

pub mod attention;
