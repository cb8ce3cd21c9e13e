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
