//! The matmul family's shader modules, and one dispatch of them on the layout wgpu derives
//! from the shader (texture bindings).

use crate::error::Result;
use crate::gpu::{Gpu, View};
use crate::kernels::Dispatch;
use crate::precision::Precision;

/// The matmul shader of elements stored as `p` on texels of `words` (packed bf16) or f32: the
/// packs, and the portable and buffer kernels with C stored a Quad at a time where `quads`
/// ([`super::quad_stores`]).
pub(super) fn shader(p: Precision, words: bool, quads: bool) -> &'static str {
    match (p, words, quads) {
        (Precision::F32, _, false) => "matmul",
        (Precision::F32, _, true) => "matmul_q",
        (Precision::Bf16, false, false) => "matmul_bf16",
        (Precision::Bf16, false, true) => "matmul_bf16_q",
        (Precision::Bf16, true, false) => "matmul_bf16_words",
        (Precision::Bf16, true, true) => "matmul_bf16_words_q",
    }
}

/// One dispatch of `shader`'s `entry` on the layout wgpu derives from the shader: `dims` at
/// binding 0, `resources` at bindings 1, 2, … (the product's buffers belong to the caller, its
/// textures to the product op).
pub(super) fn tex_op(
    g: &Gpu,
    shader: &'static str,
    entry: &'static str,
    dims: &[u32; 8],
    resources: Vec<wgpu::BindingResource>,
    groups: [u32; 3],
) -> Result<Dispatch> {
    let resources = resources.into_iter().map(Some).collect();
    crate::kernels::dispatch(g, shader, entry, None, dims, resources, groups, Vec::new())
}

pub(super) fn binding(v: &View) -> Result<wgpu::BindingResource<'_>> {
    crate::kernels::buffer_binding("matmul", v)
}
