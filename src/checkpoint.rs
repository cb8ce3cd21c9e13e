//! Checkpoints: the whole training state of one model — parameters, AdamW moments, the step
//! count and the data cursor — in one [safetensors](https://github.com/huggingface/safetensors)
//! file, so any safetensors reader can open the weights.
//!
//! ```text
//! | u64 n | header: n bytes of JSON, space-padded to 8 | tensor bytes (f32, little-endian) |
//! header: "__metadata__": { format, model, train, step, data_cursor, layout,
//!                           dataset_version, sha256 }      (all strings)
//!         "param/<name>", "adam_m/<name>", "adam_v/<name>": { dtype F32, full shape, offsets }
//! data:   every param/… tensor in layout order, then every adam_m/…, then every adam_v/…
//! ```
//!
//! The flat layout is `model.layout(&model.blocks())`; its alignment padding is zero and not
//! stored. The header is written in a fixed key order, so the same state always gives the same
//! file, byte for byte.
//!
//! `sha256` covers the metadata and the tensors, and is verified on load:
//!
//! ```text
//! sha256 = SHA-256( u64 count of metadata entries but sha256,
//!                   each such entry in key order (bytewise): u64 len, key, u64 len, value,
//!                   each tensor in data order:               u64 len, name, u64 len, bytes )
//! ```
//!
//! (all lengths little-endian), so an edited step, data cursor, layout, training configuration
//! or dataset version is refused like a flipped tensor byte. Files of the previous format
//! [`FORMAT_V1`] (`triaxis-checkpoint-v1`) still load: their `sha256` covers only the tensors
//! (the second half of the rule above), so their metadata is not protected. Saves always write
//! [`FORMAT`].
//!
//! [`Checkpoint::save`] is atomic: it writes `<name>.tmp-<pid>` in the target's directory,
//! flushes and syncs it, then renames it over the target; on any failure the temporary file is
//! removed and a checkpoint already at the target is left untouched. A crash between the write
//! and the rename leaves the previous checkpoint at the target and the complete new one in the
//! temporary file. [`Checkpoint::load`] answers every damaged or foreign file with
//! [`Error::Checkpoint`] naming the file and the problem.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::data::hex;
use crate::error::{Error, Result};
use crate::model::GptConfig;

mod decode;
mod write;
use decode::decode;
use write::write_atomic;

/// The `format` metadata value of this version of the file format (the checksum covers the
/// metadata and the tensors).
pub const FORMAT: &str = "triaxis-checkpoint-v2";

/// The `format` of the previous version, still loaded: its checksum covers only the tensors.
pub const FORMAT_V1: &str = "triaxis-checkpoint-v1";

/// The environment variable of the crash test hook of [`Checkpoint::save`].
pub const CRASH_ENV: &str = "TRIAXIS_CHECKPOINT_CRASH";

/// Name prefixes of the three stored copies of the layout, in data order.
pub const KINDS: [&str; 3] = ["param", "adam_m", "adam_v"];

/// The safetensors reader's limit on the header length.
const MAX_HEADER: u64 = 100_000_000;

/// The training state of one model, as saved between steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub model: GptConfig,
    /// The `TrainConfig` as JSON (for the record and mismatch messages).
    pub train: serde_json::Value,
    /// Optimizer steps completed: training resumes at this step index.
    pub step: usize,
    /// The one-device flat layout `model.layout(&model.blocks())` (padding zero).
    pub params: Vec<f32>,
    /// AdamW first and second moments, same layout.
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// `Batcher::state()` after the last consumed batch.
    pub data_cursor: u64,
    /// The parallel layout it was written under, e.g. "dp=2 tp=1 pp=2 zero=0 schedule=1f1b m=4 v=1".
    pub layout: String,
    pub dataset_version: String,
}

fn fail(path: &Path, msg: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.display().to_string(),
        msg: msg.into(),
    }
}

/// `x` as little-endian bytes (borrowed on little-endian hosts).
fn le_bytes(x: &[f32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(x))
    } else {
        Cow::Owned(x.iter().flat_map(|v| v.to_le_bytes()).collect())
    }
}

/// Adds one stored tensor (name and bytes, each length-prefixed) to the checksum.
fn hash_tensor(h: &mut Sha256, name: &str, bytes: &[u8]) {
    h.update((name.len() as u64).to_le_bytes());
    h.update(name.as_bytes());
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// Starts a [`FORMAT`] checksum: the entry count, then every metadata entry but `sha256` in
/// key order, each key and value length-prefixed (the tensors follow through [`hash_tensor`]).
fn hash_metadata<'a>(meta: impl IntoIterator<Item = (&'a str, &'a str)>) -> Sha256 {
    let mut entries: Vec<(&str, &str)> = meta.into_iter().filter(|(k, _)| *k != "sha256").collect();
    entries.sort_unstable();
    let mut h = Sha256::new();
    h.update((entries.len() as u64).to_le_bytes());
    for (key, value) in entries {
        hash_tensor(&mut h, key, value.as_bytes());
    }
    h
}

impl Checkpoint {
    /// The three flat buffers in data order ([`KINDS`]).
    fn flats(&self) -> [&[f32]; 3] {
        [&self.params, &self.m, &self.v]
    }

    /// Writes the checkpoint to `path` atomically (see the module doc), creating the parent
    /// directory if missing.
    ///
    /// Test hook: when the environment variable `TRIAXIS_CHECKPOINT_CRASH` ([`CRASH_ENV`]) is
    /// `before-rename`, the process aborts (`std::process::abort`) after the temporary file is
    /// written and synced and before it is renamed over `path`, as a crash there would; tests
    /// use it to check that the previous checkpoint survives. Other values are ignored.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.model
            .validate()
            .map_err(|e| fail(path, format!("cannot save an invalid model: {e}")))?;
        let layout = self.model.layout(&self.model.blocks());
        for (kind, flat) in KINDS.iter().zip(self.flats()) {
            if flat.len() != layout.total {
                return Err(fail(
                    path,
                    format!(
                        "cannot save: {kind} holds {} values but the model's one-device layout needs {}: pass the flat buffers of {:?}",
                        flat.len(),
                        layout.total,
                        self.model
                    ),
                ));
            }
        }
        let model = serde_json::to_string(&self.model)
            .map_err(|e| fail(path, format!("cannot encode the model: {e}")))?;
        let mut meta: BTreeMap<&str, String> = [
            ("format", FORMAT.to_string()),
            ("model", model),
            ("train", self.train.to_string()),
            ("step", self.step.to_string()),
            ("data_cursor", self.data_cursor.to_string()),
            ("layout", self.layout.clone()),
            ("dataset_version", self.dataset_version.clone()),
        ]
        .into_iter()
        .collect();
        // the checksum: the metadata above, then (stored name, shape, bytes) in data order
        let mut h = hash_metadata(meta.iter().map(|(k, v)| (*k, v.as_str())));
        let mut tensors = Vec::with_capacity(3 * layout.tensors.len());
        for (kind, flat) in KINDS.iter().zip(self.flats()) {
            for t in &layout.tensors {
                let name = format!("{kind}/{}", t.name);
                let bytes = le_bytes(&flat[t.offset..t.offset + t.len]);
                hash_tensor(&mut h, &name, &bytes);
                tensors.push((name, &t.shape, bytes));
            }
        }
        meta.insert("sha256", format!("sha256:{}", hex(&h.finalize())));
        // the header: a map with sorted keys (BTreeMap), so the bytes are always the same
        let mut header = BTreeMap::new();
        header.insert("__metadata__".to_string(), serde_json::json!(meta));
        let mut offset = 0usize;
        for (name, shape, bytes) in &tensors {
            let end = offset + bytes.len();
            header.insert(
                name.clone(),
                serde_json::json!({ "dtype": "F32", "shape": shape, "data_offsets": [offset, end] }),
            );
            offset = end;
        }
        let mut head = serde_json::to_vec(&header)
            .map_err(|e| fail(path, format!("cannot encode the header: {e}")))?;
        head.resize(head.len().next_multiple_of(8), b' ');
        write_atomic(path, |w| {
            w.write_all(&(head.len() as u64).to_le_bytes())?;
            w.write_all(&head)?;
            tensors.iter().try_for_each(|(_, _, b)| w.write_all(b))
        })
    }

    /// Reads and verifies the checkpoint at `path` (see the module doc for what is checked).
    pub fn load(path: &Path) -> Result<Checkpoint> {
        let bytes = std::fs::read(path).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "the file does not exist: check the path, or start a new run without resuming"
                }
                _ => "the file cannot be read: check its permissions and that it is a file",
            };
            fail(path, format!("{hint} ({e})"))
        })?;
        decode(path, &bytes)
    }

    /// [`Checkpoint::load`], then a check that it holds `model` (the same GptConfig), naming the
    /// file and every differing field.
    pub fn load_for(path: &Path, model: &GptConfig) -> Result<Checkpoint> {
        let ck = Checkpoint::load(path)?;
        ck.model_mismatch(model)
            .map_or(Ok(ck), |msg| Err(fail(path, msg)))
    }

    fn model_mismatch(&self, model: &GptConfig) -> Option<String> {
        let (a, b) = (&self.model, model);
        let fields = [
            ("vocab", a.vocab, b.vocab),
            ("ctx", a.ctx, b.ctx),
            ("channels", a.channels, b.channels),
            ("heads", a.heads, b.heads),
            ("layers", a.layers, b.layers),
        ];
        let diffs: Vec<String> = fields
            .iter()
            .filter(|(_, x, y)| x != y)
            .map(|(name, x, y)| format!("{name}: checkpoint {x}, this run {y}"))
            .collect();
        (!diffs.is_empty()).then(|| {
            format!(
                "was written for a different model ({}): resume with the checkpoint's model settings, or start a new run without resuming",
                diffs.join("; ")
            )
        })
    }

    /// Checks the checkpoint was written for the dataset `version`: the data cursor means
    /// nothing in other data.
    pub fn check_dataset(&self, version: &str) -> Result<()> {
        if self.dataset_version == version {
            return Ok(());
        }
        Err(Error::Checkpoint {
            path: format!("at step {}", self.step),
            msg: format!(
                "was written for dataset {} but this run's data is {version}: resume with the same data, or start a new run",
                self.dataset_version
            ),
        })
    }

    /// The top-level fields of the training configuration that differ from `train`, as
    /// "key: checkpoint X, this run Y" (for a resume message; an empty list when equal).
    pub fn train_differences(&self, train: &serde_json::Value) -> Vec<String> {
        let null = serde_json::Value::Null;
        match (self.train.as_object(), train.as_object()) {
            (Some(a), Some(b)) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                keys.into_iter()
                    .filter_map(|k| {
                        let (x, y) = (a.get(k).unwrap_or(&null), b.get(k).unwrap_or(&null));
                        (x != y).then(|| format!("{k}: checkpoint {x}, this run {y}"))
                    })
                    .collect()
            }
            _ if self.train == *train => Vec::new(),
            _ => vec![format!(
                "train: checkpoint {}, this run {train}",
                self.train
            )],
        }
    }
}
