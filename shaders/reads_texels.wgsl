// Reads prelude of the attention family, texels: the forward reads qkv, the backward kernels
// att, qkv, dout and (the columns kernel) the rows kernel's dpre from flat texture copies
// (kernels/texels.rs), bound after the family's buffers; an entry binds only those it reads.

const TEXELS: bool = true;

@group(0) @binding(6) var t_rows: texture_2d<u32>;   // rows (f32 words): dpre
@group(0) @binding(7) var t_att: texture_2d<u32>;    // att (the run's precision)
@group(0) @binding(8) var t_qkv: texture_2d<u32>;    // qkv
@group(0) @binding(9) var t_dout: texture_2d<u32>;   // dout

// Element e of att, widened.
fn att_texel(e: u32) -> f32 {
    return quad(flat(t_att, e / 4u))[e % 4u];
}

// Element e of rows.
fn rows_texel(e: u32) -> f32 {
    return bitcast<f32>(texel(t_rows, e / 4u)[e % 4u]);
}

// Quad q of qkv (which 0) or dout (1).
fn flat_in(which: u32, q: u32) -> Quad {
    if (which == 0u) {
        return flat(t_qkv, q);
    }
    return flat(t_dout, q);
}
