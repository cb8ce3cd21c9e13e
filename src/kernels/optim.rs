use super::Op; use crate::error::Result; use crate::gpu::{Gpu, View}; use crate::cpu;
pub fn grad_norm_squared(_g: &Gpu, _out: &View, _scratch: &View, _grads: &View) -> Result<Vec<Op>> { todo!() }
pub fn norm_scratch_len(_n: usize) -> usize { todo!() }
pub fn hyper_words(_h: &cpu::AdamW) -> [u32; 8] { todo!() }
#[allow(clippy::too_many_arguments)]
pub fn adamw(_g: &Gpu, _params: &View, _grads: &View, _m: &View, _v: &View, _hp: &View, _norm_sq: &View, _decay_end: usize) -> Result<Vec<Op>> { todo!() }
