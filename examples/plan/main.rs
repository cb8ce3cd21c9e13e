//! Plans how to split a GPT's training over a cluster, from the analytic cost model alone.
//!
//! Give a model (a preset, a parameter count, or a GPT shape), a cluster and a global batch;
//! the planner enumerates every dp × tp × pp layout (with ZeRO stage, schedule, microbatches),
//! keeps those that fit in memory, ranks them by predicted step time, applies docs/design.md's
//! decision guide and says why each other family lost. It first prints docs/design.md's reference
//! numbers from the same functions.
//!
//! ```text
//! cargo run --example plan                      # the default preset, 7b-1node
//! cargo run --example plan -- --preset 7b-1node
//! cargo run --example plan -- --preset 7b-2nodes
//! cargo run --example plan -- --layers 48 --hidden 6144 --heads 48 --nodes 2 --mem-gb 40
//! cargo run --example plan -- --params 13e9 --global-batch 128
//! cargo run --release --example plan -- --validate
//! cargo run --release --example plan -- --validate --devices 4 --link ethernet --top 6
//! ```
//!
//! `--validate` checks the planner on this machine: a small GPT (4 × 128, 4 heads, seq 32, the
//! built-in corpus's vocabulary, 16 sequences per step) on `--devices` virtual devices joined by
//! a `--link` preset. The device's rate is calibrated first (one device's step on the device
//! clock; FLOP/s = the cost model's 6·N·tokens / seconds), then the planner's top `--top`
//! layouts the engine offers (ZeRO-2/3 with tensor or pipeline stages skipped) are trained on
//! the layout engine and printed beside their prediction: step time, bubble, data- and
//! tensor-parallel bytes per device, and model-state bytes per device (the memory ledger's),
//! with measured / predicted. Byte counts and model state are also checked to equal what the
//! engine's own buffers and shard grid imply, exactly. `--validate --bytes bf16` trains the
//! same layouts in bf16 mixed precision (P, G, K = 2, 2, 12 bytes; 2-byte collectives).
//!
//! Every flag is checked first, against the caps `checks` lists, before anything is planned or
//! a device opened.

mod checks;
#[path = "../support/engine_steps.rs"]
mod engine_steps;
#[path = "../support/flags.rs"]
mod flags;
mod measure;
mod validate;

use clap::{Parser, ValueEnum};
use std::process::ExitCode;
use triaxis::cost::comm::{fraction_lost, large_p_allreduce_bytes, ring_allreduce_bytes};
use triaxis::cost::memory::zero_state_bytes;
use triaxis::cost::{
    pipeline, plan, Cluster, Convention, Footprint, Link, MeshCost, ModelShape, Overlap,
    PlanRequest, Ranking, ZeroStage, GB,
};
use triaxis::pipeline::ScheduleKind;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    /// 7e9 params (32 × 4096, 32 heads, seq 2048) on 1 node × 8 × 80 GB, 400 GB/s links.
    #[value(name = "7b-1node")]
    SevenB1Node,
    /// The same model on 2 nodes × 8 × 80 GB, 400 GB/s inside, 25 GB/s per device between.
    #[value(name = "7b-2nodes")]
    SevenB2Nodes,
    /// GPT-2 small (124M: 12 × 768, seq 1024) on 1 node × 8 × 80 GB.
    #[value(name = "gpt2-1node")]
    Gpt2OneNode,
    /// 70e9 params (80 × 8192, 64 heads, seq 2048) on 4 nodes × 8 × 80 GB.
    #[value(name = "70b-4nodes")]
    SeventyB4Nodes,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Bytes {
    /// Mixed-precision Adam: P=2, G=2, K=12, bf16 activations.
    Bf16,
    /// f32 Adam: P=4, G=4, K=8, f32 activations.
    F32,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OverlapArg {
    None,
    Backward,
    Full,
}

/// Plan a dp × tp × pp (+ ZeRO) layout for a GPT on a cluster, from the analytic cost model.
#[derive(Parser, Debug)]
#[command(about, long_about = None, allow_negative_numbers = true, after_help = checks::CAPS)]
struct Cli {
    /// A common case; any flag below overrides its value. Without a model (no --preset,
    /// --params, --layers or --hidden) the planner plans 7b-1node.
    #[arg(long)]
    preset: Option<Preset>,
    /// Parameter count, e.g. 7e9 (without a shape, a GPT-3-like shape is inferred; with
    /// --layers/--hidden given and no --params, the count is 12·L·d² + V·d + ctx·d).
    #[arg(long)]
    params: Option<f64>,
    #[arg(long, value_parser = flags::count)]
    layers: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    hidden: Option<usize>,
    #[arg(long, value_parser = flags::count)]
    heads: Option<usize>,
    /// Sequence length (tokens), default 2048.
    #[arg(long, value_parser = flags::count)]
    seq: Option<usize>,
    /// Vocabulary size, default 50257.
    #[arg(long, value_parser = flags::count)]
    vocab: Option<usize>,
    /// Nodes, default 1.
    #[arg(long, value_parser = flags::count)]
    nodes: Option<usize>,
    /// Devices per node, default 8.
    #[arg(long, value_parser = flags::count)]
    devices_per_node: Option<usize>,
    /// Usable memory per device in GB (after any framework reserve), default 80.
    #[arg(long)]
    mem_gb: Option<f64>,
    /// Intra-node link GB/s per device, default 400.
    #[arg(long)]
    intra_gbps: Option<f64>,
    /// Inter-node link GB/s per device, default 25.
    #[arg(long)]
    inter_gbps: Option<f64>,
    /// Intra-node latency per message, µs.
    #[arg(long, default_value_t = 3.0)]
    intra_latency_us: f64,
    /// Inter-node latency per message, µs.
    #[arg(long, default_value_t = 10.0)]
    inter_latency_us: f64,
    /// Achieved (not peak) TFLOP/s per device, default 300.
    #[arg(long)]
    tflops: Option<f64>,
    /// Sequences per optimizer step, default 64.
    #[arg(long, value_parser = flags::count)]
    global_batch: Option<usize>,
    /// Bytes per parameter split and activation width, default bf16 (with --validate: the
    /// precision the layouts train in, default f32).
    #[arg(long, value_enum)]
    bytes: Option<Bytes>,
    /// How data-parallel traffic overlaps compute.
    #[arg(long, value_enum, default_value_t = OverlapArg::Backward)]
    overlap: OverlapArg,
    /// Layouts to print (with --validate: to run).
    #[arg(long, default_value_t = 5, value_parser = flags::count)]
    top: usize,
    /// Run the planner's top layouts on this machine's virtual devices, predicted vs measured.
    #[arg(long)]
    validate: bool,
    /// --validate: virtual devices (one node), default 4.
    #[arg(long, value_parser = flags::count)]
    devices: Option<usize>,
    /// --validate: link preset between the devices: nvlink, pcie, ethernet.
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// --validate: measured steps per layout after one warm-up (medians are reported).
    #[arg(long, default_value_t = 5, value_parser = flags::count)]
    steps: usize,
    /// --validate: wgpu backend (vulkan, gl, …); default from WGPU_BACKEND.
    #[arg(long)]
    backend: Option<String>,
    /// --validate: adapter index.
    #[arg(long, value_parser = flags::count)]
    adapter: Option<usize>,
}

/// The values a preset (or the defaults) supplies before flags override them.
struct Base {
    params: Option<f64>,
    shape: Option<(usize, usize, usize)>,
    seq: usize,
    vocab: usize,
    nodes: usize,
}

fn base(preset: Option<Preset>) -> Base {
    let seven = (Some(7e9), Some((32, 4096, 32)), 2048, 32000);
    let (params, shape, seq, vocab, nodes) = match preset {
        None => (None, None, 2048, 50257, 1),
        Some(Preset::SevenB1Node) => (seven.0, seven.1, seven.2, seven.3, 1),
        Some(Preset::SevenB2Nodes) => (seven.0, seven.1, seven.2, seven.3, 2),
        Some(Preset::Gpt2OneNode) => (None, Some((12, 768, 12)), 1024, 50257, 1),
        Some(Preset::SeventyB4Nodes) => (Some(70e9), Some((80, 8192, 64)), 2048, 32000, 4),
    };
    Base {
        params,
        shape,
        seq,
        vocab,
        nodes,
    }
}

/// Builds the request from the preset and flags; errors say which flag to fix.
fn request(cli: &Cli) -> anyhow::Result<PlanRequest> {
    let b = base(cli.preset);
    let seq = cli.seq.unwrap_or(b.seq);
    let vocab = cli.vocab.unwrap_or(b.vocab);
    let reshaped =
        cli.layers.is_some() || cli.hidden.is_some() || cli.seq.is_some() || cli.vocab.is_some();
    // Heads default to the preset's, else to hidden/128 (head size 128).
    let shape = match (cli.layers, cli.hidden, b.shape) {
        (Some(l), Some(d), _) => Some((l, d, cli.heads.unwrap_or((d / 128).max(1)))),
        (l, d, Some((bl, bd, ba))) => {
            Some((l.unwrap_or(bl), d.unwrap_or(bd), cli.heads.unwrap_or(ba)))
        }
        (None, None, None) if cli.heads.is_none() => None,
        _ => anyhow::bail!("a GPT shape needs both --layers and --hidden (and optionally --heads)"),
    };
    let model = match (shape, cli.params) {
        (Some((l, d, a)), n) => match n.or(if reshaped { None } else { b.params }) {
            Some(n) => ModelShape::with_params(n, l, d, a, seq, vocab)?,
            None => ModelShape::gpt(l, d, a, seq, vocab)?,
        },
        (None, Some(n)) => ModelShape::from_params(n, seq, vocab)?,
        (None, None) => anyhow::bail!(
            "no model given: pass --preset, --params (e.g. 7e9), or --layers and --hidden"
        ),
    };
    let cluster = Cluster::new(
        cli.nodes.unwrap_or(b.nodes),
        cli.devices_per_node.unwrap_or(8),
        cli.mem_gb.unwrap_or(80.0),
        Link::gbps(cli.intra_gbps.unwrap_or(400.0)).with_latency_us(cli.intra_latency_us),
        Link::gbps(cli.inter_gbps.unwrap_or(25.0)).with_latency_us(cli.inter_latency_us),
        cli.tflops.unwrap_or(300.0),
    )?;
    let precision = match cli.bytes.unwrap_or(Bytes::Bf16) {
        Bytes::Bf16 => Footprint::mixed_adam(),
        Bytes::F32 => Footprint::f32_adam(),
    };
    let overlap = match cli.overlap {
        OverlapArg::None => Overlap::None,
        OverlapArg::Backward => Overlap::Backward,
        OverlapArg::Full => Overlap::Full,
    };
    Ok(PlanRequest {
        model,
        precision,
        cluster,
        global_batch: cli.global_batch.unwrap_or(64),
        overlap,
    })
}

/// docs/design.md's reference numbers, computed by the library's own functions.
fn print_reference() {
    let (n, p) = (7e9, 8);
    let s = n * 2.0;
    let link = Link::gbps(400.0);
    let (ring, large) = (ring_allreduce_bytes(s, p), large_p_allreduce_bytes(s));
    println!(
        "reference (docs/design.md): N = 7e9 bf16 → S = N·2 B = {:.1} GB of gradients",
        s / GB
    );
    println!(
        "  all-reduce per device   {:6.2} GB [{}, p={p}]   {:6.2} GB [{}]",
        ring / GB,
        Convention::Ring,
        large / GB,
        Convention::LargeP
    );
    let (t_ring, t_large) = (link.time(ring), link.time(large));
    println!(
        "  time at 400 GB/s        {:6.1} ms [{}, p={p}]   {:6.1} ms [{}]   (bytes/β, no latency)",
        t_ring * 1e3,
        Convention::Ring,
        t_large * 1e3,
        Convention::LargeP
    );
    println!(
        "  200 ms step + {:.0} ms [{}]: {:.1} % lost [{}: comm/(compute+comm)]; {:.1} % [{}]",
        t_large * 1e3,
        Convention::LargeP,
        100.0 * fraction_lost(t_large, 0.2, Overlap::None),
        Overlap::None,
        100.0 * fraction_lost(t_large, 0.2, Overlap::Backward),
        Overlap::Backward
    );
    let b = |kind: ScheduleKind, m| 100.0 * pipeline::bubble(kind, 1, p, m);
    println!(
        "  bubble p=8 [GPipe/1F1B {}]: m=8 {:.1} %, m=64 {:.1} %   [ZB-H1 {}]: {:.1} %, {:.1} %   \
         [ZB-V {}]: m=16 {:.1} %, m=64 {:.1} %",
        pipeline::formula(ScheduleKind::OneFOneB),
        b(ScheduleKind::OneFOneB, 8),
        b(ScheduleKind::OneFOneB, 64),
        pipeline::formula(ScheduleKind::ZeroBubbleH1),
        b(ScheduleKind::ZeroBubbleH1, 8),
        b(ScheduleKind::ZeroBubbleH1, 64),
        pipeline::formula(ScheduleKind::ZeroBubbleV),
        b(ScheduleKind::ZeroBubbleV, 16),
        b(ScheduleKind::ZeroBubbleV, 64)
    );
    let rows: Vec<String> = ZeroStage::ALL
        .iter()
        .map(|&z| {
            format!(
                "{z}: {:.2} GB [{}]",
                zero_state_bytes(n, p, z, (2.0, 2.0, 12.0)) / GB,
                z.formula()
            )
        })
        .collect();
    println!(
        "  ZeRO per device, N=7e9, p=8, P,G,K = 2,2,12:  {}",
        rows.join("  ")
    );
    println!();
}

/// "300 TFLOP/s", or GFLOP/s below one TFLOP/s (a calibrated software adapter).
fn rate(flops: f64) -> String {
    if flops >= 1e12 {
        format!("{:.0} TFLOP/s", flops / 1e12)
    } else {
        format!("{:.2} GFLOP/s", flops / 1e9)
    }
}

fn print_plan(req: &PlanRequest, plan: &Ranking, top: usize) {
    let (m, c) = (&req.model, &req.cluster);
    println!(
        "model    {:.3e} params, {} layers × hidden {}, {} heads, seq {}, vocab {}; {} (P,G,K = {},{},{} B/param)",
        m.params, m.layers, m.hidden, m.heads, m.seq_len, m.vocab, req.precision.name, req.precision.param, req.precision.grad, req.precision.optim
    );
    println!(
        "cluster  {} node(s) × {} devices, {:.0} GB each; intra {:.0} GB/s ({:.0} µs), inter {:.0} GB/s per device ({:.0} µs); {} achieved",
        c.nodes,
        c.devices_per_node,
        c.mem_per_device / GB,
        c.intra.bandwidth_bytes_per_s / GB,
        c.intra.latency_s * 1e6,
        c.inter.bandwidth_bytes_per_s / GB,
        c.inter.latency_s * 1e6,
        rate(c.flops)
    );
    println!(
        "batch    {} sequences = {} tokens per step; DP traffic {}",
        req.global_batch,
        req.global_batch * m.seq_len,
        req.overlap
    );
    println!(
        "\n{} layouts considered, {} fit. Best {}:",
        plan.considered,
        plan.fitting,
        top.min(plan.ranked.len())
    );
    println!("  comm times: ring collectives [{}], bytes/β + α per step; step = (C + tp + p2p)/(1 − bubble) + exposed dp", Convention::Ring);
    println!(
        "    {:<34} {:>3} {:>23} {:>19} {:>8} {:>8} {:>7} {:>8}",
        "layout",
        "b",
        "mem/dev GB (state+act)",
        "dp ms (exposed)",
        "tp ms",
        "p2p ms",
        "bubble",
        "step s"
    );
    for (i, cand) in plan.ranked.iter().take(top).enumerate() {
        let (mem, st) = (&cand.memory, &cand.step);
        let mark = if i == 0 { "*" } else { " " };
        let link = |inter: bool| if inter { "x" } else { " " };
        println!(
            "  {mark} {:<34} {:>3} {:>7.1} ({:>5.1}+{:>5.1}) {:>10.1} ({:>6.1}){} {:>7.1}{} {:>7.1}{} {:>6.1}% {:>8.3}",
            cand.layout.label().to_string(),
            st.micro_batch,
            mem.total / GB,
            (mem.states + mem.gather_buffer) / GB,
            mem.activations / GB,
            st.dp_comm * 1e3,
            st.dp_exposed * 1e3,
            link(st.dp_inter),
            st.tp_comm * 1e3,
            link(st.tp_inter),
            st.pp_comm * 1e3,
            link(st.pp_inter),
            100.0 * st.bubble,
            st.step
        );
    }
    println!("  (x: the group crosses nodes and runs on the inter-node link)\n");
    println!("decision guide:");
    for v in &plan.verdicts {
        println!("  {:<12} {}", v.family.name(), v.reason);
    }
    let r = &plan.recommended;
    println!(
        "\nrecommendation: {} — {} with microbatches of b={}: {:.1} GB per device; step {:.3} s \
         (compute {:.3} s, tp {:.1} ms, p2p {:.1} ms, bubble {:.1} %, dp {:.1} ms of which {:.1} ms exposed)",
        r.family().name(),
        r.layout.label(),
        r.step.micro_batch,
        r.memory.total / GB,
        r.step.step,
        r.step.compute,
        r.step.tp_comm * 1e3,
        r.step.pp_comm * 1e3,
        100.0 * r.step.bubble,
        r.step.dp_comm * 1e3,
        r.step.dp_exposed * 1e3
    );
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let text = e.render().to_string();
            eprintln!("{}", text.lines().next().unwrap_or("error: bad arguments"));
            return ExitCode::from(2);
        }
        Err(e) => {
            print!("{e}");
            return ExitCode::SUCCESS;
        }
    };
    // a refused command line exits with status 2 (as clap's own refusals), a failure after
    // the start with 1
    let refused = ExitCode::from(2);
    if let Err(e) = checks::check(&cli) {
        eprintln!("error: {e:#}");
        return refused;
    }
    let mut cli = cli;
    let preset_note = checks::default_preset(&mut cli);
    if cli.validate {
        let setup = match validate::setup(&cli) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e:#}");
                return refused;
            }
        };
        return match validate::validate(&cli, setup) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("error: a measured byte count differs from the engine's ring volumes (see above)");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    // the request's own checks (shape, cluster) come before any output too
    let req = match request(&cli) {
        Ok(req) => req,
        Err(e) => {
            eprintln!("error: {e}");
            return refused;
        }
    };
    if let Some(note) = preset_note {
        println!("{note}\n");
    }
    print_reference();
    match plan(&req) {
        Ok(p) => {
            print_plan(&req, &p, cli.top);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
