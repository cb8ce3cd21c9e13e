//! Helpers of the packed-bf16 kernel tests: packed random inputs, poisoned words, and the rule
//! comparing bf16 outputs with their twins (every element within 1 bf16 ulp, at least 99 %
//! bit-identical: the f32 GPU and CPU values may differ in their last bit, which can flip one
//! rounding) or exactly, where both sides sum in the same order.

use super::buf_u32;
use triaxis::error::{Error, Result};
use triaxis::gpu::{Gpu, View};
use triaxis::{cpu, rng::Rng};

/// A word no packed kernel writes: both halves are signalling NaNs, which narrowing (or a twin's
/// pack) never produces, so an unwritten word fails every comparison.
pub const POISON_WORD: u32 = 0x7f81_ff81;

/// A buffer of `words` poisoned words.
pub fn poisoned_words(g: &Gpu, words: usize) -> View {
    buf_u32(g, &vec![POISON_WORD; words])
}

/// `n` values uniform in [-a, a), packed: `[⌈n/2⌉]` words.
pub fn packed(rng: &mut Rng, n: usize, a: f32) -> Vec<u32> {
    cpu::pack_bf16(&rng.vec(n, a))
}

/// The bf16 bits of element `i` of packed `words`.
pub fn half_of(words: &[u32], i: usize) -> u16 {
    (words[i / 2] >> (16 * (i % 2))) as u16
}

fn is_nan(h: u16) -> bool {
    h & 0x7fff > 0x7f80
}

/// Position of a non-NaN bf16 on the number line, in ulps (±0 both 0).
fn ordinal(h: u16) -> i32 {
    let m = (h & 0x7fff) as i32;
    if h & 0x8000 != 0 {
        -m
    } else {
        m
    }
}

/// Running count of bit-identical halves over a test's comparisons.
#[derive(Default)]
pub struct Tally {
    pub same: usize,
    pub total: usize,
}

impl Tally {
    /// GPU vs twin words, every half (the unused high half of an odd tensor's last word too):
    /// NaNs must match bit for bit, other values within 1 ulp; a comparison of ≥ 1000 halves must
    /// itself be ≥ 99 % identical.
    pub fn check(&mut self, name: &str, gpu: &[u32], cpu: &[u32]) {
        assert_eq!(gpu.len(), cpu.len(), "{name}: word count");
        let n = 2 * gpu.len();
        let mut same = 0;
        for i in 0..n {
            let (a, b) = (half_of(gpu, i), half_of(cpu, i));
            if a == b {
                same += 1;
                continue;
            }
            assert!(
                !is_nan(a) && !is_nan(b) && (ordinal(a) - ordinal(b)).abs() <= 1,
                "{name}: element {i}: gpu {a:#06x} ({}) twin {b:#06x} ({}){}",
                f32::from_bits((a as u32) << 16),
                f32::from_bits((b as u32) << 16),
                if gpu[i / 2] == POISON_WORD {
                    " — not written"
                } else {
                    ""
                }
            );
        }
        if n >= 1000 {
            assert!(
                same * 100 >= n * 99,
                "{name}: only {same} of {n} elements bit-identical"
            );
        }
        println!("{name}: {same} of {n} elements bit-identical, the rest within 1 ulp");
        self.same += same;
        self.total += n;
    }

    /// GPU vs twin words, bit for bit.
    pub fn exact(&mut self, name: &str, gpu: &[u32], cpu: &[u32]) {
        assert_eq!(gpu.len(), cpu.len(), "{name}: word count");
        for (i, (a, b)) in gpu.iter().zip(cpu).enumerate() {
            assert_eq!(a, b, "{name}: word {i}: gpu {a:#010x} twin {b:#010x}");
        }
        self.same += 2 * gpu.len();
        self.total += 2 * gpu.len();
    }

    /// Asserts the whole test's ≥ 99 % bit-identical rate.
    pub fn finish(&self, name: &str) {
        println!(
            "{name}: {} of {} elements bit-identical",
            self.same, self.total
        );
        assert!(
            self.same * 100 >= self.total * 99,
            "{name}: only {} of {} elements bit-identical",
            self.same,
            self.total
        );
    }
}

/// Asserts `r` is a `Config` error whose message contains every one of `needles`.
pub fn assert_config<T>(what: &str, r: Result<T>, needles: &[&str]) {
    match r {
        Err(Error::Config(m)) => {
            for n in needles {
                assert!(m.contains(n), "{what}: message {m:?} lacks {n:?}");
            }
        }
        Err(e) => panic!("{what}: wrong error kind: {e}"),
        Ok(_) => panic!("{what}: accepted"),
    }
}

/// The one software device of a test (`None`, with a skip line, when there is no adapter).
pub fn test_device() -> Option<Gpu> {
    triaxis::gpu::test_gpus(1).map(|mut v| v.remove(0))
}
