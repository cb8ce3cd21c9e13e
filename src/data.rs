//! Training data: a built-in generated corpus (multi-digit addition, `482+39=521`) so everything
//! runs with no download, uniform random tokens (for throughput comparisons), or any text file
//! at byte level. Deterministic batches from a seed, a train/validation split, and a dataset
//! version (SHA-256 of the bytes + generator parameters).

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::Micro;
use crate::rng::Rng;

mod batch;
use batch::line_starts;
pub use batch::{eval_batch, Batcher};

/// The largest text file [`Corpus::text_file`] reads: 256 MiB, about 1.3 GB of memory while
/// loading (the bytes and their 4-byte tokens).
pub const MAX_TEXT_BYTES: usize = 256 << 20;

/// Token alphabet of the addition corpus.
pub const ADDITION_ALPHABET: &str = "0123456789+=\n";

/// How text maps to token ids.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Vocab {
    /// A fixed character list; id = index.
    Chars(String),
    /// Byte-level: id = byte value (256 ids).
    Bytes,
}

impl Vocab {
    pub fn size(&self) -> usize {
        match self {
            Vocab::Chars(s) => s.chars().count(),
            Vocab::Bytes => 256,
        }
    }
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Vocab::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Vocab::Chars(a) => text
                .chars()
                .map(|ch| {
                    a.chars()
                        .position(|x| x == ch)
                        .map(|i| i as u32)
                        .ok_or_else(|| {
                            Error::Data(format!("character {ch:?} is not in the vocabulary"))
                        })
                })
                .collect(),
        }
    }
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Vocab::Bytes => {
                String::from_utf8_lossy(&ids.iter().map(|&i| i as u8).collect::<Vec<_>>())
                    .into_owned()
            }
            Vocab::Chars(a) => {
                let chars: Vec<char> = a.chars().collect();
                ids.iter()
                    .map(|&i| chars.get(i as usize).copied().unwrap_or('?'))
                    .collect()
            }
        }
    }
}

/// Parameters of the addition generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AdditionSpec {
    /// Operands have 1..=digits digits.
    pub digits: u32,
    pub train_problems: usize,
    pub val_problems: usize,
    pub seed: u64,
    /// Write the sum least-significant digit first (`482+39=125` for 521): the order in which a
    /// left-to-right model can compute it digit by digit with carries, so a small model learns
    /// it in minutes. `false` writes it plainly.
    pub reverse: bool,
    /// Fixed width: operands zero-padded to `digits` digits and sums to `digits + 1`
    /// (`07+42=940` reversed, for 49), so every digit of every problem sits at the same offset
    /// from the problem's start. A small model finds the digit it must add by position, and
    /// learns the task at every seed tried where the varying-width text (`false`) leaves it
    /// stuck before its phase change at some seeds.
    pub pad: bool,
}

impl Default for AdditionSpec {
    fn default() -> Self {
        AdditionSpec {
            digits: 3,
            train_problems: 40_000,
            val_problems: 2_000,
            seed: 1234,
            reverse: true,
            pad: true,
        }
    }
}

/// A tokenised corpus with its split and version.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// "addition(digits=3,…)" or the file name.
    pub name: String,
    pub vocab: Vocab,
    pub train: Vec<u32>,
    pub val: Vec<u32>,
    /// `"sha256:<hex>"` of the corpus bytes and generator parameters.
    pub version: String,
    /// Held-out `(prompt, answer)` pairs for exact-match accuracy (addition only).
    pub val_problems: Vec<(String, String)>,
    /// Offsets in `train` where a training window may start (addition: the start of each
    /// problem, so every window begins where an evaluation prompt does); empty = anywhere.
    pub train_starts: Vec<usize>,
    /// The same for `val` (validation windows start there too).
    pub val_starts: Vec<usize>,
}

impl Corpus {
    /// The built-in addition corpus. A problem `a+b` is held out iff a hash of (a, b) says so,
    /// so no validation problem ever appears in the training text.
    pub fn addition(spec: AdditionSpec) -> Result<Corpus> {
        if spec.digits == 0 || spec.digits > 9 || spec.train_problems == 0 || spec.val_problems == 0
        {
            return Err(Error::Data(format!("impossible addition corpus {spec:?}")));
        }
        let mut rng = Rng::new(spec.seed);
        let (mut train, mut val, mut val_problems) = (String::new(), String::new(), Vec::new());
        let (mut ntrain, mut tries) = (0usize, 0usize);
        let limit = 100 * (spec.train_problems + spec.val_problems);
        while ntrain < spec.train_problems || val_problems.len() < spec.val_problems {
            tries += 1;
            if tries > limit {
                return Err(Error::Data(format!(
                    "{spec:?}: too few distinct problems for a held-out split"
                )));
            }
            // operand lengths uniform in 1..=digits, then a uniform value of that length
            let operand = |rng: &mut Rng| {
                let d = 1 + rng.below(spec.digits as u64) as u32;
                let lo = if d == 1 { 0 } else { 10u64.pow(d - 1) };
                lo + rng.below(10u64.pow(d) - lo)
            };
            let (a, b) = (operand(&mut rng), operand(&mut rng));
            let held_out = (a.wrapping_mul(0x9E37_79B9) ^ b.wrapping_mul(0x85EB_CA6B)) % 10 == 0;
            let width = |v: u64, w: u32| match spec.pad {
                true => format!("{v:0w$}", w = w as usize),
                false => v.to_string(),
            };
            let sum = width(a + b, spec.digits + 1);
            let sum = if spec.reverse {
                sum.chars().rev().collect()
            } else {
                sum
            };
            let prompt = format!("{}+{}=", width(a, spec.digits), width(b, spec.digits));
            let line = format!("{prompt}{sum}\n");
            if held_out && val_problems.len() < spec.val_problems {
                val.push_str(&line);
                val_problems.push((prompt, sum));
            } else if !held_out && ntrain < spec.train_problems {
                train.push_str(&line);
                ntrain += 1;
            }
        }
        let vocab = Vocab::Chars(ADDITION_ALPHABET.to_string());
        // the varying-width corpus keeps the version it had before fixed width existed
        let params = match spec.pad {
            true => format!("{spec:?}"),
            false => format!(
                "AdditionSpec {{ digits: {}, train_problems: {}, val_problems: {}, seed: {}, \
                 reverse: {} }}",
                spec.digits, spec.train_problems, spec.val_problems, spec.seed, spec.reverse
            ),
        };
        Ok(Corpus {
            name: format!(
                "addition(digits={}, train={}, val={}, seed={}{}{})",
                spec.digits,
                spec.train_problems,
                spec.val_problems,
                spec.seed,
                if spec.reverse { ", reversed sums" } else { "" },
                if spec.pad { ", fixed width" } else { "" }
            ),
            version: version(&[params.as_bytes(), train.as_bytes(), val.as_bytes()]),
            train: vocab.encode(&train)?,
            val: vocab.encode(&val)?,
            vocab,
            train_starts: line_starts(&train),
            val_starts: line_starts(&val),
            val_problems,
        })
    }

    /// A small addition corpus for the throughput examples and benches, where only the shape
    /// of the batches matters: 3-digit problems, 4000 for training.
    pub fn throughput() -> Result<Corpus> {
        Corpus::addition(AdditionSpec {
            digits: 3,
            train_problems: 4000,
            val_problems: 10,
            seed: 5,
            reverse: true,
            pad: false,
        })
    }

    /// `tokens` ids drawn uniformly from a `vocab`-token vocabulary (2 to 62 tokens, written
    /// `0-9a-zA-Z` when decoded), the last tenth the validation split: data whose every
    /// next-token distribution is the same, so two frameworks trained on it do the same
    /// arithmetic per token (the throughput benchmark's corpus). At least 20 tokens.
    pub fn uniform(vocab: usize, tokens: usize, seed: u64) -> Result<Corpus> {
        const ALPHABET: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        if !(2..=ALPHABET.len()).contains(&vocab) || tokens < 20 {
            return Err(Error::Data(format!(
                "uniform corpus of {tokens} tokens over {vocab}: needs 2 to {} tokens in the \
                 vocabulary and at least 20 in the corpus",
                ALPHABET.len()
            )));
        }
        let mut rng = Rng::new(seed);
        let mut ids: Vec<u32> = (0..tokens)
            .map(|_| rng.below(vocab as u64) as u32)
            .collect();
        let val = ids.split_off(tokens - tokens / 10);
        let params = format!("uniform(vocab={vocab}, tokens={tokens}, seed={seed})");
        let bytes = |v: &[u32]| v.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>();
        Ok(Corpus {
            version: version(&[params.as_bytes(), &bytes(&ids), &bytes(&val)]),
            name: params,
            vocab: Vocab::Chars(ALPHABET[..vocab].to_string()),
            train: ids,
            val,
            val_problems: Vec::new(),
            train_starts: Vec::new(),
            val_starts: Vec::new(),
        })
    }

    /// A text file at byte level; the last `val_fraction` of the bytes is the validation split.
    /// The file must be UTF-8 text without NUL bytes (a binary or UTF-16 file is refused with
    /// the offset of its first offending byte) of at most [`MAX_TEXT_BYTES`] (each byte costs
    /// four of memory as a token, five while loading).
    pub fn text_file(path: &std::path::Path, val_fraction: f64) -> Result<Corpus> {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.is_file() && meta.len() > MAX_TEXT_BYTES as u64 {
                return Err(Error::Data(format!(
                    "{} holds {} bytes, more than the {} bytes ({} MiB) a text corpus may hold \
                     (every byte is a 4-byte token in memory): use a shorter text",
                    path.display(),
                    meta.len(),
                    MAX_TEXT_BYTES,
                    MAX_TEXT_BYTES >> 20
                )));
            }
        }
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Data(format!("cannot read {}: {e}", path.display())))?;
        if bytes.is_empty() {
            return Err(Error::Data(format!("{} is empty", path.display())));
        }
        if bytes.len() > MAX_TEXT_BYTES {
            return Err(Error::Data(format!(
                "{} holds more than the {MAX_TEXT_BYTES} bytes a text corpus may hold",
                path.display()
            )));
        }
        if let Some(at) = bytes.iter().position(|&b| b == 0) {
            return Err(Error::Data(format!(
                "{} is not text: a NUL byte at offset {at} (a binary file, or UTF-16 text: \
                 convert it to UTF-8)",
                path.display()
            )));
        }
        if let Err(e) = std::str::from_utf8(&bytes) {
            return Err(Error::Data(format!(
                "{} is not UTF-8 text: invalid byte 0x{:02x} at offset {} (convert it to UTF-8)",
                path.display(),
                bytes[e.valid_up_to()],
                e.valid_up_to()
            )));
        }
        if !(0.0..1.0).contains(&val_fraction) {
            return Err(Error::Data(format!(
                "validation fraction {val_fraction} is not in [0, 1)"
            )));
        }
        let split = ((bytes.len() as f64) * (1.0 - val_fraction)) as usize;
        let ids = |b: &[u8]| -> Vec<u32> { b.iter().map(|&b| b as u32).collect() };
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(Corpus {
            version: version(&[
                format!("bytes,val_fraction={val_fraction}").as_bytes(),
                &bytes,
            ]),
            name,
            vocab: Vocab::Bytes,
            train: ids(&bytes[..split]),
            val: ids(&bytes[split..]),
            val_problems: Vec::new(),
            train_starts: Vec::new(),
            val_starts: Vec::new(),
        })
    }

    /// A training batch: windows at `train_starts` when the corpus has them, else anywhere.
    pub fn train_batch(&self, batcher: &mut Batcher, micro: Micro) -> Result<(Vec<u32>, Vec<u32>)> {
        batcher.next_from(&self.train, micro, &self.train_starts)
    }

    /// Checks that both splits hold at least one window of `t + 1` tokens.
    pub fn check_context(&self, t: usize) -> Result<()> {
        for (split, d) in [("training", &self.train), ("validation", &self.val)] {
            if d.len() < t + 1 {
                return Err(Error::Data(format!(
                    "the {split} split of {} has {} tokens; a sequence of {t} needs at least {}: shorten the context or use more data",
                    self.name,
                    d.len(),
                    t + 1
                )));
            }
        }
        Ok(())
    }
}

fn version(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    format!("sha256:{}", hex(&h.finalize()))
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
