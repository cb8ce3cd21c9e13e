//! Pieces of the train example that are not the run loop: the fault flag, the devices, the
//! medians of the per-axis costs, the greedy sample, and the progress kept for the run record.

use serde_json::json;
use triaxis::data::Corpus;
use triaxis::engine::StepCosts;
use triaxis::eval;
use triaxis::gpu::{AdapterChoice, Gpu};
use triaxis::model::gpu_model::GpuModel;
use triaxis::record::{RunRecord, StopReason, StopRecord};
use triaxis::runtime::{Fault, FaultKind};

/// `kind:device:action:step`, e.g. `panic:1:3:10`.
pub fn parse_fault(s: &str) -> anyhow::Result<Fault> {
    let parts: Vec<&str> = s.split(':').collect();
    let [kind, device, action, step] = parts[..] else {
        anyhow::bail!("--fault wants kind:device:action:step (e.g. panic:1:3:10), got {s:?}");
    };
    let num = |x: &str, what: &str| {
        x.parse::<usize>()
            .map_err(|_| anyhow::anyhow!("--fault: {what} must be a number, got {x:?}"))
    };
    Ok(Fault {
        kind: FaultKind::by_name(kind)?,
        device: num(device, "device")?,
        action: num(action, "action")?,
        step: num(step, "step")?,
    })
}

/// Devices for the layout, and one more device for evaluation.
static FOLLOWER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks this process as the lead (writes the record, prints the header) or a follower rank.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn set_lead(lead: bool) {
    FOLLOWER.store(!lead, std::sync::atomic::Ordering::Relaxed);
}

static RANK_LABEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// "rank r on host: " before this process's errors in an MPI job.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn set_rank_label(label: String) {
    let _ = RANK_LABEL.set(label);
}

/// The label errors start with ("" in one process).
pub fn rank_label() -> &'static str {
    RANK_LABEL.get().map_or("", String::as_str)
}

/// Writes `text` to stderr in one call, so that the lines of ranks sharing a pipe or terminal
/// do not interleave inside a line.
pub fn eprint_whole(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Whether this process writes the run record: the only process, or MPI rank 0.
pub fn is_lead() -> bool {
    !FOLLOWER.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn open_devices(
    devices: &str,
    choice: &AdapterChoice,
    n: usize,
) -> triaxis::Result<(Vec<Gpu>, Gpu)> {
    if devices == "all" {
        let gpus = (0..n)
            .map(|i| {
                Gpu::open(&AdapterChoice {
                    backends: choice.backends,
                    software: false,
                    index: Some(i),
                })
            })
            .collect::<triaxis::Result<Vec<_>>>()?;
        let eval = Gpu::open(&AdapterChoice {
            index: Some(0),
            ..choice.clone()
        })?;
        return Ok((gpus, eval));
    }
    let mut all = Gpu::open_virtual(choice, n + 1)?;
    let eval = all.pop().expect("n + 1 ≥ 1 devices");
    Ok((all, eval))
}

/// Medians of the per-axis costs over the run's steps.
pub fn summarize_costs(costs: &[StepCosts]) -> serde_json::Value {
    let med = |f: &dyn Fn(&StepCosts) -> Option<f64>| {
        let mut v: Vec<f64> = costs.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    json!({
        "steps": costs.len(),
        "bubble_device_clock": med(&|c| c.bubble),
        "bubble_theory": med(&|c| c.bubble_theory),
        "device_step_s": med(&|c| Some(c.device_step)),
        "dp_bytes_per_rank": med(&|c| Some(c.dp_bytes as f64)),
        "dp_comm_s": med(&|c| Some(c.dp_comm)),
        "tp_bytes_per_rank": med(&|c| Some(c.tp_bytes as f64)),
        "tp_comm_s": med(&|c| Some(c.tp_comm)),
        "wall_step_s": med(&|c| Some(c.wall)),
        "submits_per_step": med(&|c| Some(c.submits as f64)),
        "host_waits_per_step": med(&|c| Some(c.waits as f64)),
        "dispatches_per_step": med(&|c| Some(c.dispatches as f64)),
    })
}

/// A greedy sample: addition completions of a few held-out problems, or text continued from the
/// start of the validation split (any microbatch size: prompts go B at a time).
pub fn sample(model: &GpuModel, corpus: &Corpus) -> anyhow::Result<String> {
    if !corpus.val_problems.is_empty() {
        let newline = corpus.vocab.encode("\n")?[0];
        let shown = &corpus.val_problems[..8.min(corpus.val_problems.len())];
        let prompts = shown
            .iter()
            .map(|(p, _)| corpus.vocab.encode(p))
            .collect::<triaxis::Result<Vec<_>>>()?;
        let outs = eval::generate(model, &prompts, 12, Some(newline))?;
        let lines: Vec<String> = shown
            .iter()
            .zip(outs)
            .map(|((p, ans), o)| {
                let got = corpus.vocab.decode(&o).trim_end().to_string();
                format!("  {p}{got:<6} {}", if got == *ans { "✓" } else { "✗" })
            })
            .collect();
        return Ok(lines.join("\n"));
    }
    let t = model.micro.t;
    let prompt = corpus.val[..(t.min(corpus.val.len()) / 2).max(1)].to_vec();
    let out = eval::generate(model, std::slice::from_ref(&prompt), 200, None)?;
    Ok(format!(
        "{}{}",
        corpus.vocab.decode(&prompt),
        corpus.vocab.decode(&out[0])
    ))
}

/// What the run has done so far, shared with the signal thread: if a step hangs after a
/// signal, that thread writes this record and exits.
pub struct Progress {
    pub rec: RunRecord,
    pub costs: Vec<StepCosts>,
    /// Index of the next step (the number of steps done).
    pub step: usize,
    pub last_checkpoint: Option<usize>,
    pub checkpoint: Option<String>,
}

impl Progress {
    /// The record with `stopped` filled in, as it ends now.
    pub fn ended(&mut self, reason: StopReason, error: Option<String>) -> &RunRecord {
        self.rec.stopped = Some(StopRecord {
            reason,
            step: self.step,
            error,
            signal: None,
            abandoned_step: false,
            last_checkpoint: self.last_checkpoint,
            checkpoint: self.last_checkpoint.and(self.checkpoint.clone()),
        });
        if let Some(serde_json::Value::Object(p)) = &mut self.rec.parallel {
            p.insert("costs".into(), summarize_costs(&self.costs));
        }
        &self.rec
    }
}

/// A fault that can fire: its device in the layout, its action among that device's passes of
/// one step (the schedule the runtime lowers), its step among the run's.
pub fn check_fault(f: &Fault, mesh: &triaxis::mesh::Mesh, steps: usize) -> anyhow::Result<()> {
    let devices = mesh.devices();
    if f.device >= devices {
        anyhow::bail!(
            "--fault: device {} does not exist: {} has devices 0 to {}",
            f.device,
            mesh.describe(),
            devices - 1
        );
    }
    let schedule = triaxis::pipeline::schedule::Schedule::new(
        mesh.schedule,
        mesh.pp,
        mesh.microbatches,
        mesh.chunks,
    )?;
    let stage = mesh.coords(f.device).stage;
    let actions = schedule.actions[stage].len();
    if f.action >= actions {
        anyhow::bail!(
            "--fault: device {} runs {actions} passes per step (actions 0 to {}), so action {} \
             never happens",
            f.device,
            actions - 1,
            f.action
        );
    }
    if f.step >= steps {
        anyhow::bail!(
            "--fault: step {} is not in the run (--steps {steps}: steps 0 to {})",
            f.step,
            steps - 1
        );
    }
    Ok(())
}

/// Bytes the run's devices hold at least, as the cost model predicts them before any device
/// work: every device's model state (parameters, gradients, optimizer moments; ZeRO shards)
/// and activations (its schedule's slots, recompute's workspace), plus, where no device holds
/// the whole model, the evaluation mirror's parameters and gradient buffer (no optimizer state)
/// and one microbatch's activations. Kernel scratch and the driver's own memory come on top.
pub struct MemoryNeed {
    pub bytes: u64,
    pub devices: usize,
}

pub fn memory_need(
    cfg: &triaxis::step::TrainConfig,
    mesh: &triaxis::mesh::Mesh,
    opts: &triaxis::engine::RuntimeOptions,
) -> anyhow::Result<MemoryNeed> {
    use triaxis::cost::{activation, validate};
    use triaxis::pipeline::partition::Balance;
    let (b, t) = (cfg.micro.b, cfg.micro.t);
    let ex = validate::expect(&cfg.model, mesh, b, t, opts.precision)?;
    let state: u64 = ex.devices.iter().flat_map(|d| d.state.iter()).sum();
    let acts = activation::predict(
        &cfg.model,
        cfg.micro,
        mesh,
        &Balance::Params,
        opts.recompute,
        opts.precision,
    )?;
    // every device of every replica
    let act: u64 = acts.iter().map(|a| a.total).sum();
    // the evaluation mirror, only where no device holds the whole model: parameters and a
    // gradient buffer (no optimizer state) in the run's precision, one microbatch's activations
    let mirror = mesh.pp > 1 || mesh.tp > 1 || mesh.zero >= 3;
    let eval = match mirror {
        true => {
            let one = triaxis::mesh::Mesh {
                microbatches: 1,
                ..triaxis::mesh::Mesh::default()
            };
            let ex = validate::expect(&cfg.model, &one, b, t, opts.precision)?;
            let padded: usize = ex.devices.iter().map(|d| d.padded).sum();
            2 * ex.element_bytes * padded as u64 + ex.activation_bytes
        }
        false => 0,
    };
    Ok(MemoryNeed {
        bytes: state + act + eval,
        devices: mesh.devices() + mirror as usize,
    })
}

/// The host's available memory (`MemAvailable` of `/proc/meminfo`), where the system says.
pub fn host_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Whether the adapter `choice` picks is a CPU (software) one, whose devices live in host memory.
pub fn cpu_adapter(choice: &AdapterChoice) -> bool {
    let all = triaxis::gpu::list_adapters(choice.backends);
    let picked = match choice.index {
        Some(i) => all.get(i),
        None if choice.software => all.iter().find(|a| a.device_type == "Cpu"),
        None => all.first(),
    };
    picked.is_some_and(|a| a.device_type == "Cpu")
}

/// After a device error before the first step that reads like memory running out (wgpu's
/// "Out of Memory", or the "… is invalid" of a buffer that could not be created): what the
/// layout needs and how to refuse it before device work; "" for any other error.
pub fn memory_hint(
    error: &str,
    cfg: &triaxis::step::TrainConfig,
    mesh: &triaxis::mesh::Mesh,
    need: Option<&MemoryNeed>,
) -> String {
    let lower = error.to_ascii_lowercase();
    let oom = lower.contains("out of memory") || lower.contains("outofmemory");
    let invalid_buffer = lower.contains("buffer") && lower.contains("is invalid");
    if !oom && !invalid_buffer {
        return String::new();
    }
    let needs = need.map_or(String::new(), |n| {
        format!(
            ", which needs at least {:.3} GB on {} device(s) as the cost model predicts it",
            n.bytes as f64 / 1e9,
            n.devices
        )
    });
    format!(
        "\n(the device most likely ran out of memory placing {:?} under {}{needs}; wgpu reports \
         no device memory size, so pass --max-memory GB to refuse such a layout before device \
         work, or lower --dp, --tp, --pp, --batch, --seq or the model size)",
        cfg.model,
        mesh.describe()
    )
}
