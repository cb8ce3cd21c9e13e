//! Packed-bf16 kernels for mixed precision: every float tensor of the model is stored as bf16,
//! two per u32 word (element 2i in the low half of word i; a tensor of `len` elements takes
//! ⌈len/2⌉ words), except layernorm statistics, per-token losses, the logits and their
//! gradient, and the optimizer's master weights and moments, which stay f32. Arithmetic inside
//! every kernel is f32: widen on load, accumulate, reduce and take softmax in f32, round to
//! nearest even (as `half` does, [`super::bf16`]) only when storing; an accumulating output is
//! widened, added to in f32 and rounded again. Each invocation writes whole words.
//!
//! Twins: [`crate::cpu::packed`] (unpack the inputs, run the f32 twin, pack the outputs).

pub mod optim;
