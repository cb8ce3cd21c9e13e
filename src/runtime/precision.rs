//! Which layouts the runtime trains in bf16 mixed precision.

use super::RuntimeOptions;
use crate::collective::Algo;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::model::Precision;

/// bf16 mixed precision runs one device, pipelines (whose stages move packed activations and
/// gradients as they are), data parallelism with every ZeRO stage (the bf16 ring) or the
/// pairwise tree (the bf16 tree), and tensor parallelism (the bf16 ring); the naive all-reduce
/// is not built for bf16.
pub(super) fn check(mesh: Mesh, opts: &RuntimeOptions) -> Result<()> {
    if opts.precision == Precision::F32 {
        return Ok(());
    }
    let what = if mesh.dp > 1 && opts.dp_algo == Algo::Naive {
        Some("the naive all-reduce".to_string())
    } else {
        None
    };
    match what {
        Some(w) => Err(Error::Config(format!(
            "--precision {} reduces on the ring or the tree: {w} is not built for bf16 yet; \
             use --algo ring or tree, or --precision f32",
            opts.precision
        ))),
        None => Ok(()),
    }
}
