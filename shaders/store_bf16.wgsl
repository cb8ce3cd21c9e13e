// Storage prelude, packed bf16: every tensor is array<u32> holding two bf16 per word (element
// 2i in the low half of word i). `lanes(w)` widens both halves exactly, `word(i, x)` rounds each
// lane to nearest even once (narrow / widen: bf16_bits.wgsl, prepended before this file); the
// high half of a word past the body's element count `d.n` is stored 0.

const LANES: u32 = 2u;

fn lanes(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(widen(w)), bitcast<f32>(widen(w >> 16u)));
}

// Word i of an output from its lanes.
fn word(i: u32, x: vec2<f32>) -> u32 {
    let h = select(0u, narrow(bitcast<u32>(x.y)), 2u * i + 1u < d.n);
    return narrow(bitcast<u32>(x.x)) | (h << 16u);
}

// Both halves of a word = bf16(v).
fn splat(v: f32) -> u32 {
    let h = narrow(bitcast<u32>(v));
    return h | (h << 16u);
}
