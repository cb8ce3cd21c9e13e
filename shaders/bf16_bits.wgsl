// bf16 bit rules, shared by bf16.wgsl, store_bf16.wgsl (the bf16 prelude of every family
// written once) and packed_attention.wgsl (the kernel registry prepends this file to each). The `half` crate (2.x) is the specification, followed by the CPU twins:
//   narrow: NaN -> (bits >> 16) | 0x0040 (quiet NaN, sign and high payload kept);
//           else round to nearest even on the f32 bits, (x + 0x7fff + ((x >> 16) & 1)) >> 16
//           (carries into the exponent as needed: f32::MAX -> inf).
//   widen:  bits << 16, exact; a NaN gets its quiet bit (0x0040_0000) set, as `half` does.

// f32 bits -> bf16 bits (in the low 16 bits of the result).
fn narrow(x: u32) -> u32 {
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (x >> 16u) | 0x0040u;
    }
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}

// bf16 bits (low 16 bits of h) -> f32 bits.
fn widen(h: u32) -> u32 {
    let x = (h & 0xffffu) << 16u;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return x | 0x00400000u;
    }
    return x;
}

