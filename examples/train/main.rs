//! Trains a GPT under any parallel layout and writes a run record, with its loss and evaluation
//! curve beside it (`<record stem>.svg`, e.g. runs/train.svg; see `curve`).
//!
//! `cargo run --release --example train` — one device, built-in addition corpus.
//! `cargo run --release --example train -- --data path/to/tinyshakespeare.txt` — byte-level text.
//! `cargo run --release --example train -- --dp 2 --pp 2 --microbatches 4` — 4 virtual devices.
//! `… --tp 2 --pp 2 --schedule zb-h1 --link pcie` — any valid dp × tp × pp layout.
//! `… --checkpoint-every 100` then `… --resume runs/train.safetensors` (under any layout).
//!
//! Every flag and every impossible layout is refused before any work starts (exit status 2),
//! naming the violated constraint; so are outputs that would overwrite an input, data that is
//! not text, a layout past the memory budget and outputs another run holds (lock files beside
//! them): the list is docs/inputs.md. Once it has started, every ending writes the run record
//! with `stopped: {reason, step, …}`:
//!
//! ```text
//! finished     all steps; the final checkpoint (unless --no-checkpoint)          exit 0
//! interrupted  SIGINT / SIGTERM: the step finishes, a checkpoint is written,
//!              the command that resumes is printed                                exit 130 / 143
//! fault        a worker failed (or --fault kind:device:action:step): device,
//!              stage, action and step named; the last checkpoint stays intact     exit 1
//! non-finite   a NaN or infinite loss or gradient, stopped before the update      exit 1
//! error        anything else after the start (an unusable checkpoint, a failed write)  exit 1
//! ```
//!
//! Under MPI (built with `--features mpi`): `mpirun -n 4 target/release/examples/train --dp 2
//! --pp 2 …` runs one device per rank (world rank r = global device r); every rank checks
//! the world size, the command line and `--devices` before device work, rank 0 writes the
//! record and checkpoints, and a stop request on any rank stops every rank at the same step.

mod args;
mod curve;
#[path = "../support/flags.rs"]
mod flags;
mod interrupt;
#[cfg(feature = "mpi")]
#[path = "../support/mpi_engine.rs"]
mod mpi_engine;
#[cfg(feature = "mpi")]
mod mpi_run;
mod output_lock;
#[path = "../support/plot.rs"]
mod plot;
#[path = "../support/progress.rs"]
mod progress;
mod report;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use interrupt::{Interrupt, Signal};
use serde_json::json;
use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Corpus};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::eval::{self, Mirror};
use triaxis::gpu::{self, AdapterChoice, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::gpu_model::GpuModel;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::{Link, ScheduleKind};
use triaxis::record::{
    self, AdapterRecord, DatasetRecord, EvalRecord, RunRecord, StepRecord, StopReason,
};
use triaxis::session::{CheckpointPolicy, RunEnd, Session, StepDone};
use triaxis::step::TrainConfig;

use args::Args;
use progress::say;
use report::Progress;

fn main() {
    let a = Args::parse();
    if let Err(e) = a.validate() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    if triaxis::comm::launched_by_mpirun() && !cfg!(feature = "mpi") {
        eprintln!(
            "error: started by an MPI launcher (mpirun / mpiexec / srun), but this binary was \
             built without MPI: rebuild with --features mpi (cargo build --release --features \
             mpi --example train)"
        );
        std::process::exit(2);
    }
    if !triaxis::comm::launched_by_mpirun() && a.reduction.trim() != "ordered" {
        eprintln!(
            "error: --reduction {} applies under mpirun only",
            a.reduction.trim()
        );
        std::process::exit(2);
    }
    let code = match run(&a) {
        Ok(code) => code,
        Err(e) => {
            report::eprint_whole(&format!("error: {e:#}\n"));
            2
        }
    };
    std::process::exit(code);
}

/// Everything a run needs, checked before it starts.
struct Setup {
    corpus: Corpus,
    cfg: TrainConfig,
    mesh: Mesh,
    opts: RuntimeOptions,
    choice: AdapterChoice,
}

fn setup(a: &Args) -> anyhow::Result<Setup> {
    let corpus = match &a.data {
        Some(p) => Corpus::text_file(p, 0.1)?,
        None => Corpus::addition(AdditionSpec {
            digits: a.digits as u32,
            reverse: !a.plain_sums,
            pad: !a.unpadded,
            ..Default::default()
        })?,
    };
    corpus.check_context(a.seq)?;
    let cfg = TrainConfig {
        model: GptConfig {
            vocab: corpus.vocab.size(),
            ctx: a.seq,
            channels: a.channels,
            heads: a.heads,
            layers: a.layers,
        },
        micro: Micro {
            b: a.batch,
            t: a.seq,
        },
        grad_accum: a.microbatches,
        steps: a.steps,
        adam: AdamW {
            lr: a.lr,
            weight_decay: a.weight_decay,
            ..Default::default()
        },
        warmup: a.warmup_steps(),
        min_lr_frac: a.min_lr_frac,
        seed: a.seed,
    };
    cfg.validate()?;
    let schedule = a.schedule.parse::<ScheduleKind>()?;
    let mesh = Mesh {
        dp: a.dp,
        tp: a.tp,
        pp: a.pp,
        zero: a.zero,
        schedule,
        microbatches: a.microbatches,
        chunks: a.chunks.or(schedule.fixed_chunks()).unwrap_or(1),
    };
    let opts = RuntimeOptions {
        link: Link::by_name(&a.link)?,
        tp_link: Link::by_name(&a.tp_link)?,
        serial: a.serial,
        fault: a.fault.as_deref().map(report::parse_fault).transpose()?,
        recompute: a.recompute.parse()?,
        precision: a.precision.parse()?,
        ..RuntimeOptions::default()
    };
    let choice = AdapterChoice::from_flags(a.backend.as_deref(), a.adapter, a.software)?;
    let available = match a.devices.as_str() {
        "virtual" => mesh.devices(),
        "all" => gpu::list_adapters(choice.backends).len(),
        n => n.parse::<usize>()?,
    };
    mesh.validate(&cfg.model, cfg.micro.b, cfg.micro.t, available)?;
    if let Some(f) = &opts.fault {
        report::check_fault(f, &mesh, a.steps)?;
    }
    Ok(Setup {
        corpus,
        cfg,
        mesh,
        opts,
        choice,
    })
}

/// Checks the setup, then trains; returns the exit status.
fn run(a: &Args) -> anyhow::Result<i32> {
    let interrupt = Interrupt::install(Duration::from_secs_f64(a.stop_grace))?;
    let s = setup(a)?;
    a.check_outputs()?;
    let need = memory_check(a, &s)?;
    #[cfg(feature = "mpi")]
    let mut job: Option<Job> = match triaxis::comm::launched_by_mpirun() {
        true => {
            let j = mpi_run::MpiRun::start(&s.mesh, &a.reduction, &format!("{a:?}"))?;
            report::set_lead(j.rank == 0);
            report::set_rank_label(format!("rank {} on {}: ", j.rank, j.hosts[j.rank]));
            Some(j)
        }
        false => None,
    };
    #[cfg(not(feature = "mpi"))]
    let mut job: Option<Job> = None;
    // the outputs' lock files (the process that writes them): a second run on the same paths
    // is refused; every ending removes them (the drop, or the abandon hook before its exit)
    let locks = match report::is_lead() {
        true => {
            let mut outs = vec![("--record", a.record.as_path())];
            if a.checkpoints() {
                outs.push(("--checkpoint", a.checkpoint.as_path()));
            }
            Arc::new(output_lock::Locks::take(&outs)?)
        }
        false => Arc::new(output_lock::Locks::take(&[])?),
    };
    let _release = output_lock::Release(locks.clone());
    if let (Some(n), true) = (&need, report::is_lead()) {
        println!(
            "memory    at least {:.1} MiB on {} device(s) (model state and activations as the \
             cost model predicts them, an evaluation mirror included where the layout splits the model)",
            n.bytes as f64 / (1u64 << 20) as f64,
            n.devices
        );
    }
    let held = locks.clone();
    interrupt.on_abandon(move |_, _| held.release());
    // started: from here on every ending writes the record
    let corpus = &s.corpus;
    let unigram = record::unigram_loss(&corpus.train, corpus.vocab.size());
    let progress = Arc::new(Mutex::new(Progress {
        rec: RunRecord {
            triaxis_version: env!("CARGO_PKG_VERSION"),
            config: serde_json::to_value(&s.cfg)?,
            adapter: None,
            shaders: record::shader_hashes(),
            dataset: DatasetRecord {
                name: corpus.name.clone(),
                version: corpus.version.clone(),
                train_tokens: corpus.train.len(),
                val_tokens: corpus.val.len(),
                unigram_loss: unigram,
            },
            parameters: s.cfg.model.param_count(),
            steps: Vec::new(),
            evals: Vec::new(),
            wall_time_s: 0.0,
            tokens_per_s: 0.0,
            sample: String::new(),
            model_checksum: String::new(),
            memory: Vec::new(),
            parallel: Some(
                json!({ "layout": s.mesh, "link": a.link, "tp_link": a.tp_link,
                "recompute": a.recompute, "precision": a.precision }),
            ),
            stopped: None,
        },
        costs: Vec::new(),
        step: 0,
        last_checkpoint: None,
        checkpoint: a.checkpoints().then(|| a.checkpoint.display().to_string()),
    }));
    let record_path = a.record.clone();
    let shared = progress.clone();
    let held = locks.clone();
    interrupt.on_abandon(move |sig, abandoned| {
        let _release = output_lock::Release(held);
        // the signal thread, before it exits: a step stuck after the signal, or a second
        // signal; record what was done (the last checkpoint is left as it is)
        if let Ok(mut p) = shared.lock() {
            let why = if abandoned {
                "the step in progress was abandoned"
            } else {
                "a second signal ended the run while it was stopping"
            };
            p.ended(StopReason::Interrupted, Some(why.into()));
            if let Some(st) = p.rec.stopped.as_mut() {
                st.signal = Some(sig.name());
                st.abandoned_step = abandoned;
            }
            if report::is_lead() {
                match p.rec.write(&record_path) {
                    Ok(()) => eprintln!("run record written to {}", record_path.display()),
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        }
    });
    let (reason, error, signal) = match train(a, &s, &interrupt, &progress, &mut job) {
        Ok(Some(sig)) => (StopReason::Interrupted, None, Some(sig)),
        Ok(None) => (StopReason::Finished, None, None),
        Err(e) => {
            let reason = e
                .downcast_ref::<triaxis::Error>()
                .map_or(StopReason::Error, StopReason::of);
            let mut text = format!("{e:#}");
            if lock(&progress).costs.is_empty() {
                text.push_str(&report::memory_hint(&text, &s.cfg, &s.mesh, need.as_ref()));
            }
            (reason, Some(text), None)
        }
    };
    interrupt.acknowledge();
    let mut p = lock(&progress);
    p.ended(reason, error.clone());
    let st = p.rec.stopped.as_mut().expect("just set");
    st.signal = signal.map(Signal::name);
    let st = st.clone();
    if report::is_lead() {
        p.rec.write(&a.record)?;
        // the curve is a view of the record: failing to draw it does not change the ending
        if let Err(e) = curve::write(&p.rec, &a.curve()) {
            eprintln!("warning: no loss curve: {e}");
        }
    }
    drop(p);
    // an MPI job ends at its first rank's exit: no rank leaves before rank 0 has written the
    // record (every rank is alive after a finished or agreed stop; after a failure, it is not)
    #[cfg(feature = "mpi")]
    if let (Some(j), StopReason::Finished | StopReason::Interrupted) = (job.as_mut(), reason) {
        let _ = j.agree(None);
    }
    // (MPI finalises here, when the job drops)
    #[cfg(feature = "mpi")]
    drop(job);
    match (reason, signal) {
        (StopReason::Finished, _) => {
            if report::is_lead() {
                println!("run record written to {}", a.record.display());
            }
            Ok(0)
        }
        (StopReason::Interrupted, Some(sig)) => {
            eprintln!("interrupted by {} at step {}", sig.name(), st.step);
            let fresh = lock(&progress).costs.len();
            match st.last_checkpoint {
                _ if fresh == 0 && a.checkpoints() => eprintln!(
                    "stopped before this run's first step: no checkpoint written ({} left as \
                     it was)",
                    a.checkpoint.display()
                ),
                Some(k) if k == st.step => eprintln!(
                    "checkpoint {} (step {k}) written; resume with:\n  {}",
                    a.checkpoint.display(),
                    a.resume_command()
                ),
                _ => eprintln!("no checkpoint written (--no-checkpoint)"),
            }
            if report::is_lead() {
                eprintln!("run record written to {}", a.record.display());
            }
            Ok(sig.exit_code())
        }
        _ => {
            // one write: ranks sharing a pipe or terminal must not interleave inside a line
            let mut text = format!(
                "error: {}{}\nstopped at step {}\n",
                report::rank_label(),
                error.unwrap_or_default(),
                st.step
            );
            text += &match st.last_checkpoint {
                Some(k) => format!(
                    "the last good checkpoint ({}, step {k}) is intact\n",
                    a.checkpoint.display()
                ),
                None => "no checkpoint had been written\n".to_string(),
            };
            report::eprint_whole(&text);
            if report::is_lead() {
                eprintln!("run record written to {}", a.record.display());
            }
            Ok(1)
        }
    }
}

/// The memory the layout needs, refused past the budget: `--max-memory`, else on a CPU
/// adapter the host's available memory (every virtual device lives in it). `None`: no
/// prediction (under MPI each rank holds one device of it; a layout the cost model does not
/// cover).
fn memory_check(a: &Args, s: &Setup) -> anyhow::Result<Option<report::MemoryNeed>> {
    if triaxis::comm::launched_by_mpirun() {
        return Ok(None);
    }
    let Ok(need) = report::memory_need(&s.cfg, &s.mesh, &s.opts) else {
        return Ok(None);
    };
    let gb = |b: u64| b as f64 / 1e9;
    let budget = match a.max_memory {
        Some(x) => Some(((x * 1e9) as u64, format!("the --max-memory {x} GB budget"))),
        None if a.devices != "all" && report::cpu_adapter(&s.choice) => report::host_available()
            .map(|b| {
                (
                    b,
                    format!(
                        "the {:.2} GB this host has available (MemAvailable in /proc/meminfo; \
                         the devices of a CPU adapter live in host memory; --max-memory sets \
                         another budget)",
                        gb(b)
                    ),
                )
            }),
        None => None,
    };
    if let Some((limit, what)) = budget {
        if need.bytes > limit {
            anyhow::bail!(
                "{} with {:?} needs at least {:.3} GB on {} device(s) (model state and \
                 activations as the cost model predicts them, an evaluation mirror included where \
                 the layout splits the model), \
                 more than {what}: lower --dp, --tp, --pp, --batch, --seq or the model size",
                s.mesh.describe(),
                s.cfg.model,
                gb(need.bytes),
                need.devices
            );
        }
    }
    Ok(Some(need))
}

/// This process's place in an MPI job (none without the `mpi` feature).
#[cfg(feature = "mpi")]
type Job = mpi_run::MpiRun;
#[cfg(not(feature = "mpi"))]
type Job = std::convert::Infallible;

/// The devices and engine of a run in this one process.
fn in_process(a: &Args, s: &Setup) -> anyhow::Result<(Vec<Gpu>, Gpu, Engine)> {
    let (gpus, eval_gpu) = report::open_devices(&a.devices, &s.choice, s.mesh.devices())?;
    let engine =
        Engine::new(&gpus, s.cfg.clone(), s.mesh, s.opts.clone()).context("placing the model")?;
    Ok((gpus, eval_gpu, engine))
}

fn lock(p: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// The run after its start: devices, engine, the step loop (`Session::run`, observed here for
/// progress, the record and evaluation points), the final checkpoint, evaluation and sample. `Ok(Some(signal))`: stopped by a signal (after saving).
fn train(
    a: &Args,
    s: &Setup,
    interrupt: &Interrupt,
    progress: &Mutex<Progress>,
    job: &mut Option<Job>,
) -> anyhow::Result<Option<Signal>> {
    #[cfg(not(feature = "mpi"))]
    let _ = job;
    let (corpus, cfg, mesh) = (&s.corpus, &s.cfg, s.mesh);
    #[cfg(feature = "mpi")]
    let (gpus, eval_gpu, engine) = match job.as_mut() {
        Some(j) => {
            let (g, eval) = j.open_devices(&a.devices, &s.choice)?;
            // every rank's adapter in the record, then the check that they agree
            let checked = j.check_adapters(&g);
            if let Some(serde_json::Value::Object(par)) = &mut lock(progress).rec.parallel {
                par.insert("mpi".into(), j.record(&mesh));
            }
            checked?;
            let engine = j
                .engine(g.clone(), cfg.clone(), mesh, s.opts.clone())
                .context("placing the model")?;
            (vec![g], eval, engine)
        }
        None => in_process(a, s)?,
    };
    #[cfg(not(feature = "mpi"))]
    let (gpus, eval_gpu, engine) = in_process(a, s)?;
    lock(progress).rec.adapter = Some(AdapterRecord::of(&gpus[0]));
    if report::is_lead() {
        print_header(a, s, &gpus[0], lock(progress).rec.dataset.unigram_loss);
    }
    if mesh.devices() > 1 {
        for p in engine.placement() {
            println!(
                "  device {:>2}: replica {} stage {} tp rank {} — {} on {}",
                p.device, p.coords.replica, p.coords.stage, p.coords.tp_rank, p.blocks, p.adapter
            );
        }
    }
    let placement = serde_json::to_value(engine.placement())?;
    let mut session = match &a.resume {
        Some(path) => {
            let s = Session::resume(engine, corpus, path)
                .with_context(|| format!("resuming from {}", path.display()))?;
            println!("resumed   {} at step {}", path.display(), s.step);
            if let Some((layout, diffs)) = &s.resumed_from {
                println!("          written under {layout}");
                for d in diffs {
                    println!("          note: {d}");
                }
            }
            s
        }
        None => Session::new(engine, corpus, a.seed),
    };
    {
        let mut p = lock(progress);
        (p.step, p.last_checkpoint) = (session.step, session.last_checkpoint);
        if let Some(serde_json::Value::Object(par)) = &mut p.rec.parallel {
            par.insert("placement".into(), placement);
            par.insert(
                "resumed_from_step".into(),
                json!(a.resume.as_ref().map(|_| session.step)),
            );
            par.insert(
                "checkpoint".into(),
                json!(a.checkpoint.display().to_string()),
            );
        }
    }
    if a.checkpoint_every > 0 {
        session = session.with_checkpoints(CheckpointPolicy {
            path: a.checkpoint.clone(),
            every: a.checkpoint_every,
        });
    }
    // evaluation runs on the run's own whole model where the layout keeps one, else on a
    // forward-only mirror on its own device (built at the first evaluation)
    let mut evaluator = Evaluator {
        gpu: eval_gpu,
        mirror: None,
    };
    let bar = progress::bar(a.steps.saturating_sub(session.step) as u64);
    let tokens = (cfg.tokens_per_step() * a.dp) as f64;
    let t0 = Instant::now();
    // every rank of an MPI job stops at the same step boundary
    let stop = || -> anyhow::Result<Option<Signal>> {
        let asked = interrupt.requested();
        #[cfg(feature = "mpi")]
        let asked = match job.as_mut() {
            Some(j) => j.agree(asked)?,
            None => asked,
        };
        Ok(asked)
    };
    let observe = |session: &Session, done: StepDone| -> anyhow::Result<()> {
        let (s, c) = (done.step, done.costs);
        let tps = tokens / done.seconds;
        bar.set_message(format!("loss {:.4} | {:.0} tok/s", c.stats.loss, tps));
        bar.inc(1);
        if a.log_every > 0 && (s + 1) % a.log_every == 0 {
            say(
                &bar,
                format!(
                    "step {:>5}: loss {:.4}, {tps:.0} tokens/s",
                    s + 1,
                    c.stats.loss
                ),
            );
        }
        let mut p = lock(progress);
        p.rec.steps.push(StepRecord {
            step: s,
            loss: c.stats.loss,
            grad_norm: c.stats.grad_norm,
            lr: c.stats.lr,
            tokens_per_s: tps,
        });
        p.costs.push(c);
        (p.step, p.last_checkpoint) = (session.step, session.last_checkpoint);
        drop(p);
        if a.eval_every > 0 && (s + 1) % a.eval_every == 0 && s + 1 < a.steps {
            let e = evaluate(&mut evaluator, session, corpus, a, s + 1, &bar)?;
            lock(progress).rec.evals.push(e);
        }
        Ok(())
    };
    let (signal, result) = match session.run(a.steps, stop, observe) {
        Ok(RunEnd::Stopped(sig)) => (Some(sig), Ok(())),
        Ok(RunEnd::Reached) => (None, Ok(())),
        Err(e) => (None, Err(e)),
    };
    // the loop has stopped on its own: no more abandoning from the signal thread
    interrupt.acknowledge();
    let train_time = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    {
        let mut p = lock(progress);
        p.rec.wall_time_s = train_time;
        p.rec.tokens_per_s = p.costs.len() as f64 * tokens / train_time.max(1e-9);
        p.rec.memory = record::memory_of(&gpus);
    }
    result?;
    // a run that took no step (stopped during start-up, or resumed at its last step) leaves
    // whatever is at the checkpoint path as it is
    let fresh = lock(progress).costs.len();
    if a.checkpoints() && fresh == 0 {
        println!(
            "no step taken in this run: checkpoint {} not written",
            a.checkpoint.display()
        );
    } else if a.checkpoints() {
        session.save(&a.checkpoint)?;
        lock(progress).last_checkpoint = session.last_checkpoint;
        println!(
            "checkpoint {} (step {})",
            a.checkpoint.display(),
            session.step
        );
    }
    let checksum = session.engine.checksum()?;
    lock(progress).rec.model_checksum = checksum.clone();
    // a signal during the last step or the save: stop here, without the final evaluation
    let signal = signal.or_else(|| interrupt.requested());
    if signal.is_some() {
        return Ok(signal);
    }
    let last = evaluate(&mut evaluator, &session, corpus, a, session.step, &bar)?;
    let sample = report::sample(evaluator.model(&session, false)?, corpus)?;
    println!("sample:\n{sample}");
    let mut p = lock(progress);
    p.rec.evals.push(last.clone());
    p.rec.sample = sample;
    println!(
        "trained {} steps in {train_time:.1} s ({:.0} tokens/s); val loss {:.4} vs unigram {:.4}{}",
        p.costs.len(),
        p.rec.tokens_per_s,
        last.val_loss,
        p.rec.dataset.unigram_loss,
        last.accuracy.map_or(String::new(), |x| format!(
            "; exact match {:.1} %",
            100.0 * x
        ))
    );
    println!("model checksum {checksum}");
    Ok(None)
}

fn print_header(a: &Args, s: &Setup, g: &Gpu, unigram: f32) {
    let (corpus, cfg, mesh) = (&s.corpus, &s.cfg, &s.mesh);
    println!(
        "adapter   {} (driver {} {})",
        g.adapter_name(),
        g.info.driver,
        g.info.driver_info
    );
    println!(
        "data      {} — {} train / {} val tokens, version {}",
        corpus.name,
        corpus.train.len(),
        corpus.val.len(),
        &corpus.version[..19]
    );
    println!(
        "model     {:?}, {} parameters",
        cfg.model,
        cfg.model.param_count()
    );
    println!(
        "layout    {} on {} device(s); {} × {} tokens × {} microbatches × {} replicas = {} tokens/step; unigram baseline loss {:.3}",
        mesh.describe(),
        mesh.devices(),
        a.batch,
        a.seq,
        a.microbatches,
        a.dp,
        cfg.tokens_per_step() * a.dp,
        unigram
    );
}

/// Where evaluation runs: the run's own whole model between steps (no state moved), or for
/// a layout that splits the model a forward-only [`Mirror`] on its own device, loaded with the
/// gathered parameters.
struct Evaluator {
    gpu: triaxis::gpu::Gpu,
    mirror: Option<Mirror>,
}

impl Evaluator {
    /// The model holding the session's current parameters; `fresh`: reload a mirror from the
    /// run first (false right after an evaluation loaded it).
    fn model<'a>(&'a mut self, session: &'a Session, fresh: bool) -> anyhow::Result<&'a GpuModel> {
        if let Some(m) = session.engine.whole_model() {
            return Ok(m);
        }
        let e = &session.engine;
        let mirror = match self.mirror.take() {
            Some(m) => m,
            None => Mirror::new(&self.gpu, e.cfg.model, e.cfg.micro, e.opts().precision)
                .context("building the evaluator")?,
        };
        let mirror = self.mirror.insert(mirror);
        if fresh {
            mirror.load(&e.runtime().params()?)?;
        }
        Ok(&mirror.model)
    }
}

/// Validation loss (and exact match on addition) of the current parameters.
fn evaluate(
    evaluator: &mut Evaluator,
    session: &Session,
    corpus: &Corpus,
    a: &Args,
    step: usize,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<EvalRecord> {
    let model = evaluator.model(session, true)?;
    let val_loss = eval::val_loss(model, corpus, a.eval_batches)?;
    let accuracy = if a.data.is_none() {
        Some(eval::addition_accuracy(model, corpus, 256)?)
    } else {
        None
    };
    let acc = accuracy.map_or(String::new(), |x| {
        format!(", exact match {:.1} %", 100.0 * x)
    });
    say(bar, format!("step {step:>5}: val loss {val_loss:.4}{acc}"));
    Ok(EvalRecord {
        step,
        val_loss,
        accuracy,
    })
}
