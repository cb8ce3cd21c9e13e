//! `plan --validate`: calibrate one device, plan for `--devices` of it, train the planner's top
//! layouts on the layout engine and print predicted next to measured.

use crate::measure::measure;
use triaxis::cost::validate::{
    calibrate, cluster, compare, expect, select, shape_of, step_flops, Conventions, Row,
};
use triaxis::cost::{plan, Convention, Footprint, MeshCost, Overlap, PlanRequest, GB};
use triaxis::data::Corpus;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::GptConfig;
use triaxis::pipeline::Link as PipeLink;

use super::{print_plan, Bytes, Cli};

/// What `--validate` runs, checked before any device work (a refusal: exit status 2).
pub struct Setup {
    corpus: Corpus,
    seq: usize,
    model: GptConfig,
    devices: usize,
    global: usize,
    dtype: triaxis::model::Precision,
    bytes: Footprint,
    link: PipeLink,
}

/// The model, corpus, devices, precision and link of `--validate`, or the refusal.
pub fn setup(cli: &Cli) -> anyhow::Result<Setup> {
    let corpus = Corpus::throughput()?;
    let seq = cli.seq.unwrap_or(32);
    let model = GptConfig {
        vocab: corpus.vocab.size(),
        ctx: seq,
        channels: cli.hidden.unwrap_or(128),
        heads: cli.heads.unwrap_or(4),
        layers: cli.layers.unwrap_or(4),
    };
    model.validate()?;
    corpus.check_context(seq)?;
    // the precision the layouts train in, and the cost model's bytes for it
    let (dtype, bytes) = match cli.bytes.unwrap_or(Bytes::F32) {
        Bytes::F32 => (triaxis::model::Precision::F32, Footprint::f32_adam()),
        Bytes::Bf16 => (triaxis::model::Precision::Bf16, Footprint::mixed_adam()),
    };
    Ok(Setup {
        corpus,
        seq,
        model,
        devices: cli.devices.or(cli.devices_per_node).unwrap_or(4),
        global: cli.global_batch.unwrap_or(16),
        dtype,
        bytes,
        link: PipeLink::by_name(&cli.link)?,
    })
}

/// `--validate`: calibrate, plan, run the top layouts, print predicted vs measured. `Ok(false)`
/// when a ledger differs from the ring volumes of the engine's buffers.
pub fn validate(cli: &Cli, s: Setup) -> anyhow::Result<bool> {
    let Setup {
        corpus,
        seq,
        model,
        devices,
        global,
        dtype,
        bytes,
        link,
    } = s;
    let gpus = Gpu::open_virtual(
        &AdapterChoice::from_flags(cli.backend.as_deref(), cli.adapter, false)?,
        devices,
    )?;
    let shape = shape_of(&model)?;
    let conv = Conventions::of(&model)?;
    println!(
        "validate: the planner's top layouts on {devices} virtual devices of {}, trained in {dtype} ({})",
        gpus[0].adapter_name(),
        bytes.name
    );
    println!(
        "model    {} layers × {} hidden, {} heads, seq {}, vocab {} (built-in corpus); {} sequences = {} tokens per step",
        model.layers, model.channels, model.heads, seq, model.vocab, global, global * seq
    );
    // calibration: one device takes the whole step, in microbatches of one device's share
    let m_cal = (1..=devices.min(global))
        .rev()
        .find(|m| global.is_multiple_of(*m))
        .unwrap_or(1);
    let cal_mesh = Mesh {
        microbatches: m_cal,
        ..Mesh::default()
    };
    let cal = measure(
        &gpus,
        &model,
        &cal_mesh,
        global / m_cal,
        &link,
        cli.steps,
        &corpus,
        dtype,
    )?;
    let tokens = global * seq;
    let rate = calibrate(&shape, tokens, cal.step)?;
    println!(
        "calibration: 1 device, m = {m_cal} × b = {}: {:.1} ms on the device clock for 6·N·tokens = 6 × {:.0} × {tokens} = {:.3} GFLOP → {:.2} GFLOP/s",
        global / m_cal,
        cal.step * 1e3,
        shape.params,
        step_flops(&shape, tokens) / 1e9,
        rate / 1e9
    );
    println!(
        "link     {} ({:.1} GB/s, {:.0} µs per message) for data-, tensor- and pipeline-parallel traffic\n",
        link.name,
        link.bandwidth_bytes_per_s / GB,
        link.latency_s * 1e6
    );
    let req = PlanRequest {
        model: shape.clone(),
        precision: bytes,
        cluster: cluster(devices, &link, cli.mem_gb.unwrap_or(80.0), rate)?,
        global_batch: global,
        // the device clock is read with the reduction after the backward (Measured::step)
        overlap: Overlap::None,
    };
    let planned = plan(&req)?;
    print_plan(&req, &planned, cli.top);
    let (run, skipped) = select(&planned, cli.top);
    if !skipped.is_empty() {
        let names: Vec<String> = skipped
            .iter()
            .map(|c| c.layout.label().to_string())
            .collect();
        println!(
            "\nskipped (ZeRO-2/3 with tensor or pipeline stages: the engine does not offer them): {}",
            names.join("; ")
        );
    }
    let mut rows: Vec<Row> = Vec::new();
    for (i, c) in run.iter().enumerate() {
        let mesh = c.layout;
        println!(
            "running {}/{}: {} (b = {})",
            i + 1,
            run.len(),
            mesh.describe(),
            c.step.micro_batch
        );
        let exp = expect(&model, &mesh, c.step.micro_batch, seq, dtype)?;
        let got = measure(
            &gpus,
            &model,
            &mesh,
            c.step.micro_batch,
            &link,
            cli.steps,
            &corpus,
            dtype,
        )?;
        rows.push(compare(c, &shape, &req.precision, &mesh, &exp, &got));
    }
    print_rows(&rows, &conv, &model, cli.steps);
    Ok(rows.iter().all(|r| r.exact))
}

/// The two side-by-side tables and the conventions that explain the ratios.
fn print_rows(rows: &[Row], conv: &Conventions, model: &GptConfig, steps: usize) {
    println!(
        "\npredicted vs measured, per device per step (device clock: median of {steps} steps after a warm-up; × = measured / predicted)"
    );
    println!(
        "  {:<38} {:<21}  {:<13}  {:<8}  bubble %",
        "", "step ms", "dp comm ms", ""
    );
    println!(
        "  {:<34} {:>3} {:>7} {:>7} {:>5}  {:>6} {:>6}  {:>8}  {:>5} {:>5}",
        "layout", "b", "pred", "meas", "×", "pred", "meas", "at once*", "pred", "meas"
    );
    for r in rows {
        let meas_bubble = r
            .bubble
            .1
            .map_or("-".to_string(), |b| format!("{:.1}", 100.0 * b));
        let at_once = if r.mesh.dp > 1 {
            format!("{:.1}", r.concurrent * 1e3)
        } else {
            "-".to_string()
        };
        println!(
            "  {:<34} {:>3} {:>7.1} {:>7.1} {:>5.2}  {:>6.3} {:>6.3}  {:>8}  {:>5.1} {:>5}",
            r.candidate.layout.label().to_string(),
            r.candidate.step.micro_batch,
            r.step.predicted * 1e3,
            r.step.measured * 1e3,
            r.step.ratio(),
            r.candidate.step.dp_comm * 1e3,
            r.dp_comm * 1e3,
            at_once,
            100.0 * r.bubble.0,
            meas_bubble
        );
    }
    println!(
        "  (*: replica 0's device-clock schedule while the dp replicas ran at once on the shared cores; meas times one replica alone;"
    );
    println!(
        "   dp comm: the engine's link clock runs the all-reduces of a replica's tp·pp groups one after another, the cost model"
    );
    println!("   gives every device its own link, so its groups run at once: measured ≈ tp·pp × predicted, by convention)");
    println!(
        "\n  {:<38} {:<28} {:<21} {:<24} activations",
        "bytes per device per step, MB",
        "DP all-reduce",
        "TP all-reduces",
        "model state (16 B/param)"
    );
    println!(
        "  {:<38} {:>6} {:>6} {:>6} {:>5}   {:>6} {:>6} {:>5}   {:>6} {:>6} {:>5}   {:>6} {:>6} {:>5}",
        "layout", "pred", "ring*", "meas", "×", "pred", "meas", "×", "pred", "meas", "×", "pred", "meas", "×"
    );
    let mb = |b: f64| b / 1e6;
    for r in rows {
        println!(
            "  {:<38} {:>6.3} {:>6.3} {:>6.3} {:>5.3}   {:>6.3} {:>6.3} {:>5.3}   {:>6.3} {:>6.3} {:>5.3}   {:>6.3} {:>6.3} {:>5.3}",
            r.candidate.layout.label().to_string(),
            mb(r.dp_bytes.predicted),
            mb(r.dp_ring_formula),
            mb(r.dp_bytes.measured),
            r.dp_bytes.ratio(),
            mb(r.tp_bytes.predicted),
            mb(r.tp_bytes.measured),
            r.tp_bytes.ratio(),
            mb(r.state_bytes.predicted),
            mb(r.state_bytes.measured),
            r.state_bytes.ratio(),
            mb(r.activation_bytes.predicted),
            mb(r.activation_bytes.measured),
            r.activation_bytes.ratio()
        );
        for m in &r.mismatch {
            println!("    MISMATCH: {m}");
        }
    }
    let exact = rows.iter().filter(|r| r.exact).count();
    println!(
        "  (MB = 10⁶ B, ring volumes [{}]; ring* = the cost model's formula on the engine's own padded parameter count;",
        Convention::Ring
    );
    println!("   meas DP: the engine's ledger counts per replica, summed over its tp·pp devices' all-reduces; shown is the busiest");
    println!("   device's share of that sum by its gradient buffer, checked to add up exactly; state: the busiest device's buffers;");
    println!("   activations: what the busiest device's forward keeps for backward, cost::activation vs the ledger's peak)");
    println!(
        "  ledgers: {exact} of {} layouts send exactly the ring volumes of the engine's buffers (DP, TP) and place the blocks as its partition says",
        rows.len()
    );
    let n = conv.cost_params;
    let t = conv.trainer_params as f64;
    println!("\nwhy the bytes differ: the cost model counts N = 12·L·d² + (V + ctx)·d = {n:.0} parameters, the trainer {t:.0} ({:+.1} %):", 100.0 * (t / n - 1.0));
    println!(
        "  biases + layernorms 13·d·L + 2·d = {} ({:+.1} %), untied head V·d = {} ({:+.1} %); every tensor padded to 64 elements (128 in bf16);",
        conv.norms_biases,
        100.0 * conv.norms_biases as f64 / n,
        conv.untied_head,
        100.0 * conv.untied_head as f64 / n
    );
    println!(
        "  under tp the trainer replicates embedding, head and layernorms (the cost model divides them by tp); under pp it balances the {} blocks",
        model.layers + 2
    );
    println!("  (embedding, layers, head) by parameters, the cost model puts L/pp layers and the embeddings on stage 0 (the heaviest device is compared).");
    println!("  TP bytes match exactly when every stage holds L/pp layers (b·s·h activations, 2 + 2 all-reduces per layer, the same in both);");
    println!("  steps: the cost model's compute is 6·N·tokens/(devices·rate) whatever b, the measured kernels are slower per token at small b,");
    println!("  and the cost model has no optimizer, attention-score or kernel-launch terms; bubble: the engine's stages are not equal in time.");
}
