// Texel prelude of the matmul texture path, packed bf16 texels (after store_bf16.wgsl): a texel
// is four bf16 elements in two words (rg32uint; the words of a Quad as stored), so a product of
// two bf16 operands copies their rows as they lie in memory (half the bytes of f32 texels) and
// widens on fetch, exactly: the same values, and the same sums, as from f32 texels.
@group(0) @binding(1) var packed: texture_storage_2d<rg32uint, write>;
@group(0) @binding(2) var ta: texture_2d<u32>;
@group(0) @binding(3) var tb: texture_2d<u32>;

fn fa(at: vec2<u32>) -> vec4<f32> {
    return quad(textureLoad(ta, at, 0).xy);
}
fn fb(at: vec2<u32>) -> vec4<f32> {
    return quad(textureLoad(tb, at, 0).xy);
}
// Four elements that are bf16 values already (rounding keeps them).
fn put(at: vec2<u32>, v: vec4<f32>) {
    textureStore(packed, at, vec4<u32>(quad_pack(v), 0u, 0u));
}
fn put_quad(at: vec2<u32>, q: Quad) {
    textureStore(packed, at, vec4<u32>(q, 0u, 0u));
}
