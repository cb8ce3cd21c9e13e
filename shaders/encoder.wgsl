// Token + position embedding, one source for f32 and packed bf16 (a storage prelude,
// store_f32.wgsl or store_bf16.wgsl, comes first). tokens u32 [B·T], wte [V,C], wpe [maxT,C],
// out/dout [B·T,C], all in u32 words of LANES channels: a row is cw = C / LANES whole words
// (bf16 needs an even C); one thread per word, arithmetic in f32, one rounding per stored bf16.
//
//   encoder_forward  (out | tokens, wte, wpe)                       thread per output word
//   encoder_links    (links, first | tokens)                        one workgroup of J threads
//   encoder_backward (dwte, dwpe | dout, tokens, links, first)      thread per (position, word)
//
// The backward is deterministic without atomics. encoder_links walks the positions from last to
// first; thread j owns the tokens with tok % J == j and keeps first[tok] = the latest position
// seen, so every position gets links[p] = the next position holding the same token (END if none)
// and, at the end, first[tok] is the token's first position:
//
//   tokens  7 3 7 7 3        links  2 4 3 END END        first[7] = 0, first[3] = 1
//   p       0 1 2 3 4
//
// first[] is never cleared: an entry is trusted only if it points past p at the same token,
// which a stale entry cannot do unless the token does occur after p, and then the walk has
// already overwritten it. encoder_backward lets each chain head (first[tok] == p) add its chain's
// dout rows into dwte[tok] in position order, and each position t < T add its B rows into
// dwpe[t]: both in the CPU twin's order, so the result equals the twin bit for bit.

struct Dims { n: u32, cw: u32, t: u32, v: u32 }
@group(0) @binding(0) var<uniform> d: Dims; // n = B·T rows, cw = words per row

const END: u32 = 0xffffffffu;
const WG: u32 = 256u;
const J: u32 = 64u;

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
        f_out[e] = splat(bitcast<f32>(0x7fc00000u));
        return;
    }
    f_out[e] = pack(lanes(f_wte[tok * d.cw + j]) + lanes(f_wpe[(p % d.t) * d.cw + j]));
}

// ---- encoder_links ----
@group(0) @binding(1) var<storage, read_write> l_links: array<u32>;
@group(0) @binding(2) var<storage, read_write> l_first: array<u32>;
@group(0) @binding(3) var<storage, read> l_tokens: array<u32>;

@compute @workgroup_size(64)
fn encoder_links(@builtin(local_invocation_index) j: u32) {
    let n = d.n;
    for (var q = n; q > 0u; q--) {
        let p = q - 1u;
        let tok = l_tokens[p];
        if (tok < d.v && tok % J == j) {
            let nx = l_first[tok];
            let valid = nx < n && nx > p && l_tokens[min(nx, n - 1u)] == tok;
            l_links[p] = select(END, nx, valid);
            l_first[tok] = p;
        }
    }
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
        var acc = lanes(b_dwpe[e]);
        for (var q = p; q < d.n; q += d.t) { acc += lanes(b_dout[q * cw + j]); }
        b_dwpe[e] = pack(acc);
    }
    let tok = b_tokens[p];
    if (tok >= d.v || b_first[tok] != p) { return; }
    var acc = lanes(b_dwte[tok * cw + j]);
    var q = p;
    loop {
        acc += lanes(b_dout[q * cw + j]);
        q = b_links[q];
        if (q == END) { break; }
    }
    b_dwte[tok * cw + j] = pack(acc);
}
