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

/// "sha256:<hex>" of every shader source, by family.
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
    pub adapter: AdapterRecord,
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
    /// Where and why the run stopped early (absent when it finished).
    pub stopped: Option<StopRecord>,
}

/// An early stop: the step that failed, the error (naming device, stage, action and step for
/// worker failures) and the step of the last checkpoint, which is left intact.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StopRecord {
    pub step: usize,
    pub error: String,
    pub last_checkpoint: Option<usize>,
}

impl RunRecord {
    /// Writes the record as pretty JSON, creating parent folders.
    pub fn write(&self, path: &std::path::Path) -> Result<()> {
        let io = |e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            source: e,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Config(format!("record: {e}")))?;
        std::fs::write(path, json).map_err(io)
    }
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
