//! What a built model shows its driver: its parameters in and out, the losses and logits of
//! its last forward, and the activations a pipeline stage sends on.

use super::{GpuModel, HeadActs};
use crate::error::{Error, Result};
use crate::gpu::View;

impl GpuModel {
    /// Uploads a host copy of the flat parameters (bf16: the master weights, and rounded).
    pub fn set_params(&self, flat: &[f32]) -> Result<()> {
        self.buffers.upload_params(&self.gpu, flat)
    }

    /// Reads the flat f32 parameters back (bf16: the master weights).
    pub fn params(&self) -> Result<Vec<f32>> {
        self.gpu.download(self.buffers.params_f32())
    }

    /// Per-token losses of the last forward pass (head ranges only).
    pub fn losses(&self) -> Result<Vec<f32>> {
        self.gpu.download(self.losses_view()?)
    }

    /// Where the forward writes its per-token losses [B·T] (head ranges only).
    pub fn losses_view(&self) -> Result<&View> {
        Ok(&self.head()?.losses)
    }

    /// Logits [B·T, V] of the last forward pass (head ranges only).
    pub fn logits(&self) -> Result<Vec<f32>> {
        self.gpu.download(&self.head()?.logits)
    }

    /// The head's activations; an error for a block range without the head.
    fn head(&self) -> Result<&HeadActs> {
        self.head
            .as_ref()
            .ok_or_else(|| Error::Config("this block range has no head".into()))
    }

    /// The range's output activations (what a pipeline stage sends forward).
    pub fn output(&self) -> &View {
        self.resid.last().expect("resid is never empty")
    }
}
