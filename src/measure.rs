//! Device timings the pure models are fed with: each block's forward + backward time for a
//! time-balanced pipeline partition ([`block_times`]), and the median the measuring programs
//! report. (The planner's check against a trained layout is the `plan` example's own.)

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::gpu_model::GpuModel;
use crate::model::{Block, GptConfig, Micro};
use std::ops::Range;

/// The median of `xs` (the upper one for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Measures forward + backward time of every block of `cfg` for microbatches of shape `micro`
/// on `gpu` (median of `reps` timed runs per block, after one warm-up step): the weights for
/// [`crate::pipeline::partition::Balance::Time`].
pub fn block_times(gpu: &Gpu, cfg: &GptConfig, micro: Micro, reps: usize) -> Result<Vec<f64>> {
    let m = GpuModel::new(gpu, *cfg, &cfg.blocks(), micro, 1.0 / micro.tokens() as f32)?;
    m.set_params(&cfg.init(&m.buffers.layout, 0))?;
    let all: Vec<_> = m.forward.iter().chain(&m.backward).cloned().collect();
    gpu.run(&all)?;
    gpu.sync()?;
    let mut out = Vec::with_capacity(cfg.blocks().len());
    for block in cfg.blocks() {
        let range_of = |list: &[(Block, Range<usize>)]| {
            list.iter()
                .find(|(b, _)| *b == block)
                .map(|(_, r)| r.clone())
        };
        let (Some(f), Some(b)) = (range_of(&m.forward_blocks), range_of(&m.backward_blocks)) else {
            return Err(Error::Config(format!("block {block:?} has no ops")));
        };
        let mut t: Vec<f64> = (0..reps.max(1))
            .map(|_| {
                Ok(gpu.run_timed(&m.forward[f.clone()])?.as_secs_f64()
                    + gpu.run_timed(&m.backward[b.clone()])?.as_secs_f64())
            })
            .collect::<Result<_>>()?;
        t.sort_by(f64::total_cmp);
        out.push(t[t.len() / 2]);
    }
    Ok(out)
}
