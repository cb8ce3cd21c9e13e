// The texture kernels' store of C[m, n .. n+3] as one Quad (four f32 words, or two words of
// bf16 pairs), for a C stored in the family's precision whose N is a multiple of 4 (the host
// takes this module only then): a Quad lies wholly inside C or wholly past its last column, so
// it is written whole or skipped. On lavapipe one Quad store per lane replaces four scalar
// ones. Each element is store4's sum (v, plus the old value when ACCUMULATE) rounded as store4
// rounds it, so the same bits.
@group(0) @binding(1) var<storage, read_write> c_quads: array<Quad>;

fn put_c(m: u32, n: u32, v: vec4<f32>) {
    if (m >= d.m || n >= d.n) { return; }
    let i = (m * d.n + n) / 4u;
    var x = v;
    if ((d.flags & ACCUMULATE) != 0u) { x += quad(c_quads[i]); }
    c_quads[i] = quad_pack(x);
}
