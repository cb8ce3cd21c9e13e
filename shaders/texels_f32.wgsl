// Texel prelude of the matmul texture path, f32 texels: a texel is four f32 elements
// (rgba32float), what every f32 operand is packed into and, beside an f32 operand, a bf16 one
// (widened exactly). `fa`/`fb` fetch a texel of A'/B' as four f32, `put` writes one.
@group(0) @binding(1) var packed: texture_storage_2d<rgba32float, write>;
@group(0) @binding(2) var ta: texture_2d<f32>;
@group(0) @binding(3) var tb: texture_2d<f32>;

fn fa(at: vec2<u32>) -> vec4<f32> {
    return textureLoad(ta, at, 0);
}
fn fb(at: vec2<u32>) -> vec4<f32> {
    return textureLoad(tb, at, 0);
}
fn put(at: vec2<u32>, v: vec4<f32>) {
    textureStore(packed, at, v);
}
// A Quad of the run's storage into a texel, widened exactly.
fn put_quad(at: vec2<u32>, q: Quad) {
    textureStore(packed, at, quad(q));
}
