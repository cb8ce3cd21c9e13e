//! The planner's flags, checked before anything is planned or any device is opened: every
//! numeric flag against a generous cap, each error naming the flag and its constraint; and the
//! preset a run without a model plans.
//!
//! The caps are [`CAPS`] (shown by `--help`); the sequence cap is 16 times the examples' as
//! the planner is analytic and long-context models exist. The cluster's device count and the
//! model's shape are then checked by the library (`Cluster::new`, `ModelShape`).

use crate::flags;
use clap::ValueEnum;
use triaxis::gpu;
use triaxis::pipeline::Link as PipeLink;

use super::{Cli, Preset};

/// The caps of [`check`], for `--help`.
pub const CAPS: &str = "Caps: --params ≤ 1e15, --layers ≤ 4096, --hidden and --heads ≤ 65536, \
--seq ≤ 1048576, --vocab ≤ 16777216, --nodes ≤ 65536, --devices-per-node and --devices ≤ 1024, \
--mem-gb, --intra-gbps, --inter-gbps, --tflops in (0, 1e6], latencies in [0, 1e6] µs, \
--global-batch ≤ 1048576, --top ≤ 1000, --steps ≤ 1e6, --adapter ≤ 255.";

/// Sequence length cap of the planner (tokens).
const MAX_SEQ: usize = 1 << 20;
/// Vocabulary cap.
const MAX_VOCAB: usize = 1 << 24;
/// Node count cap (the planner also caps nodes × devices per node).
const MAX_NODES: usize = 65536;
/// The preset a run without `--preset`, `--params`, `--layers` or `--hidden` plans: the first
/// one the module doc shows.
pub const DEFAULT_PRESET: Preset = Preset::SevenB1Node;

/// `v`, when given, must lie in `lo..=hi`.
fn given(flag: &str, v: Option<usize>, lo: usize, hi: usize) -> triaxis::Result<()> {
    v.map_or(Ok(()), |v| flags::in_range(flag, v, lo, hi))
}

/// `v`, when given, must be finite and in `(0, max]`.
fn given_positive(flag: &str, v: Option<f64>, max: f64) -> triaxis::Result<()> {
    v.map_or(Ok(()), |v| flags::positive(flag, v, max))
}

/// Every flag, before any planning or device work.
pub fn check(cli: &Cli) -> anyhow::Result<()> {
    given_positive("--params", cli.params, 1e15)?;
    given("--layers", cli.layers, 1, flags::MAX_LAYERS)?;
    given("--hidden", cli.hidden, 1, flags::MAX_CHANNELS)?;
    given("--heads", cli.heads, 1, flags::MAX_CHANNELS)?;
    given("--seq", cli.seq, 1, MAX_SEQ)?;
    given("--vocab", cli.vocab, 1, MAX_VOCAB)?;
    given("--nodes", cli.nodes, 1, MAX_NODES)?;
    given(
        "--devices-per-node",
        cli.devices_per_node,
        1,
        flags::MAX_DEGREE,
    )?;
    given_positive("--mem-gb", cli.mem_gb, 1e6)?;
    given_positive("--intra-gbps", cli.intra_gbps, 1e6)?;
    given_positive("--inter-gbps", cli.inter_gbps, 1e6)?;
    flags::non_negative("--intra-latency-us", cli.intra_latency_us, 1e6)?;
    flags::non_negative("--inter-latency-us", cli.inter_latency_us, 1e6)?;
    given_positive("--tflops", cli.tflops, flags::MAX_TFLOPS)?;
    given(
        "--global-batch",
        cli.global_batch,
        1,
        flags::MAX_GLOBAL_BATCH,
    )?;
    flags::in_range("--top", cli.top, 1, 1000)?;
    given("--devices", cli.devices, 1, flags::MAX_DEGREE)?;
    flags::in_range("--steps", cli.steps, 1, flags::MAX_STEPS)?;
    given("--adapter", cli.adapter, 0, flags::MAX_ADAPTER)?;
    PipeLink::by_name(&cli.link).map_err(|e| anyhow::anyhow!("--link: {e}"))?;
    if let Some(b) = &cli.backend {
        gpu::parse_backends(b)?;
    }
    if cli.validate
        && (cli.preset.is_some()
            || cli.params.is_some()
            || cli.vocab.is_some()
            || cli.nodes.is_some())
    {
        anyhow::bail!(
            "--validate runs a GPT shape (--layers, --hidden, --heads, --seq) on the built-in corpus's \
             vocabulary over one node of --devices; drop --preset, --params, --vocab and --nodes"
        );
    }
    Ok(())
}

/// Plans [`DEFAULT_PRESET`] when no model is given (no `--preset`, `--params`, `--layers` or
/// `--hidden`; not with `--validate`, which has its own model); the line to print says so and
/// how to choose another.
pub fn default_preset(cli: &mut Cli) -> Option<String> {
    let no_model = cli.preset.is_none()
        && cli.params.is_none()
        && cli.layers.is_none()
        && cli.hidden.is_none();
    if cli.validate || !no_model {
        return None;
    }
    cli.preset = Some(DEFAULT_PRESET);
    let name = |p: &Preset| {
        p.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string())
    };
    let others: Vec<String> = Preset::value_variants()
        .iter()
        .filter(|p| name(p) != name(&DEFAULT_PRESET))
        .map(name)
        .collect();
    Some(format!(
        "preset   {} (the default: no model was given); choose another with --preset {}, or give \
         --params N or --layers L --hidden D",
        name(&DEFAULT_PRESET),
        others.join("|")
    ))
}
