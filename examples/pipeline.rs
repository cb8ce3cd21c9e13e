//! The headline: how the pipeline bubble shrinks as the microbatch count grows, measured on two
//! clocks beside the theory, for every schedule.
//!
//! `cargo run --release --example pipeline` — 4 stages as virtual devices on the first adapter.
//! Writes `bubble_vs_m.svg`, one Chrome trace per schedule and `pipeline.json` to `--out`.
//!
//! Every flag is checked before any device work (see `validate`); the caps are generous:
//! stages and chunks ≤ 1024, microbatch counts, micro batch, sequence and width ≤ 65536,
//! layers ≤ 4096, measured steps ≤ 10⁶.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use triaxis::cpu::AdamW;
use triaxis::data::Batcher;
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{self, AdapterChoice, Gpu};
use triaxis::measure::block_times;
use triaxis::mesh::Mesh;
use triaxis::model::{fit, GptConfig, Micro, Precision};
use triaxis::pipeline::partition::describe_stages;
use triaxis::pipeline::partition::{stage_blocks, Balance};
use triaxis::pipeline::{Link, Schedule, ScheduleKind};
use triaxis::runtime::{PassTimes, Summary};
use triaxis::step::TrainConfig;

#[path = "support/flags.rs"]
mod flags;
#[path = "support/plot.rs"]
mod plot;
#[path = "support/progress.rs"]
mod progress;
use plot::{write_svg, Chart, Series};
use progress::say;

#[path = "support/model_flags.rs"]
mod model_flags;

#[derive(Parser, Debug)]
#[command(
    about = "Measure the pipeline bubble against the microbatch count, beside the theory",
    allow_negative_numbers = true
)]
struct Args {
    /// Pipeline stages (devices; 1 to 1024, each needs a block of the model).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    stages: usize,
    /// Schedules: comma list of gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev, or "all".
    #[arg(long, default_value = "all")]
    schedule: String,
    /// Microbatch counts to sweep (comma list, each 1 to 65536).
    #[arg(long, default_value = "1,2,4,8,16,32,64", allow_hyphen_values = true)]
    microbatches: String,
    /// Model chunks per device for the interleaved schedule (1 to 1024).
    #[arg(long, default_value_t = 2, value_parser = flags::count)]
    chunks: usize,
    /// Transformer layers (1 to 4096).
    #[arg(long, default_value_t = 8, value_parser = flags::count)]
    layers: usize,
    /// Model width (1 to 65536).
    #[arg(long, default_value_t = 64, value_parser = flags::count)]
    channels: usize,
    /// Attention heads (they must divide --channels).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    heads: usize,
    /// Tokens per sequence (1 to 65536, and shorter than the built-in corpus).
    #[arg(long, default_value_t = 32, value_parser = flags::count)]
    seq: usize,
    /// Sequences per microbatch (1 to 65536).
    #[arg(long, default_value_t = 4, value_parser = flags::count)]
    micro_batch: usize,
    /// Stage balance: params (parameter count) or time (measured per block).
    #[arg(long, default_value = "params")]
    balance: String,
    /// Devices: "virtual" (stages as virtual devices on one adapter) or "all" (one stage per
    /// adapter found, any backend mix; needs at least --stages adapters).
    #[arg(long, default_value = "virtual")]
    devices: String,
    #[arg(long)]
    backend: Option<String>,
    /// Adapter index, as the devices example lists them (at most 255).
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
    /// Link model for the device clock: nvlink, pcie, ethernet, ideal, measured (host staging).
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// Also run the wall-clock measurement one device at a time (the device clock always is).
    #[arg(long)]
    serial: bool,
    /// Wall-clock steps per point (1 to 10⁶), their median reported. The device clock replays
    /// the last of them, each pass at the 10th percentile of its kind over the passes this
    /// schedule's points have run one device at a time: its first points run such steps
    /// until every device has run 32 passes of each kind (at most 16 steps a point).
    #[arg(long, default_value_t = 1, value_parser = flags::count)]
    steps: usize,
    /// Precision: f32, or bf16 mixed precision (stages send 2-byte activations and gradients).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Output directory (created; must be writable).
    #[arg(long, default_value = "runs/pipeline")]
    out: PathBuf,
}

/// Passes of each kind every device has run, at least, before a point's device clock is read
/// (so the first points of a schedule take several steps and the low quantile is stable).
/// The passes pool over the points of one schedule: every point of it runs the same chunks on
/// the same devices, whatever its m, so a pass's work is the same at every point.
const SAMPLES: usize = 32;
/// The most steps one point runs for the samples: m = 1 takes 16, m = 2 another 8, and
/// larger m none (a schedule whose first point has m ≥ 2 takes ⌈32/m⌉ there).
const MAX_POOLED: usize = 16;
/// The device clock takes each pass at this quantile of its kind on its device over the pooled
/// passes: a quiet host's figure. A shared host's interference only ever adds time, in bursts
/// that span several steps and land on one device; the median moves with them, stage imbalance
/// and bubble with it, while a low quantile stays put (three consecutive runs: 25 of 37 points
/// within 1 point at the median of 8 passes, 36 of 37 at the 10th percentile of 32).
const QUIET: f64 = 0.1;

fn main() {
    let args = Args::parse();
    flags::exit_status(validate(&args), |checked| run(&args, checked));
}

/// The flags, checked and parsed.
struct Checked {
    kinds: Vec<ScheduleKind>,
    ms: Vec<usize>,
    choice: AdapterChoice,
    /// `None`: `--link measured`, measured once the devices are open.
    link: Option<Link>,
    m: model_flags::Model,
    precision: Precision,
}

/// Every flag, before any device work: the error names the flag and the constraint. The output
/// directory comes last (checking it creates it).
fn validate(a: &Args) -> anyhow::Result<Checked> {
    flags::in_range("--stages", a.stages, 1, flags::MAX_DEGREE)?;
    let ms: Vec<usize> = flags::list("--microbatches", &a.microbatches)?;
    flags::list_in_range("--microbatches", &ms, 1, flags::MAX_MICROBATCHES)?;
    flags::in_range("--chunks", a.chunks, 1, flags::MAX_DEGREE)?;
    flags::in_range("--steps", a.steps, 1, flags::MAX_STEPS)?;
    if let Some(i) = a.adapter {
        flags::in_range("--adapter", i, 0, flags::MAX_ADAPTER)?;
    }
    let m = model_flags::check(a.layers, a.channels, a.heads, a.seq, a.micro_batch)?;
    let kinds = parse_schedules(&a.schedule)?;
    let precision: Precision = a.precision.parse()?;
    if !matches!(a.balance.as_str(), "params" | "time") {
        anyhow::bail!("--balance must be params or time, not {:?}", a.balance);
    }
    if !matches!(a.devices.as_str(), "virtual" | "all") {
        anyhow::bail!("--devices must be virtual or all, not {:?}", a.devices);
    }
    let link = match a.link.as_str() {
        "measured" => None,
        name => Some(Link::by_name(name)?),
    };
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, false)?;
    for &k in &kinds {
        if !ms.iter().any(|&m| applicable(k, a.stages, m, a.chunks)) {
            let e = Schedule::new(k, a.stages, ms[0], chunks_of(k, a.chunks))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            anyhow::bail!(
                "--schedule {} takes none of --microbatches {ms:?} on --stages {}: {e}",
                k.name(),
                a.stages
            );
        }
        // every model stage needs a block: the embedding, a layer or the head
        let v = chunks_of(k, a.chunks);
        if a.stages * v > a.layers + 2 {
            anyhow::bail!(
                "--schedule {}: --stages {} × {} chunk(s) = {} model stages, but the model has \
                 only {} blocks (embedding, --layers {}, head); lower --stages{} or raise --layers",
                k.name(),
                a.stages,
                v,
                a.stages * v,
                a.layers + 2,
                a.layers,
                if v > 1 { " or --chunks" } else { "" }
            );
        }
    }
    flags::output_dir("--out", &a.out)?;
    Ok(Checked {
        kinds,
        ms,
        choice,
        link,
        m,
        precision,
    })
}

fn open_devices(a: &Args, choice: &AdapterChoice) -> anyhow::Result<Vec<Gpu>> {
    match a.devices.as_str() {
        "virtual" => Ok(Gpu::open_virtual(choice, a.stages)?),
        "all" => {
            let found = gpu::list_adapters(choice.backends);
            if found.len() < a.stages {
                anyhow::bail!(
                    "--devices all found {} adapter(s) for {} stages",
                    found.len(),
                    a.stages
                );
            }
            (0..a.stages)
                .map(|i| {
                    Ok(Gpu::open(&AdapterChoice {
                        backends: choice.backends,
                        software: false,
                        index: Some(i),
                    })?)
                })
                .collect()
        }
        other => anyhow::bail!("--devices must be virtual or all, not {other:?}"),
    }
}

fn parse_schedules(s: &str) -> anyhow::Result<Vec<ScheduleKind>> {
    if s == "all" {
        return Ok(ScheduleKind::ALL.to_vec());
    }
    Ok(s.split(',')
        .map(|x| x.trim().parse::<ScheduleKind>())
        .collect::<triaxis::Result<_>>()?)
}

fn run(a: &Args, c: Checked) -> anyhow::Result<()> {
    let Checked {
        kinds,
        ms,
        choice,
        link,
        m,
        precision,
    } = c;
    let model_flags::Model {
        corpus,
        model,
        micro,
    } = m;
    let gpus = open_devices(a, &choice)?;
    check_fit(&gpus, a, &kinds, &model, micro)?;
    let names: Vec<String> = gpus.iter().map(|g| g.adapter_name()).collect();
    println!("devices  {} ({})", names.join(" | "), a.devices);
    println!(
        "model    {model:?}, {} parameters; microbatch {} × {} tokens; {precision}",
        model.param_count(),
        micro.b,
        micro.t
    );
    let balance = match a.balance.as_str() {
        "params" => Balance::Params,
        _ => Balance::Time(block_times(&gpus[0], &model, micro, 5)?),
    };
    let link = match link {
        Some(l) => l,
        None => measure_link(&gpus[0], micro.tokens() * model.channels)?,
    };
    println!(
        "link     {} ({:.1} GB/s, {:.1} µs) for the device clock",
        link.name,
        link.bandwidth_bytes_per_s / 1e9,
        link.latency_s * 1e6
    );
    let total: usize = kinds
        .iter()
        .map(|k| {
            ms.iter()
                .filter(|&&m| applicable(*k, a.stages, m, a.chunks))
                .count()
        })
        .sum();
    let bar = progress::bar(total as u64);
    let mut rows: Vec<Summary> = Vec::new();
    let mut batcher = Batcher::new(1);
    for &kind in &kinds {
        let v = chunks_of(kind, a.chunks);
        // every pass this schedule's points have run on the device clock so far
        let mut carried = PassTimes::default();
        say(
            &bar,
            format!("\n{} (p = {}, v = {v})", kind.name(), a.stages),
        );
        say(
            &bar,
            format!(
                "{:>4} {:>8} {:>8} {:>15} {:>10} {:>7} {:>11} {:>11} {:>12} {:>13} {:>8}",
                "m",
                "theory",
                "costed",
                "device clk",
                "wall clk",
                "imbal.",
                "step (dev)",
                "step (wall)",
                "tokens/s dev",
                "tokens/s wall",
                "peak act"
            ),
        );
        for &m in ms
            .iter()
            .filter(|&&m| applicable(kind, a.stages, m, a.chunks))
        {
            bar.set_message(format!("{} m={m}", kind.name()));
            let cfg = TrainConfig {
                model,
                micro,
                grad_accum: m,
                steps: a.steps + 1,
                adam: AdamW::default(),
                warmup: 1,
                min_lr_frac: 1.0,
                seed: 1,
            };
            let mesh = Mesh {
                pp: a.stages,
                schedule: kind,
                microbatches: m,
                chunks: v,
                ..Mesh::default()
            };
            let opts = RuntimeOptions {
                serial: a.serial,
                link,
                balance: balance.clone(),
                precision,
                ..Default::default()
            };
            let mut engine = Engine::new(&gpus[..a.stages], cfg, mesh, opts)?;
            if m == ms[0] {
                for line in describe_stages(&model, &engine.stages()) {
                    say(&bar, format!("     {line}"));
                }
            }
            let mut batch = || {
                (0..m)
                    .map(|_| corpus.train_batch(&mut batcher, micro))
                    .collect::<triaxis::Result<Vec<_>>>()
            };
            let mut step = 0;
            let tokens = m * micro.tokens();
            let traced = m == 8 || (m == *ms.last().unwrap_or(&m) && !ms.contains(&8));
            // device clock: the pass times of this schedule's points so far. Until every device
            // has run each kind of pass SAMPLES times, the point first runs steps one device at
            // a time (so each pass's kernel time is its own) and adds their times; each pass
            // then costs the QUIET quantile of its kind over them. The engine's first step is
            // among them: its few slower first passes sit above that quantile, so it needs
            // no warm-up step of its own
            let short = SAMPLES.saturating_sub(carried.fewest());
            if short > 0 {
                engine.set_serial(true);
                engine.pool_steps(true);
                for _ in 0..short.div_ceil(m).min(MAX_POOLED) {
                    engine.step(&batch()?, step)?;
                    step += 1;
                }
                let times = engine.pass_times()?;
                carried.extend(&times.context("the engine pools its steps")?)?;
                engine.pool_steps(false);
            }
            // wall clock: the median step by wall time, devices running concurrently (unless
            // --serial); the device clock replays the last of them on the carried times
            engine.set_serial(a.serial);
            let mut walls = Vec::new();
            for _ in 0..a.steps {
                engine.step(&batch()?, step)?;
                walls.push(
                    engine
                        .summary(tokens)?
                        .context("the engine summarises its pipeline step")?,
                );
                step += 1;
            }
            let pooled = engine
                .pooled(&carried, tokens, traced, QUIET)?
                .context("the engine has run a step")?;
            walls.sort_by(|x, y| x.wall_step.total_cmp(&y.wall_step));
            let wall = walls.swap_remove(walls.len() / 2);
            let trace = pooled.trace;
            let spread = (pooled.bubble_range[1] - pooled.bubble_range[0]) / 2.0;
            let dev = pooled.summary;
            let sum = Summary {
                wall_step: wall.wall_step,
                wall_bubble: wall.wall_bubble,
                wall_busy: wall.wall_busy,
                tokens_per_s_wall: wall.tokens_per_s_wall,
                ..dev
            };
            if let Some(trace) = trace {
                std::fs::write(
                    a.out.join(format!("trace_{}.json", kind.name())),
                    serde_json::to_string(&trace)?,
                )?;
            }
            say(
                &bar,
                format!(
                    "{:>4} {:>7.1}% {:>7.1}% {:>8.1}±{:<4.1}% {:>9.1}% {:>6.1}% {:>9.1}ms {:>9.1}ms {:>12.0} {:>13.0} {:>8}",
                    m,
                    100.0 * sum.theory,
                    100.0 * sum.costed,
                    100.0 * sum.device_bubble,
                    100.0 * spread,
                    100.0 * sum.wall_bubble,
                    100.0 * sum.imbalance,
                    1e3 * sum.device_step,
                    1e3 * sum.wall_step,
                    sum.tokens_per_s_device,
                    sum.tokens_per_s_wall,
                    sum.peak_held.iter().max().copied().unwrap_or(0)
                ),
            );
            rows.push(sum);
            bar.inc(1);
        }
        if let Some(last) = rows.last().filter(|r| r.schedule == kind.name()) {
            let ms_of = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{:.1}", x * 1e3))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let idle: Vec<f64> = last
                .device_busy
                .iter()
                .map(|b| last.device_step - b)
                .collect();
            say(
                &bar,
                format!(
                    "     m = {}, per device on the device clock: busy {} ms, idle {} ms; peak activations per stage {:?}",
                    last.m,
                    ms_of(&last.device_busy),
                    ms_of(&idle),
                    last.peak_held
                ),
            );
        }
    }
    bar.finish_and_clear();
    write_outputs(a, &kinds, &rows)?;
    Ok(())
}

/// Every model stage of every schedule fits on its device, balanced by parameters
/// (`Pipeline::new` checks again for the balance chosen): refused before the link probe or the
/// block timing allocate anything.
fn check_fit(
    gpus: &[Gpu],
    a: &Args,
    kinds: &[ScheduleKind],
    model: &GptConfig,
    micro: Micro,
) -> anyhow::Result<()> {
    for &kind in kinds {
        let v = chunks_of(kind, a.chunks);
        let stages = stage_blocks(model, a.stages * v, &Balance::Params)?;
        // where each stage runs (any m the schedule takes, here 2p: the placement does not
        // depend on it)
        let placed = Schedule::new(kind, a.stages, 2 * a.stages, v)?;
        for (s, blocks) in stages.iter().enumerate() {
            fit::check(model, blocks, micro, 1, &gpus[placed.place(s).0].limits)?;
        }
    }
    Ok(())
}

/// Model chunks per device: `chunks` for the interleaved schedule, two for ZB-V, one for the
/// others.
fn chunks_of(kind: ScheduleKind, chunks: usize) -> usize {
    kind.fixed_chunks().unwrap_or(chunks)
}

/// Whether schedule `kind` takes `m` microbatches on `p` stages (interleaving needs m to be a
/// multiple of p, DualPipeV m ≥ 2p): the schedule's own constructor decides.
fn applicable(kind: ScheduleKind, p: usize, m: usize, chunks: usize) -> bool {
    Schedule::new(kind, p, m, chunks_of(kind, chunks)).is_ok()
}

/// Host staging speed: one download + upload of an activation-sized buffer.
fn measure_link(g: &Gpu, floats: usize) -> anyhow::Result<Link> {
    let buf = g.buffer("probe", floats);
    let data = vec![1.0f32; floats];
    let mut times = Vec::new();
    for _ in 0..7 {
        let t = std::time::Instant::now();
        g.upload(&buf, &data)?;
        let _: Vec<f32> = g.download(&buf)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let t = times[times.len() / 2];
    Ok(Link::measured((floats * 4) as f64 / t, 0.0))
}

fn write_outputs(a: &Args, kinds: &[ScheduleKind], rows: &[Summary]) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for k in kinds {
        let mine: Vec<&Summary> = rows.iter().filter(|r| r.schedule == k.name()).collect();
        if mine.is_empty() {
            continue;
        }
        series.push(Series {
            name: format!("{} theory", k.name()),
            points: mine.iter().map(|r| (r.m as f64, r.theory)).collect(),
            dashed: true,
        });
        series.push(Series {
            name: format!("{} device clock", k.name()),
            points: mine.iter().map(|r| (r.m as f64, r.device_bubble)).collect(),
            dashed: false,
        });
    }
    let title = format!("pipeline bubble vs microbatches (p = {})", a.stages);
    let chart = Chart {
        title: &title,
        x_label: "microbatches m",
        y_label: "bubble",
        log_x: true,
        y_percent: true,
        series: &series,
    };
    let svg = a.out.join("bubble_vs_m.svg");
    write_svg(&svg, &chart)?;
    let json = a.out.join("pipeline.json");
    std::fs::write(&json, serde_json::to_string_pretty(rows)?)?;
    println!(
        "\nwrote {}, {} and trace_<schedule>.json (open in https://ui.perfetto.dev)",
        svg.display(),
        json.display()
    );
    Ok(())
}
