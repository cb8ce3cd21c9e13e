use super::Op; use crate::error::Result; use crate::gpu::{Gpu, View};
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward(_g: &Gpu, _out: &View, _inp: &View, _weight: &View, _bias: Option<&View>, _n: usize, _c: usize, _oc: usize) -> Result<Vec<Op>> { todo!() }
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(_g: &Gpu, _dinp: &View, _dweight: &View, _dbias: Option<&View>, _dout: &View, _inp: &View, _weight: &View, _n: usize, _c: usize, _oc: usize) -> Result<Vec<Op>> { todo!() }
