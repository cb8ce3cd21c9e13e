//! bf16 packing kernels vs their CPU twins (`half`'s conversions), bit for bit: random normals
//! over many magnitudes, rounding ties and carries, overflow, ±0, subnormals, ±inf, NaN payloads,
//! random bit patterns, every bf16 pattern, odd and even lengths. Outputs are poisoned first and
//! compared as raw bits (NaNs included), so an unwritten or canonicalised element fails.
mod common;
use common::*;
use triaxis::{cpu, error::Error, gpu, gpu::Gpu, kernels::bf16 as k, rng::Rng};

/// A word no kernel writes for these inputs (its halves are signalling NaNs, which neither
/// direction ever produces).
const POISON_WORD: u32 = 0x7f81_ff81;

fn poisoned_words(g: &Gpu, n: usize) -> gpu::View {
    buf_u32(g, &vec![POISON_WORD; n])
}

/// Packs `bits` (f32 bit patterns, `[n]`) on the GPU: `[⌈n/2⌉]` words.
fn gpu_pack(g: &Gpu, bits: &[u32]) -> Vec<u32> {
    let src = buf_u32(g, bits);
    let dst = poisoned_words(g, bits.len().div_ceil(2));
    g.run(&[k::pack(g, &dst, &src).unwrap()]).unwrap();
    g.download::<u32>(&dst).unwrap()
}

/// Unpacks `words` (`[⌈n/2⌉]`) into `n` f32 on the GPU, returned as bits `[n]`.
fn gpu_unpack(g: &Gpu, words: &[u32], n: usize) -> Vec<u32> {
    let src = buf_u32(g, words);
    let dst = poisoned_words(g, n);
    g.run(&[k::unpack(g, &dst, &src).unwrap()]).unwrap();
    g.download::<u32>(&dst).unwrap()
}

fn cpu_pack(bits: &[u32]) -> Vec<u32> {
    let x: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    cpu::pack_bf16(&x)
}

fn cpu_unpack(words: &[u32], n: usize) -> Vec<u32> {
    cpu::unpack_bf16(words, n)
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn is_nan_bits(b: u32) -> bool {
    b & 0x7fff_ffff > 0x7f80_0000
}

/// The bf16 bits of element `i` of packed `words`.
fn half_of(words: &[u32], i: usize) -> u32 {
    (words[i / 2] >> (16 * (i % 2))) & 0xffff
}

fn half_is_nan(h: u32) -> bool {
    h & 0x7fff > 0x7f80
}

/// GPU vs twin packed words, element by element (`inp` = the f32 bits `[n]` both packed).
fn check_packed(name: &str, inp: &[u32], gpu: &[u32], cpu: &[u32]) {
    assert_eq!(gpu.len(), inp.len().div_ceil(2), "{name}: word count");
    assert_eq!(gpu.len(), cpu.len(), "{name}: word count");
    for (i, &x) in inp.iter().enumerate() {
        let (gh, ch) = (half_of(gpu, i), half_of(cpu, i));
        if is_nan_bits(x) {
            assert!(half_is_nan(ch), "{name}: twin lost NaN {x:#010x} at {i}");
            assert!(
                half_is_nan(gh),
                "{name}: element {i}: NaN {x:#010x} packed to non-NaN {gh:#06x} (twin {ch:#06x})"
            );
        }
        assert_eq!(
            gh,
            ch,
            "{name}: element {i}: f32 {x:#010x} ({}) packed to {gh:#06x}, twin {ch:#06x}",
            f32::from_bits(x)
        );
    }
    if inp.len() % 2 == 1 {
        assert_eq!(
            gpu[gpu.len() - 1] >> 16,
            0,
            "{name}: high half of the last word"
        );
    }
}

/// GPU vs twin unpacked f32 bits `[n]`.
fn check_unpacked(name: &str, words: &[u32], gpu: &[u32], cpu: &[u32]) {
    assert_eq!(gpu.len(), cpu.len(), "{name}: length");
    for (i, (&a, &b)) in gpu.iter().zip(cpu).enumerate() {
        let h = half_of(words, i);
        if half_is_nan(h) {
            assert!(
                is_nan_bits(a),
                "{name}: element {i}: NaN bf16 {h:#06x} widened to non-NaN {a:#010x}"
            );
        }
        assert_eq!(
            a, b,
            "{name}: element {i}: bf16 {h:#06x} widened to {a:#010x}, twin {b:#010x}"
        );
    }
}

/// Packs on both sides, compares, then unpacks the packed words on both sides and compares.
fn pack_unpack_both(g: &Gpu, name: &str, bits: &[u32]) {
    let n = bits.len();
    let want = cpu_pack(bits);
    let got = gpu_pack(g, bits);
    check_packed(&format!("{name} pack n={n}"), bits, &got, &want);
    let back = gpu_unpack(g, &want, n);
    check_unpacked(
        &format!("{name} unpack n={n}"),
        &want,
        &back,
        &cpu_unpack(&want, n),
    );
}

/// Normals scaled by 2^e for e across the whole f32 range (subnormal to overflowing), `[n]`.
fn normals(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            let e = rng.below(280) as i32 - 150;
            (rng.normal() * 2f32.powi(e)).to_bits()
        })
        .collect()
}

/// Hand-picked f32 bit patterns at every rounding and classification edge.
fn edges() -> Vec<u32> {
    let mut v = vec![
        // ties (low 16 bits 0x8000): even bit 16 rounds down, odd rounds up
        0x3f80_8000, // 1.00390625: 0x3f80 even → 0x3f80
        0x3f81_8000, // odd → 0x3f82
        0xbf80_8000,
        0xbf81_8000,
        0x4049_8000,
        0x4048_8000,
        // just below / above a tie
        0x3f80_7fff,
        0x3f80_8001,
        0x3f81_7fff,
        // round up into the next exponent
        0x3f7f_ffff, // just below 1.0 → 1.0
        0x3fff_8000, // tie, odd: carries into the exponent → 2.0
        0xbf7f_c000,
        0x007f_ffff, // largest subnormal → smallest normal
        // to infinity and just short of it
        f32::MAX.to_bits(),
        (-f32::MAX).to_bits(),
        0x7f7f_8000, // tie on the largest bf16 (odd) → inf
        0x7f7e_8000, // tie, even → stays finite
        0x7f7f_7fff, // largest value that stays finite
        // ±0 and subnormals
        0x0000_0000,
        0x8000_0000,
        0x0000_0001,
        0x8000_0001,
        0x0000_8000, // subnormal tie, even → 0
        0x0001_8000, // subnormal tie, odd → 0x0002
        0x0000_ffff,
        0x8001_0000,
        0x0040_0000,
        // ±inf
        0x7f80_0000,
        0xff80_0000,
        // NaNs: quiet, signalling, payloads only in the low 16 bits, all ones, negative
        0x7fc0_0000,
        0xffc0_0000,
        0x7f80_0001, // signalling, payload below bit 16: must not become inf
        0xff80_0001,
        0x7f80_8000, // would carry into the sign bit under plain rounding
        0x7fbf_ffff,
        0x7fff_ffff,
        0xffff_ffff,
        0x7fc1_2345,
        0xffa5_5a5a,
        0x7f81_0000,
    ];
    v.extend([1.0f32, -1.0, 0.1, -3.75, 1e-40, 6e-39, 1e38, 3.4e38].map(f32::to_bits));
    v
}

#[test]
fn pack_unpack_edges_match_twin() {
    let Some(g) = gpu::test_gpu() else { return };
    println!("adapter: {} ({:?})", g.info.name, g.info.backend);
    let e = edges();
    // each edge at an even and at an odd position, in odd- and even-length inputs
    pack_unpack_both(&g, "edges", &e);
    let mut shifted = vec![0x3f80_0000];
    shifted.extend(&e);
    pack_unpack_both(&g, "edges shifted", &shifted);
    for &x in &e {
        pack_unpack_both(&g, "edge alone", &[x]);
    }
}

#[test]
fn pack_unpack_normals_match_twin_at_odd_and_even_lengths() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(16);
    for n in [1, 2, 3, 1023, 1024, 4097, 70_001] {
        let x = normals(&mut rng, n);
        pack_unpack_both(&g, "normals", &x);
    }
}

#[test]
fn pack_matches_twin_on_random_bit_patterns() {
    let Some(g) = gpu::test_gpu() else { return };
    let mut rng = Rng::new(17);
    let n = (1 << 18) + 1;
    let mut x: Vec<u32> = (0..n).map(|_| rng.next_u64() as u32).collect();
    // a quarter of them NaNs with random payloads (both signs), the rest whatever came out
    for (i, b) in x.iter_mut().enumerate() {
        if i % 4 == 0 {
            *b |= 0x7f80_0000;
            if *b & 0x007f_ffff == 0 {
                *b |= 1;
            }
        }
    }
    pack_unpack_both(&g, "random bits", &x);
}

#[test]
fn unpack_matches_twin_on_every_bf16_pattern() {
    let Some(g) = gpu::test_gpu() else { return };
    // every 16-bit pattern once, including signalling NaNs (which widen quiet, as in `half`)
    let words: Vec<u32> = (0..1u32 << 15)
        .map(|i| (2 * i) | ((2 * i + 1) << 16))
        .collect();
    let n = 1 << 16;
    let got = gpu_unpack(&g, &words, n);
    check_unpacked("all patterns", &words, &got, &cpu_unpack(&words, n));
    // odd n: the high half of the last word is ignored, whatever it holds
    let n = (1 << 16) - 1;
    let got = gpu_unpack(&g, &words, n);
    check_unpacked("all patterns odd", &words, &got, &cpu_unpack(&words, n));
}

#[test]
fn wrong_lengths_are_config_errors() {
    let Some(g) = gpu::test_gpu() else { return };
    let f = g.buffer("f32", 5);
    for words in [2, 4] {
        let w = g.buffer("words", words);
        for (what, r) in [
            ("pack", k::pack(&g, &w, &f)),
            ("unpack", k::unpack(&g, &f, &w)),
        ] {
            match r {
                Err(Error::Config(m)) => assert!(m.contains("need 3"), "{what}: {m}"),
                Err(e) => panic!("{what} with {words} words: wrong error {e}"),
                Ok(_) => panic!("{what} with {words} words for 5 elements was accepted"),
            }
        }
    }
    let w = g.buffer("words", 3);
    assert!(k::pack(&g, &w, &f).is_ok());
    assert!(k::unpack(&g, &f, &w).is_ok());
}

#[test]
fn twin_known_values() {
    // 1.0 = 0x3f80 low, 2.0 = 0x4000 high; odd n leaves the high half 0
    assert_eq!(cpu::pack_bf16(&[1.0, 2.0]), vec![0x4000_3f80]);
    assert_eq!(cpu::pack_bf16(&[-1.0]), vec![0x0000_bf80]);
    let ties: Vec<f32> = [0x3f80_8000u32, 0x3f81_8000, 0x7f7f_ffff, 0x7f80_0001]
        .map(f32::from_bits)
        .to_vec();
    // even tie down, odd tie up, f32::MAX to inf, signalling NaN to quiet NaN
    assert_eq!(cpu::pack_bf16(&ties), vec![0x3f82_3f80, 0x7fc0_7f80]);
    assert_eq!(cpu::unpack_bf16(&[0x4000_3f80], 2), vec![1.0, 2.0]);
    assert_eq!(cpu::unpack_bf16(&[0xdead_3f80], 1), vec![1.0]);
}

#[test]
fn twin_round_trip_is_identity_on_bf16_values() {
    // every bf16 pattern that is not a signalling NaN, widened: pack → unpack gives the same bits
    let x: Vec<f32> = (0..=u16::MAX as u32)
        .filter(|&h| !(half_is_nan(h) && h & 0x0040 == 0))
        .map(|h| f32::from_bits(h << 16))
        .collect();
    assert_eq!(x.len() % 2, 0);
    for xs in [&x[..], &x[1..]] {
        let back = cpu::unpack_bf16(&cpu::pack_bf16(xs), xs.len());
        for (a, b) in xs.iter().zip(&back) {
            assert_eq!(a.to_bits(), b.to_bits(), "{a} came back as {b}");
        }
    }
}
