// Storage prelude, f32: every tensor is array<u32> holding one f32's bits per word. A family
// body written against this prelude (and store_bf16.wgsl) is one source for both precisions:
// it reads a word's elements as `lanes(w)` (lane 1 unused here), computes in f32, and stores
// `pack(x)` (or `word(i, x, n)`, which leaves the elements past n 0); loads and stores are bitcasts, so no float operation touches a value on its
// way in or out.

const LANES: u32 = 1u;

fn lanes(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w), 0.0);
}

// A word from its lanes (lane 1 unused).
fn pack(x: vec2<f32>) -> u32 {
    return bitcast<u32>(x.x);
}

// Word i of an output of n elements from its lanes.
fn word(i: u32, x: vec2<f32>, n: u32) -> u32 {
    return pack(x);
}

// Every element of a word = v.
fn splat(v: f32) -> u32 {
    return pack(vec2<f32>(v));
}

// Four consecutive elements (a vec4-aligned group of a row), as stored: four words here.
alias Quad = vec4<u32>;

fn quad(q: Quad) -> vec4<f32> {
    return bitcast<vec4<f32>>(q);
}

// A Quad from four f32 elements.
fn quad_pack(x: vec4<f32>) -> Quad {
    return bitcast<vec4<u32>>(x);
}

// Four f32 elements read as two Quads of f32 words (`b` unused here: `a` holds all four).
fn quad_f32(a: Quad, b: Quad) -> vec4<f32> {
    return bitcast<vec4<f32>>(a);
}

// Element j of word w, as f32 / as its raw bits; `place` puts raw element bits at lane j.
fn lane(w: u32, j: u32) -> f32 {
    return bitcast<f32>(w);
}
fn raw(w: u32, j: u32) -> u32 {
    return w;
}
fn place(b: u32, j: u32) -> u32 {
    return b;
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
    return texel(t, q);
}
