// Packed-bf16 token + position embedding. tokens u32 [B·T]; wte [V,C], wpe [maxT,C],
// out/dout [B·T,C], dwte/dwpe: bf16 pairs in u32 words (element 2i in the low half of word i),
// every buffer declared array<u32>. C is even, so a row is cw = C/2 whole words; one thread per
// word (two channels), arithmetic in f32 (widen on load), one rounding per stored element.
//
//   encoder_forward  (out | tokens, wte, wpe)                      thread per output word
//   encoder_backward (dwte, dwpe | dout, tokens, links, first)     thread per (position, word)
//
// links/first come from encoder.wgsl's encoder_links (u32 only, shared): links[p] = the next
// position holding the same token (END if none), first[tok] = the token's first position. Each
// chain head (first[tok] == p) adds its chain's dout rows into dwte[tok] in position order, and
// each position t < T adds its B rows into dwpe[t]: the CPU twin's order, so the f32 sums equal
// the twin's bit for bit, and so do the rounded results.

struct Dims { n: u32, cw: u32, t: u32, v: u32 }
@group(0) @binding(0) var<uniform> d: Dims; // n = B·T rows, cw = C/2 words per row

const END: u32 = 0xffffffffu;
const WG: u32 = 256u;
const NAN2: u32 = 0x7fc07fc0u; // two quiet bf16 NaNs

// narrow / widen: the bit rules of bf16_bits.wgsl, prepended by the kernel registry.

fn pair(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(widen(w)), bitcast<f32>(widen(w >> 16u)));
}
fn pack2(x: vec2<f32>) -> u32 {
    return narrow(bitcast<u32>(x.x)) | (narrow(bitcast<u32>(x.y)) << 16u);
}

// ---- encoder_forward: out[p,i] = wte[tokens[p],i] + wpe[p % T,i] (NaN for a token ≥ V) ----
@group(0) @binding(1) var<storage, read_write> f_out: array<u32>;
@group(0) @binding(2) var<storage, read> f_tokens: array<u32>;
@group(0) @binding(3) var<storage, read> f_wte: array<u32>;
@group(0) @binding(4) var<storage, read> f_wpe: array<u32>;

@compute @workgroup_size(256)
fn encoder_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    if (e >= d.n * d.cw) { return; }
    let p = e / d.cw;
    let j = e - p * d.cw;
    let tok = f_tokens[p];
    if (tok >= d.v) {
        f_out[e] = NAN2;
        return;
    }
    f_out[e] = pack2(pair(f_wte[tok * d.cw + j]) + pair(f_wpe[(p % d.t) * d.cw + j]));
}

// ---- encoder_backward: dwte[tok,i] += Σ chain dout[q,i];  dwpe[t,i] += Σ_b dout[b·T+t,i] ----
@group(0) @binding(1) var<storage, read_write> b_dwte: array<u32>;
@group(0) @binding(2) var<storage, read_write> b_dwpe: array<u32>;
@group(0) @binding(3) var<storage, read> b_dout: array<u32>;
@group(0) @binding(4) var<storage, read> b_tokens: array<u32>;
@group(0) @binding(5) var<storage, read> b_links: array<u32>;
@group(0) @binding(6) var<storage, read> b_first: array<u32>;

@compute @workgroup_size(256)
fn encoder_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    let cw = d.cw;
    if (e >= d.n * cw) { return; }
    let p = e / cw;
    let j = e - p * cw;
    if (p < d.t) {
        var acc = pair(b_dwpe[e]);
        for (var q = p; q < d.n; q += d.t) { acc += pair(b_dout[q * cw + j]); }
        b_dwpe[e] = pack2(acc);
    }
    let tok = b_tokens[p];
    if (tok >= d.v || b_first[tok] != p) { return; }
    var acc = pair(b_dwte[tok * cw + j]);
    var q = p;
    loop {
        acc += pair(b_dout[q * cw + j]);
        q = b_links[q];
        if (q == END) { break; }
    }
    b_dwte[tok * cw + j] = pack2(acc);
}
