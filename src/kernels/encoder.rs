use super::Op; use crate::error::Result; use crate::gpu::{Gpu, View};
#[allow(clippy::too_many_arguments)]
pub fn encoder_forward(_g: &Gpu, _out: &View, _tokens: &View, _wte: &View, _wpe: &View, _b: usize, _t: usize, _c: usize) -> Result<Vec<Op>> { todo!() }
#[allow(clippy::too_many_arguments)]
pub fn encoder_backward(_g: &Gpu, _dwte: &View, _dwpe: &View, _dout: &View, _tokens: &View, _b: usize, _t: usize, _c: usize, _v: usize) -> Result<Vec<Op>> { todo!() }
