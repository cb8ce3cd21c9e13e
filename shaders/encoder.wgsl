// Token + position embedding. tokens u32 [B·T], wte [V,C], wpe [maxT,C], out/dout [B·T,C].
//
//   encoder_forward  (out | tokens, wte, wpe)         thread per output element
//   encoder_links    (links | tokens)                 thread per position p
//   encoder_backward (dwte, dwpe | dout, tokens, links) thread per (position, channel)
//
// The backward is deterministic without atomics. encoder_links threads every position into a
// chain of the positions holding the same token, in increasing order:
//
//   tokens   7 3 7 7 3            links[p] = next position with tokens[p] (END if none),
//   p        0 1 2 3 4                       | HEAD if no earlier position holds tokens[p]
//   links    2|H 4|H 3 END END
//
// encoder_backward then lets each chain head walk its chain in order, so dwte[tok,i] gets the
// dout rows added one by one in position order (the CPU twin's order, bit for bit), and each
// position t < T adds the B rows of dwpe[t,i] in batch order.

struct Dims { n: u32, c: u32, t: u32, v: u32 }
@group(0) @binding(0) var<uniform> d: Dims; // n = B·T rows

const END: u32 = 0x7fffffffu;
const HEAD: u32 = 0x80000000u;

// ---- encoder_forward: out[p,i] = wte[tokens[p],i] + wpe[p % T,i] (NaN for a token ≥ V) ----
@group(0) @binding(1) var<storage, read_write> f_out: array<f32>;
@group(0) @binding(2) var<storage, read> f_tokens: array<u32>;
@group(0) @binding(3) var<storage, read> f_wte: array<f32>;
@group(0) @binding(4) var<storage, read> f_wpe: array<f32>;

@compute @workgroup_size(256)
fn encoder_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= d.n * d.c) { return; }
    let p = e / d.c;
    let i = e - p * d.c;
    let tok = f_tokens[p];
    if (tok >= d.v) {
        f_out[e] = bitcast<f32>(0x7fc00000u);
        return;
    }
    f_out[e] = f_wte[tok * d.c + i] + f_wpe[(p % d.t) * d.c + i];
}

// ---- encoder_links: links[p] = next same-token position (or END) | HEAD if first ----
@group(0) @binding(1) var<storage, read_write> l_links: array<u32>;
@group(0) @binding(2) var<storage, read> l_tokens: array<u32>;

@compute @workgroup_size(256)
fn encoder_links(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let p = gid.x + gid.y * nwg.x * 256u;
    let live = p < d.n;
    let tok = select(0u, l_tokens[min(p, d.n - 1u)], live);
    var next = END;
    var head = HEAD;
    // q runs over all positions in the same order on every lane, so tokens[q] is one uniform
    // load per SIMD row rather than one load per lane.
    for (var q = 0u; q < d.n; q++) {
        let hit = l_tokens[q] == tok;
        if (hit && q < p) { head = 0u; }
        if (hit && q > p && next == END) { next = q; }
    }
    if (live) { l_links[p] = next | head; }
}

// ---- encoder_backward: dwte[tok,i] += Σ chain dout[q,i];  dwpe[t,i] += Σ_b dout[b·T+t,i] ----
@group(0) @binding(1) var<storage, read_write> b_dwte: array<f32>;
@group(0) @binding(2) var<storage, read_write> b_dwpe: array<f32>;
@group(0) @binding(3) var<storage, read> b_dout: array<f32>;
@group(0) @binding(4) var<storage, read> b_tokens: array<u32>;
@group(0) @binding(5) var<storage, read> b_links: array<u32>;

@compute @workgroup_size(256)
fn encoder_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    let c = d.c;
    if (e >= d.n * c) { return; }
    let p = e / c;
    let i = e - p * c;
    if (p < d.t) {
        var acc = b_dwpe[e];
        for (var q = p; q < d.n; q += d.t) { acc += b_dout[q * c + i]; }
        b_dwpe[e] = acc;
    }
    let link = b_links[p];
    let tok = b_tokens[p];
    if ((link & HEAD) == 0u || tok >= d.v) { return; }
    var acc = b_dwte[tok * c + i];
    var q = p;
    loop {
        acc += b_dout[q * c + i];
        q = b_links[q] & END;
        if (q == END) { break; }
    }
    b_dwte[tok * c + i] = acc;
}
