//! Twins of the kernels under bf16 (each family's builder called with `Precision::Bf16`), one
//! module per family, and their specification: each unpacks its bf16 inputs with `unpack_bf16`,
//! runs the f32 twin of the f32 twins, and packs its outputs with
//! `pack_bf16` (a `+=` output is unpacked first, accumulated by the f32
//! twin, then packed). So a packed kernel is its f32 kernel computed on the widened values, with
//! each stored element rounded to bf16 once. Packed slices hold `⌈len/2⌉` u32 words; f32 ones
//! (layernorm mean/rstd) stay f32.

pub mod attention;
pub mod elementwise;
pub mod encoder;
pub mod matmul;
pub mod norm;
pub mod optim;
