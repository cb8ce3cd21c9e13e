// Storage prelude, packed bf16: every tensor is array<u32> holding two bf16 per word (element
// 2i in the low half of word i). `lanes(w)` widens both halves exactly, `pack(x)` rounds each
// lane to nearest even once (narrow / widen: bf16_bits.wgsl, prepended before this file);
// `word(i, x, n)` stores the high half of a word past n elements 0.

const LANES: u32 = 2u;

fn lanes(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(widen(w)), bitcast<f32>(widen(w >> 16u)));
}

// A word from its lanes, each rounded to nearest even once.
fn pack(x: vec2<f32>) -> u32 {
    return narrow(bitcast<u32>(x.x)) | (narrow(bitcast<u32>(x.y)) << 16u);
}

// Word i of an output of n elements from its lanes: the high half past n is 0.
fn word(i: u32, x: vec2<f32>, n: u32) -> u32 {
    let h = select(0u, narrow(bitcast<u32>(x.y)), 2u * i + 1u < n);
    return narrow(bitcast<u32>(x.x)) | (h << 16u);
}

// Both halves of a word = bf16(v).
fn splat(v: f32) -> u32 {
    return pack(vec2<f32>(v));
}

// Four consecutive elements (a vec4-aligned group of a row), as stored: two words here.
alias Quad = vec2<u32>;

// Widened by the exact shift (a NaN operand stays a NaN; its quiet bit is not forced).
fn quad(q: Quad) -> vec4<f32> {
    return vec4<f32>(lane(q.x, 0u), lane(q.x, 1u), lane(q.y, 0u), lane(q.y, 1u));
}

// A Quad from four elements, each rounded to nearest even once.
fn quad_pack(x: vec4<f32>) -> Quad {
    return vec2<u32>(pack(x.xy), pack(x.zw));
}

// Four f32 elements read as two Quads of f32 words (an f32 operand beside packed ones).
fn quad_f32(a: Quad, b: Quad) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(a, b));
}

// Element j of word w, as f32 (exact shift) / as its raw bits; `place` puts raw element bits
// at lane j.
fn lane(w: u32, j: u32) -> f32 {
    return bitcast<f32>((w >> (16u * j)) << 16u);
}
fn raw(w: u32, j: u32) -> u32 {
    return (w >> (16u * j)) & 0xffffu;
}
fn place(b: u32, j: u32) -> u32 {
    return b << (16u * j);
}

// A flat texture copy of a tensor (kernels/texels.rs): its Quads row after row, FLAT_ROW texels
// a row, rgba32uint texels of f32 words or rg32uint ones of packed bf16 words, the buffer's bits.
const FLAT_ROW: u32 = 256u;

// Texel q of a flat copy, raw (an f32 tensor's Quad q: elements 4q .. 4q+3).
fn texel(t: texture_2d<u32>, q: u32) -> vec4<u32> {
    return textureLoad(t, vec2<u32>(q % FLAT_ROW, q / FLAT_ROW), 0);
}

// Quad q of a flat copy of a tensor of this precision.
fn flat(t: texture_2d<u32>, q: u32) -> Quad {
    return texel(t, q).xy;
}
