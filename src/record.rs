//! The run record: what a run was (configuration, adapter, shader hashes, dataset version) and
//! what it produced (per-step loss, throughput, validation metrics, model checksum), as JSON.
//! A distributed result is reproducible when its record matches, not when its timing does.

use sha2::{Digest, Sha256};

use crate::data::hex;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::kernels::SHADERS;
use crate::memory::Usage;

#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterRecord {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
}

impl AdapterRecord {
    pub fn of(gpu: &Gpu) -> Self {
        let i = &gpu.info;
        AdapterRecord {
            name: i.name.clone(),
            backend: format!("{:?}", i.backend),
            device_type: format!("{:?}", i.device_type),
            driver: i.driver.clone(),
            driver_info: i.driver_info.clone(),
        }
    }
}

/// `"sha256:<hex>"` of every shader source, by family.
pub fn shader_hashes() -> Vec<(String, String)> {
    SHADERS
        .iter()
        .map(|(name, src)| {
            (
                name.to_string(),
                format!("sha256:{}", hex(&Sha256::digest(src.as_bytes()))),
            )
        })
        .collect()
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct StepRecord {
    pub step: usize,
    pub loss: f32,
    pub grad_norm: f32,
    pub lr: f32,
    pub tokens_per_s: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct EvalRecord {
    pub step: usize,
    pub val_loss: f32,
    /// Exact-match accuracy on held-out addition problems (addition corpus only).
    pub accuracy: Option<f32>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct DatasetRecord {
    pub name: String,
    pub version: String,
    pub train_tokens: usize,
    pub val_tokens: usize,
    /// Loss of the best unigram model of the training split (the "learned nothing" line).
    pub unigram_loss: f32,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct RunRecord {
    pub triaxis_version: &'static str,
    pub config: serde_json::Value,
    /// The adapter of device 0 (absent when the run stopped before opening one).
    pub adapter: Option<AdapterRecord>,
    pub shaders: Vec<(String, String)>,
    pub dataset: DatasetRecord,
    pub parameters: usize,
    pub steps: Vec<StepRecord>,
    pub evals: Vec<EvalRecord>,
    pub wall_time_s: f64,
    pub tokens_per_s: f64,
    pub sample: String,
    pub model_checksum: String,
    /// Per device: bytes held at the end and the peak of each memory-ledger category
    /// (parameters, gradients, optimizer state, activations, comm staging) over the run.
    pub memory: Vec<Usage>,
    /// The parallel layout, device placement and per-axis costs (bubble, communication).
    pub parallel: Option<serde_json::Value>,
    /// How the run ended: finished, interrupted by a signal, a failed step, a non-finite
    /// loss or gradient, or another error after the start (`None` only while it runs).
    pub stopped: Option<StopRecord>,
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// Every step ran.
    Finished,
    /// SIGINT or SIGTERM: the current step finished (or was abandoned), then the run saved.
    Interrupted,
    /// A worker failed (error, panic, lost device, timeout), named in `error`.
    Fault,
    /// The loss or a gradient was NaN or infinite; the step stopped before its update.
    NonFinite,
    /// Anything else after the start: an unusable checkpoint to resume, a write that failed.
    Error,
}

impl StopReason {
    /// The reason a run that failed with `e` stopped.
    pub fn of(e: &Error) -> StopReason {
        match e {
            Error::Worker { action, .. } if action == "loss" || action == "gradient check" => {
                StopReason::NonFinite
            }
            Error::Worker { .. } | Error::Device(_) => StopReason::Fault,
            _ => StopReason::Error,
        }
    }
}

/// How and where a run ended: the reason, the index of the first step not completed (the step
/// count done), the error (naming device, stage, action and step for worker failures), the
/// signal, and the last checkpoint — which is left intact.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StopRecord {
    pub reason: StopReason,
    pub step: usize,
    pub error: Option<String>,
    /// "SIGINT" / "SIGTERM" for an interrupted run.
    pub signal: Option<&'static str>,
    /// An interrupted step that could not finish within the grace period and was dropped.
    pub abandoned_step: bool,
    /// Step count of the last checkpoint written (or resumed from).
    pub last_checkpoint: Option<usize>,
    /// Its path.
    pub checkpoint: Option<String>,
}

impl RunRecord {
    /// Writes the record as pretty JSON, creating parent folders; through a temporary file and
    /// a rename, so a reader (or a kill) never sees half a record.
    pub fn write(&self, path: &std::path::Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Config(format!("record: {e}")))?;
        write_text(path, &json)
    }
}

/// Writes `text` to `path` (its directory created) through `<path>.tmp-<pid>` beside it and a
/// rename, so a failed write leaves any earlier file whole and no other file is touched.
pub fn write_text(path: &std::path::Path, text: &str) -> Result<()> {
    let io = |e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        source: e,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
}

/// The memory ledger of each device (current bytes, peaks since the ledger's last reset).
pub fn memory_of(gpus: &[Gpu]) -> Vec<Usage> {
    gpus.iter().map(|g| g.memory()).collect()
}

/// Cross-entropy (nats) of the unigram distribution of `tokens` on itself.
pub fn unigram_loss(tokens: &[u32], vocab: usize) -> f32 {
    let mut counts = vec![0usize; vocab];
    for &t in tokens {
        counts[t as usize] += 1;
    }
    let n = tokens.len().max(1) as f64;
    -counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| (c as f64 / n) * (c as f64 / n).ln())
        .sum::<f64>() as f32
}
