//! Twins of shaders/bf16.wgsl: `n` f32 values ⇄ `⌈n/2⌉` u32 words holding two bf16 each.
//! The `half` crate's conversions are the specification: round to nearest even, NaN kept as a
//! quiet NaN (sign and high payload bits kept), ±inf kept, overflow to ±inf.
//! [`round_bf16`] is a store of either direction in place: the value a bf16 tensor keeps.

use half::bf16;

/// `out[⌈n/2⌉]` = bf16 pairs of `inp[n]`: element `2i` in the low 16 bits of word `i`, element
/// `2i+1` in the high 16 bits; an odd `n` leaves the high half of the last word 0.
pub fn pack_bf16(inp: &[f32]) -> Vec<u32> {
    inp.chunks(2)
        .map(|pair| {
            let lo = bf16::from_f32(pair[0]).to_bits() as u32;
            let hi = pair
                .get(1)
                .map_or(0, |&x| bf16::from_f32(x).to_bits() as u32);
            lo | (hi << 16)
        })
        .collect()
}

/// `out[n]` = f32 widening of the bf16 pairs in `words[⌈n/2⌉]` (layout as in [`pack_bf16`];
/// for an odd `n` the high half of the last word is ignored). Exact, except that a signalling
/// NaN comes back quiet, as `half` widens it.
pub fn unpack_bf16(words: &[u32], n: usize) -> Vec<f32> {
    assert_eq!(
        words.len(),
        n.div_ceil(2),
        "unpack_bf16: {n} elements need {} words",
        n.div_ceil(2)
    );
    (0..n)
        .map(|i| bf16::from_bits((words[i / 2] >> (16 * (i % 2))) as u16).to_f32())
        .collect()
}

/// Every element of `x` rounded to bf16 and widened back, in place: `unpack(pack(x))`, the value
/// a packed store keeps (f32 values already on bf16's grid stay as they are).
pub fn round_bf16(x: &mut [f32]) {
    for v in x {
        *v = bf16::from_f32(*v).to_f32();
    }
}
