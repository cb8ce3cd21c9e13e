//! One planned layout ([`triaxis::cost::validate`]) trained on the layout engine and timed on
//! the device clock (one warm-up step, then medians of the measured steps, each replica one
//! device at a time): what `--validate` holds the planner's figures to.
//!
//! ```text
//! measure(mesh)   engine(mesh): bytes (dp, tp ledgers), placement, dp comm on the link model
//!                 dp > 1: engine(mesh with dp = 1): one replica alone, its clean device step
//! step            = replica's device step (kernels + tp all-reduces + pipeline sends)
//!                   + data-parallel all-reduce (the engine runs it after the backward pass)
//! ```

use crate::engine_steps::train_config;
use triaxis::cost::validate::Measured;
use triaxis::data::{Batcher, Corpus};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::error::{Error, Result};
use triaxis::gpu::Gpu;
use triaxis::measure::median;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro, Precision};
use triaxis::pipeline::Link as PipeLink;

/// Trains `mesh` on the first `mesh.devices()` of `gpus` for one warm-up step and `steps`
/// measured steps of `corpus` batches, each replica one device at a time (`serial`), its
/// communication costed on `link`; medians of the measured steps.
///
/// The engine runs its dp replicas at once, and virtual devices share this machine's cores, so
/// replica 0's kernels are slowed by the others and its device clock is inflated about dp-fold
/// on a CPU adapter. Every replica runs the same schedule on the same shapes, so for dp > 1 the
/// step is timed on one replica alone (the same mesh with dp = 1, its own engine), and the
/// engine's dp run gives the bytes, the data-parallel comm and its concurrent figure. Under
/// ZeRO the replica alone runs unsharded (the block-by-block gathers of ZeRO-3
/// show in the concurrent figure only). `precision`: f32, or bf16 mixed precision.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    gpus: &[Gpu],
    model: &GptConfig,
    mesh: &Mesh,
    micro_b: usize,
    link: &PipeLink,
    steps: usize,
    corpus: &Corpus,
    precision: Precision,
) -> Result<Measured> {
    let t0 = std::time::Instant::now();
    let go = |mesh: &Mesh| run(gpus, model, mesh, micro_b, link, steps, corpus, precision);
    let (full, blocks) = go(mesh)?;
    let alone = if mesh.dp > 1 {
        // (one replica has nothing to shard: ZeRO's step is timed as its unsharded compute)
        let one = Mesh {
            dp: 1,
            zero: 0,
            ..*mesh
        };
        go(&one)?.0
    } else {
        full.clone()
    };
    let (dp_bytes, tp_bytes) = full.bytes;
    Ok(Measured {
        step: alone.device_step + full.dp_comm,
        device_step: alone.device_step,
        device_step_concurrent: full.device_step,
        dp_comm: full.dp_comm,
        bubble: alone.bubble,
        dp_bytes,
        tp_bytes,
        blocks,
        state_bytes: full.state_bytes,
        activation_bytes: full.activation_bytes,
        wall: t0.elapsed().as_secs_f64(),
    })
}

/// Medians of one engine run.
#[derive(Clone, Debug)]
struct Run {
    device_step: f64,
    dp_comm: f64,
    bubble: Option<f64>,
    bytes: (u64, u64),
    state_bytes: u64,
    activation_bytes: u64,
}

#[allow(clippy::too_many_arguments)]
fn run(
    gpus: &[Gpu],
    model: &GptConfig,
    mesh: &Mesh,
    micro_b: usize,
    link: &PipeLink,
    steps: usize,
    corpus: &Corpus,
    precision: Precision,
) -> Result<(Run, Vec<String>)> {
    if steps == 0 || gpus.len() < mesh.devices() {
        return Err(Error::Config(format!(
            "measuring {} needs ≥ 1 step and {} devices, got {steps} steps and {} devices",
            mesh.describe(),
            mesh.devices(),
            gpus.len()
        )));
    }
    // microbatches of `micro_b` sequences of the full context, a warm-up step, no decay
    let micro = Micro {
        b: micro_b,
        t: model.ctx,
    };
    let cfg = train_config(*model, micro, mesh.microbatches, steps + 1, 1.0);
    let opts = RuntimeOptions {
        link: *link,
        tp_link: *link,
        serial: true,
        precision,
        ..RuntimeOptions::default()
    };
    // this run's activation peak only (the devices outlive the layouts run before it)
    for g in &gpus[..mesh.devices()] {
        g.reset_memory_peaks();
    }
    let mut engine = Engine::new(&gpus[..mesh.devices()], cfg, *mesh, opts)?;
    let mut batcher = Batcher::new(1);
    let (mut dev, mut dp, mut bubble) = (vec![], vec![], vec![]);
    let mut bytes: Option<(u64, u64)> = None;
    for s in 0..=steps {
        let batches = (0..engine.batches_per_step())
            .map(|_| corpus.train_batch(&mut batcher, micro))
            .collect::<Result<Vec<_>>>()?;
        let c = engine.step(&batches, s)?;
        if s == 0 {
            continue;
        }
        dev.push(c.device_step);
        dp.push(c.dp_comm.max(0.0));
        bubble.extend(c.bubble);
        match bytes {
            Some(b) if b != (c.dp_bytes, c.tp_bytes) => {
                return Err(Error::Config(format!(
                    "{}: step {s} sent {:?} bytes (dp, tp), step 1 sent {b:?}",
                    mesh.describe(),
                    (c.dp_bytes, c.tp_bytes)
                )))
            }
            _ => bytes = Some((c.dp_bytes, c.tp_bytes)),
        }
    }
    let r = Run {
        device_step: median(&dev),
        dp_comm: median(&dp),
        bubble: (!bubble.is_empty()).then(|| median(&bubble)),
        bytes: bytes.unwrap_or_default(),
        state_bytes: gpus[..mesh.devices()]
            .iter()
            .map(|g| g.memory().current.model_state())
            .max()
            .unwrap_or(0),
        activation_bytes: gpus[..mesh.devices()]
            .iter()
            .map(|g| g.memory().peak.activations)
            .max()
            .unwrap_or(0),
    };
    Ok((
        r,
        engine
            .placement()
            .iter()
            .map(|p| p.blocks.clone())
            .collect(),
    ))
}
