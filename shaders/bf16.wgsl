// bf16 packing: n f32 values <-> ceil(n/2) u32 words, two bf16 per word. Element 2i sits in the
// low 16 bits of word i, element 2i+1 in the high 16 bits; an odd n leaves the high half of the
// last word 0. One invocation per word (one element pair); index folded over y past 65535 groups.
//
// Both directions work on the raw bits only (every buffer is declared array<u32>), so no float
// operation can flush subnormals or canonicalise NaNs on the way. The bit rules (those of the
// `half` crate, the CPU twins' specification) are bf16_bits.wgsl's.

struct Dims { n: u32, words: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> d: Dims;

// pack: dst = packed words [words], src = f32 bits [n]
// unpack: dst = f32 bits [n], src = packed words [words]
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<u32>;

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.

// ---- pack(dst words, src f32): word i = bf16(src[2i]) | bf16(src[2i+1]) << 16 ----
@compute @workgroup_size(256)
fn pack(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let lo = narrow(src[2u * i]);
    var hi = 0u;
    if (2u * i + 1u < d.n) {
        hi = narrow(src[2u * i + 1u]);
    }
    dst[i] = lo | (hi << 16u);
}

// ---- unpack(dst f32, src words): dst[2i] = low half of word i, dst[2i+1] = high half ----
@compute @workgroup_size(256)
fn unpack(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= d.words) { return; }
    let w = src[i];
    dst[2u * i] = widen(w);
    if (2u * i + 1u < d.n) {
        dst[2u * i + 1u] = widen(w >> 16u);
    }
}
