//! Which layouts the runtime trains in bf16 mixed precision.

use super::RuntimeOptions;
use crate::collective::Algo;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::model::Precision;
use crate::parallel::accumulate::Accumulation;

/// bf16 mixed precision runs one device, pipelines (whose stages move packed activations and
/// gradients as they are), data parallelism with every ZeRO stage and tensor parallelism (the
/// bf16 ring); the pairwise tree and the other all-reduce algorithms are not built for bf16.
pub(super) fn check(mesh: Mesh, opts: &RuntimeOptions) -> Result<()> {
    if opts.precision == Precision::F32 {
        return Ok(());
    }
    let what = if mesh.dp > 1 && opts.dp_algo != Algo::Ring {
        Some(format!(
            "the {:?} all-reduce (bf16 reduces on the ring)",
            opts.dp_algo
        ))
    } else if opts.accumulation == Accumulation::PairwiseTree {
        Some("pairwise-tree accumulation".to_string())
    } else {
        None
    };
    match what {
        Some(w) => Err(Error::Config(format!(
            "--precision {} runs one device, pipelines, data and tensor parallelism with the \
             ring all-reduce: {w} is not built for bf16 yet; use --precision f32",
            opts.precision
        ))),
        None => Ok(()),
    }
}
