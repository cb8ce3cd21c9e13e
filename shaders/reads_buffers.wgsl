// Reads prelude of the attention family, storage: every input is read from its buffer
// (TEXELS false folds the texture branches away; these stand-ins are never called). The
// texels prelude, reads_texels.wgsl, defines the same names.

const TEXELS: bool = false;

fn att_texel(e: u32) -> f32 {
    return 0.0;
}

fn rows_texel(e: u32) -> f32 {
    return 0.0;
}

fn flat_in(which: u32, q: u32) -> Quad {
    return Quad();
}
