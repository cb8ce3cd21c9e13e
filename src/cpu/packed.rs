//! Twins of the packed-bf16 kernels ([`crate::kernels::packed`]): each unpacks its bf16 inputs
//! ([`super::unpack_bf16`]), runs the f32 twin, and packs its bf16 outputs ([`super::pack_bf16`])
//! — which is the kernels' specification: f32 arithmetic between a widening load and a
//! rounding store.

pub mod optim;
