//! The one entry point for every layout: impossible layouts are refused before any device
//! work with the violated constraint and a valid alternative; every layout trains to one
//! device's result; a model state moves between layouts; every injected fault ends the step
//! within seconds with device, stage, action and step named, and no thread left running.

mod common;

use common::example::{refusal, Refusal};

use std::time::{Duration, Instant};

use triaxis::cpu::AdamW;
use triaxis::engine::{Engine, EngineOptions};
use triaxis::gpu;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::executor::{Fault, FaultKind};
use triaxis::pipeline::{Link, ScheduleKind};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;
use triaxis::Error;

fn model() -> GptConfig {
    GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 2,
    }
}

fn cfg(accum: usize) -> TrainConfig {
    TrainConfig {
        model: model(),
        micro: Micro { b: 2, t: 8 },
        grad_accum: accum,
        steps: 6,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 5,
    }
}

fn mesh(dp: usize, tp: usize, pp: usize, m: usize) -> Mesh {
    Mesh {
        dp,
        tp,
        pp,
        microbatches: m,
        ..Mesh::default()
    }
}

fn batches(n: usize, steps: usize) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    common::addition_batches(4, 6, n, steps, cfg(1).micro)
}

/// (what, layout, model, microbatch size, sequence length, devices, expected message parts)
#[allow(clippy::type_complexity)]
fn invalid() -> Vec<(
    &'static str,
    Mesh,
    GptConfig,
    usize,
    usize,
    usize,
    Vec<&'static str>,
)> {
    let m = model(); // 2 heads, 2 layers: 4 blocks
    let wide = GptConfig {
        heads: 6,
        channels: 24,
        ..m
    };
    let z = |zero| Mesh {
        zero,
        ..mesh(1, 1, 1, 1)
    };
    let il = |pp, mb, v| Mesh {
        schedule: ScheduleKind::Interleaved,
        chunks: v,
        ..mesh(1, 1, pp, mb)
    };
    vec![
        (
            "dp = 0",
            mesh(0, 1, 1, 1),
            m,
            2,
            8,
            1,
            vec!["--dp must be at least 1"],
        ),
        (
            "tp = 0",
            mesh(1, 0, 1, 1),
            m,
            2,
            8,
            1,
            vec!["--tp must be at least 1"],
        ),
        (
            "pp = 0",
            mesh(1, 1, 0, 1),
            m,
            2,
            8,
            1,
            vec!["--pp must be at least 1"],
        ),
        (
            "no microbatches",
            mesh(1, 1, 1, 0),
            m,
            2,
            8,
            1,
            vec!["--microbatches must be at least 1"],
        ),
        (
            "chunks = 0",
            Mesh {
                chunks: 0,
                ..mesh(1, 1, 1, 1)
            },
            m,
            2,
            8,
            1,
            vec!["--chunks must be at least 1"],
        ),
        (
            "microbatch of 0 sequences",
            mesh(1, 1, 1, 1),
            m,
            0,
            8,
            1,
            vec!["at least 1 sequence"],
        ),
        (
            "sequence longer than the context",
            mesh(1, 1, 1, 1),
            m,
            2,
            9,
            1,
            vec!["1..=8", "--seq 8"],
        ),
        (
            "empty sequence",
            mesh(1, 1, 1, 1),
            m,
            2,
            0,
            1,
            vec!["sequence length"],
        ),
        (
            "too few devices",
            mesh(2, 1, 2, 4),
            m,
            2,
            8,
            3,
            vec!["= 4 devices, but 3 are given", "--dp 1 --tp 1 --pp 3"],
        ),
        (
            "too many devices",
            mesh(1, 1, 2, 4),
            m,
            2,
            8,
            4,
            vec!["= 2 devices, but 4 are given", "--dp 2 --tp 1 --pp 2"],
        ),
        (
            "devices not a multiple of tp·pp",
            mesh(1, 2, 2, 4),
            m,
            2,
            8,
            6,
            vec!["but 6 are given", "--tp 2 --pp 3"],
        ),
        (
            "tp not dividing the heads",
            mesh(1, 4, 1, 1),
            wide,
            2,
            8,
            4,
            vec!["must divide the heads (6)", "--tp 3"],
        ),
        (
            "tp larger than the heads",
            mesh(1, 3, 1, 1),
            m,
            2,
            8,
            3,
            vec!["must divide the heads (2)", "--tp 2"],
        ),
        (
            "pp larger than the blocks",
            mesh(1, 1, 5, 5),
            m,
            2,
            8,
            5,
            vec!["only 4 blocks", "--pp 4"],
        ),
        (
            "interleaved stages beyond the blocks",
            il(2, 4, 3),
            m,
            2,
            8,
            2,
            vec!["6 pipeline stages", "--chunks 1"],
        ),
        (
            "chunks without interleaving",
            Mesh {
                chunks: 2,
                ..mesh(1, 1, 2, 4)
            },
            m,
            2,
            8,
            2,
            vec!["needs --schedule interleaved"],
        ),
        (
            "interleaved with m not a multiple of pp",
            il(2, 3, 2),
            m,
            2,
            8,
            2,
            vec!["m % pp == 0", "--microbatches 4"],
        ),
        (
            "ZeRO stage 4",
            Mesh { dp: 2, ..z(4) },
            m,
            2,
            8,
            2,
            vec!["ZeRO stage 4 does not exist", "--zero 3"],
        ),
        (
            "ZeRO without data parallelism",
            z(2),
            m,
            2,
            8,
            1,
            vec!["dp = 1", "--dp 2"],
        ),
        (
            "ZeRO-1 without data parallelism",
            Mesh { pp: 2, ..z(1) },
            m,
            2,
            8,
            2,
            vec!["nothing to shard"],
        ),
        (
            "heads not dividing channels",
            mesh(1, 1, 1, 1),
            GptConfig { heads: 3, ..m },
            2,
            8,
            1,
            vec!["heads (3) must divide channels (16)"],
        ),
        (
            "zero-sized model",
            mesh(1, 1, 1, 1),
            GptConfig { layers: 0, ..m },
            2,
            8,
            1,
            vec!["must be positive"],
        ),
    ]
}

#[test]
fn every_impossible_layout_is_refused_with_its_constraint_and_an_alternative() {
    let cases = invalid();
    assert!(cases.len() >= 20);
    for (what, mesh, model, b, t, devices, want) in cases {
        match mesh.validate(&model, b, t, devices) {
            Err(Error::Config(msg)) => {
                println!("{what}: {msg}");
                for w in want {
                    assert!(msg.contains(w), "{what}: {msg:?} lacks {w:?}");
                }
            }
            other => panic!("{what}: expected a configuration error, got {other:?}"),
        }
    }
    // bad names of flags' values
    for (what, err) in [
        (
            "schedule",
            "zigzag"
                .parse::<ScheduleKind>()
                .err()
                .map(|e| e.to_string()),
        ),
        (
            "link",
            Link::by_name("carrier-pigeon").err().map(|e| e.to_string()),
        ),
        (
            "fault",
            FaultKind::by_name("meteor").err().map(|e| e.to_string()),
        ),
    ] {
        let msg = err.unwrap_or_else(|| panic!("{what}: accepted"));
        println!("{what}: {msg}");
        assert!(msg.contains("expected"), "{msg}");
    }
    // valid layouts pass
    for ok in [mesh(1, 1, 1, 1), mesh(2, 1, 2, 4), mesh(1, 2, 2, 2)] {
        ok.validate(&model(), 2, 8, ok.devices()).unwrap();
    }
}

/// (example, arguments, expected message parts): every flag of every example that a value can
/// break, refused before any device work. Adding a case is one `refusal(…)` row; `{file}` in
/// the arguments stands for an existing regular file, `{empty}` for an empty one.
#[rustfmt::skip]
fn invalid_flags() -> Vec<Refusal> {
    let range = |flag: &str, lo: usize, hi: usize, got: &str| {
        format!("{flag} must be between {lo} and {hi} (got {got})")
    };
    let mut rows = vec![
        // names, cross-flag constraints and sizes clap itself refuses
        refusal("data_parallel", "--heads 3", &["heads (3) must divide channels (128)"]),
        refusal("data_parallel", "--global-batch 30", &["--global-batch 30 with --degrees 1", "not divisible by d × microbatch = 1 × 8"]),
        refusal("data_parallel", "--seq 60000", &["--seq 60000", "cannot fill a window of 60001"]),
        refusal("data_parallel", "--links nvlink,carrier-pigeon", &["unknown link \"carrier-pigeon\""]),
        refusal("data_parallel", "--algo zigzag", &["unknown all-reduce algorithm \"zigzag\""]),
        refusal("data_parallel", "--backend nope", &["unknown backend \"nope\""]),
        refusal("data_parallel", "--layers 99999999999999999999", &["invalid value '99999999999999999999' for '--layers"]),
        refusal("pipeline", "--stages 20", &["--stages 20 × 1 chunk(s) = 20 model stages, but the model has only 10 blocks"]),
        refusal("pipeline", "--schedule interleaved --chunks 8", &["32 model stages", "lower --stages or --chunks"]),
        refusal("pipeline", "--schedule interleaved --microbatches 1,2,3", &["needs a --microbatches count divisible by --stages 4"]),
        refusal("pipeline", "--schedule zigzag", &["unknown pipeline schedule \"zigzag\""]),
        refusal("pipeline", "--balance speed", &["--balance must be params or time"]),
        refusal("pipeline", "--devices some", &["--devices must be virtual or all"]),
        refusal("pipeline", "--link pigeon", &["unknown link \"pigeon\""]),
        refusal("pipeline", "--heads 3", &["heads (3) must divide channels (64)"]),
        refusal("pipeline", "--seq 60000", &["--seq 60000", "cannot fill a window of 60001"]),
        refusal("tensor_parallel", "--degrees 3", &["--degrees 3", "tensor-parallel degree 3 must divide the heads (8)"]),
        refusal("tensor_parallel", "--degrees 1 --heads 3", &["heads (3) must divide channels (256)"]),
        refusal("tensor_parallel", "--links pcie,pigeon", &["unknown link \"pigeon\""]),
        refusal("tensor_parallel", "--seq 60000", &["cannot fill a window of 60001"]),
        refusal("zero", "--stages 4", &["--stages 4", "ZeRO stage 4 does not exist"]),
        refusal("zero", "--stages=-1", &["--stages: \"-1\" is not a valid value"]),
        refusal("zero", "--link pigeon", &["unknown link \"pigeon\""]),
        refusal("zero", "--heads 3", &["heads (3) must divide channels (128)"]),
        refusal("zero", "--seq 60000", &["cannot fill a window of 60001"]),
        refusal("plan", "--validate --preset 7b-1node", &["--validate runs a GPT shape", "drop --preset"]),
        refusal("plan", "--validate --hidden 100 --heads 3", &["heads (3) must divide channels (100)"]),
        refusal("plan", "--validate --seq 500", &["a sequence of 500 needs at least 501"]),
        refusal("plan", "--link pigeon", &["--link: ", "unknown link \"pigeon\""]),
        refusal("plan", "--backend nope", &["unknown backend \"nope\""]),
        refusal("plan", "--heads 3", &["hidden = 4096 is not divisible by heads = 3"]),
        refusal("plan", "--layers 4", &["a GPT shape needs both --layers and --hidden"]),
        refusal("plan", "--params 1e3 --layers 4 --hidden 4096", &["parameters leave nothing for the blocks"]),
        refusal("plan", "--nodes 65536 --devices-per-node 1024", &["more than the 1048576 devices the planner handles"]),
    ];
    // every integer flag: zero where it is invalid, negative (clap refuses it), one past the cap
    let (k, m, mega) = (1 << 10, 1 << 16, 1_000_000);
    let ints: &[(&str, &[&str], usize, usize)] = &[
        ("data_parallel", &["--global-batch"], 1, 1 << 20),
        ("data_parallel", &["--micro-batch", "--seq", "--channels", "--heads"], 1, m),
        ("data_parallel", &["--layers"], 1, 4096),
        ("data_parallel", &["--steps"], 1, mega),
        ("pipeline", &["--stages", "--chunks"], 1, k),
        ("pipeline", &["--micro-batch", "--seq", "--channels", "--heads"], 1, m),
        ("pipeline", &["--layers"], 1, 4096),
        ("pipeline", &["--steps"], 1, mega),
        ("tensor_parallel", &["--micro-batch", "--microbatches", "--seq", "--channels", "--heads"], 1, m),
        ("tensor_parallel", &["--layers"], 1, 4096),
        ("tensor_parallel", &["--steps"], 1, mega),
        ("zero", &["--micro-batch", "--accum", "--seq", "--channels", "--heads"], 1, m),
        ("zero", &["--layers"], 1, 4096),
        ("zero", &["--steps"], 1, mega),
        ("plan", &["--layers"], 1, 4096),
        ("plan", &["--hidden", "--heads", "--nodes"], 1, m),
        ("plan", &["--seq", "--global-batch"], 1, 1 << 20),
        ("plan", &["--vocab"], 1, 1 << 24),
        ("plan", &["--devices-per-node", "--devices"], 1, k),
        ("plan", &["--top"], 1, 1000),
        ("plan", &["--steps"], 1, mega),
        ("data_parallel", &["--adapter"], 0, 255),
        ("pipeline", &["--adapter"], 0, 255),
        ("tensor_parallel", &["--adapter"], 0, 255),
        ("zero", &["--adapter"], 0, 255),
        ("plan", &["--adapter"], 0, 255),
    ];
    for &(ex, flags, lo, hi) in ints {
        for flag in flags {
            if lo > 0 {
                rows.push(refusal(ex, &format!("{flag} 0"), &[&range(flag, lo, hi, "0")]));
            }
            rows.push(refusal(ex, &format!("{flag}=-1"), &[&format!("invalid value '-1' for '{flag}")]));
            let past = (hi + 1).to_string();
            rows.push(refusal(ex, &format!("{flag} {past}"), &[&range(flag, lo, hi, &past)]));
        }
    }
    // comma lists: an element at zero or past the cap, a negative one, an empty list
    for (ex, flag, hi) in [
        ("data_parallel", "--degrees", k),
        ("pipeline", "--microbatches", m),
        ("tensor_parallel", "--degrees", k),
        ("zero", "--degrees", k),
    ] {
        rows.push(refusal(ex, &format!("{flag} 1,0"), &[&range(flag, 1, hi, "0")]));
        let past = (hi + 1).to_string();
        rows.push(refusal(ex, &format!("{flag} 1,{past}"), &[&range(flag, 1, hi, &past)]));
        rows.push(refusal(ex, &format!("{flag}=-1"), &[&format!("{flag}: \"-1\" is not a valid value")]));
        rows.push(refusal(ex, &format!("{flag}="), &[&format!("{flag}: \"\" is not a valid value")]));
    }
    // floats: zero where it is invalid, negative, NaN, infinite, ten times the cap
    for (ex, flag, max, zero_ok) in [
        ("data_parallel", "--bucket-mb", 1e6, false),
        ("zero", "--bucket-mb", 1e6, false),
        ("tensor_parallel", "--reference-tflops", 1e6, false),
        ("plan", "--params", 1e15, false),
        ("plan", "--mem-gb", 1e6, false),
        ("plan", "--intra-gbps", 1e6, false),
        ("plan", "--inter-gbps", 1e6, false),
        ("plan", "--tflops", 1e6, false),
        ("plan", "--intra-latency-us", 1e6, true),
        ("plan", "--inter-latency-us", 1e6, true),
    ] {
        let interval = if zero_ok { format!("[0, {max}]") } else { format!("(0, {max}]") };
        let bad: &[&str] = if zero_ok { &["-1", "nan", "inf"] } else { &["0", "-1", "nan", "inf"] };
        let past = format!("{:e}", 10.0 * max);
        for v in bad.iter().copied().chain([past.as_str()]) {
            let got: f64 = v.parse().expect("a float");
            let want = format!("{flag} must be a finite number in {interval} (got {got})");
            rows.push(refusal(ex, &format!("{flag}={v}"), &[&want]));
        }
    }
    // the train example: every numeric flag, its paths, and flags that contradict each other
    let train_ints: &[(&[&str], usize, usize)] = &[
        (&["--steps"], 1, 1_000_000_000),
        (&["--batch", "--seq", "--microbatches", "--channels", "--heads", "--eval-batches"], 1, m),
        (&["--layers"], 1, 4096),
        (&["--dp", "--tp", "--pp", "--chunks"], 1, k),
        (&["--digits"], 1, 9),
        (&["--zero"], 0, 3),
        (&["--checkpoint-every", "--eval-every", "--log-every"], 0, 1_000_000_000),
    ];
    for &(flags, lo, hi) in train_ints {
        for flag in flags {
            if lo > 0 {
                rows.push(refusal("train", &format!("{flag} 0"), &[&range(flag, lo, hi, "0")]));
            }
            rows.push(refusal("train", &format!("{flag}=-1"), &[&format!("invalid value '-1' for '{flag}")]));
            let past = (hi + 1).to_string();
            rows.push(refusal("train", &format!("{flag} {past}"), &[&range(flag, lo, hi, &past)]));
        }
    }
    for (flag, max) in [("--lr", 1.0), ("--stop-grace", 3600.0)] {
        for v in ["0", "-1", "nan", "inf", "1e9"] {
            let got: f32 = v.parse().expect("a float");
            let want = format!("{flag} must be a finite number in (0, {max}] (got {got})");
            rows.push(refusal("train", &format!("{flag}={v}"), &[&want]));
        }
    }
    rows.extend([
        refusal("train", "--seed=-1", &["invalid value '-1' for '--seed"]),
        refusal("train", "--adapter=-1", &["invalid value '-1' for '--adapter"]),
        refusal("train", "--data no-such-file.txt", &["--data no-such-file.txt", "No such file"]),
        refusal("train", "--data .", &["--data . is a directory, not a file"]),
        refusal("train", "--data {empty}", &["--data", "is empty (0 bytes)"]),
        refusal("train", "--resume no-such.safetensors", &["--resume no-such.safetensors", "No such file"]),
        refusal("train", "--resume .", &["--resume . is a directory, not a file"]),
        refusal("train", "--resume {empty}", &["--resume", "is empty (0 bytes)"]),
        refusal("train", "--checkpoint .", &["--checkpoint . is a directory: give a file path inside it"]),
        refusal("train", "--checkpoint {file}/ck.safetensors", &["--checkpoint", "cannot create the directory"]),
        refusal("train", "--record . --checkpoint c.safetensors", &["--record . is a directory"]),
        refusal("train", "--record {file}/run.json --checkpoint c.safetensors", &["--record", "cannot create the directory"]),
        refusal("train", "--checkpoint same.json --record same.json", &["name the same file"]),
        refusal("train", "--no-checkpoint --checkpoint-every 5", &["--no-checkpoint contradicts --checkpoint-every"]),
        refusal("train", "--devices some", &["--devices must be virtual, all or a number"]),
        refusal("train", "--devices 0", &["--devices must be between 1 and"]),
        refusal("train", "--dp 2 --devices 3", &["= 2 devices, but 3 are given"]),
        refusal("train", "--tp 3", &["must divide the heads (4)"]),
        refusal("train", "--heads 3", &["heads (3) must divide channels (64)"]),
        refusal("train", "--seq 60000", &["a sequence of 60000 needs at least 60001"]),
        refusal("train", "--schedule zigzag", &["unknown pipeline schedule \"zigzag\""]),
        refusal("train", "--link pigeon", &["unknown link \"pigeon\""]),
        refusal("train", "--tp-link pigeon", &["unknown link \"pigeon\""]),
        refusal("train", "--fault meteor:0:0:0", &["unknown fault kind \"meteor\""]),
        refusal("train", "--fault 1:2", &["--fault wants kind:device:action:step"]),
        refusal("train", "--zero 2", &["ZeRO stage 2 shards over the data-parallel group, but dp = 1"]),
        refusal("train", "--backend nope", &["unknown backend \"nope\""]),
    ]);
    // output directories: an existing file, and a directory under a file (refused for root too)
    for ex in ["data_parallel", "pipeline", "tensor_parallel", "zero"] {
        rows.push(refusal(ex, "--out {file}", &["--out", "exists and is not a directory"]));
        rows.push(refusal(ex, "--out {file}/sub", &["--out", "cannot create the directory"]));
    }
    rows
}

#[test]
fn every_bad_flag_of_the_examples_is_refused_before_any_device_work() {
    let _serial = one_at_a_time();
    let rows = invalid_flags();
    let dir = common::example::scratch_dir("flags");
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    std::fs::write(dir.join("empty-file"), b"").unwrap();
    let t0 = Instant::now();
    let (mut ran, mut wrong) = (0, Vec::new());
    for r in &rows {
        match common::example::check_refusal(&dir, &file, r) {
            Ok(true) => ran += 1,
            Ok(false) => {}
            Err(e) => wrong.push(e),
        }
    }
    println!(
        "{ran} of {} refusals checked in {:.1} s",
        rows.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(rows.len() >= 230, "{} rows", rows.len());
    // the refusals left nothing behind but the scratch directory's two files
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 2, "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each example with unusual but valid values: the smallest model, one of everything.
#[test]
fn unusual_but_valid_flags_run_to_completion() {
    let _serial = one_at_a_time();
    let dir = common::example::scratch_dir("valid-flags");
    let Some(plan) = common::example::run_example("plan", &dir, &[]) else {
        return;
    };
    let out = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert!(out.starts_with("preset   7b-1node (the default"), "{out}");
    assert!(
        out.contains("choose another with --preset 7b-2nodes|gpt2-1node|70b-4nodes"),
        "{out}"
    );
    assert!(out.contains("recommendation:"), "{out}");
    if gpu::test_gpu().is_none() {
        return;
    }
    let tiny = "--layers 1 --channels 8 --heads 1 --seq 1 --micro-batch 1 --steps 1";
    for (ex, args, wrote) in [
        (
            "pipeline",
            "--stages 1 --microbatches 1 --chunks 1 --schedule 1f1b",
            "pipeline.json",
        ),
        (
            "data_parallel",
            "--degrees 1 --links ideal --no-overlap --global-batch 1 --bucket-mb 1e-6",
            "data_parallel.json",
        ),
        (
            "tensor_parallel",
            "--degrees 1 --links nvlink --microbatches 1 --reference-tflops 1e-3",
            "tensor_parallel.json",
        ),
        (
            "zero",
            "--degrees 1 --stages 0 --accum 1 --bucket-mb 1e-6",
            "zero.json",
        ),
    ] {
        let out_dir = dir.join(ex);
        let all = format!("{args} {tiny} --out {}", out_dir.display());
        let argv: Vec<&str> = all.split_whitespace().collect();
        let t0 = Instant::now();
        let Some(run) = common::example::run_example(ex, &dir, &argv) else {
            return;
        };
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{ex} {all}: {stderr}");
        assert!(!stderr.contains("panicked"), "{ex}: {stderr}");
        assert!(out_dir.join(wrote).is_file(), "{ex} wrote no {wrote}");
        println!("{ex} {all}: {:.2} s", t0.elapsed().as_secs_f64());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model no device holds is refused by every runner before it allocates anything, naming
/// the buffer, its size, the device's limit and the flag to lower.
#[test]
fn sizes_no_device_holds_are_refused_before_allocation() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let limit = gpus[0].limits.max_storage_buffer_binding_size as usize;
    // b·(heads/tp)·t·t f32 attention scores over the binding limit even with one head per
    // rank (model(): 2 heads, tp 2)
    let t = 2048;
    let b = limit / (4 * t * t) + 1;
    let big = TrainConfig {
        model: GptConfig { ctx: t, ..model() },
        micro: Micro { b, t },
        ..cfg(1)
    };
    let want = [
        "attention scores",
        "max_storage_buffer_binding_size",
        "lower --micro-batch (train: --batch) or --seq",
    ];
    let refused = |what: &str, e: Option<Error>| {
        let msg = e
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("{what}: accepted"));
        for w in want {
            assert!(msg.contains(w), "{what}: {msg:?} lacks {w:?}");
        }
        for g in &gpus {
            assert_eq!(g.memory().allocations, 0, "{what}: {} allocated", g.label);
        }
    };
    refused("one device", Trainer::new(&gpus[0], big.clone()).err());
    for (what, layout) in [
        ("dp 2", mesh(2, 1, 1, 1)),
        ("pp 2", mesh(1, 1, 2, 1)),
        ("tp 2", mesh(1, 2, 1, 1)),
    ] {
        refused(
            what,
            Engine::new(&gpus, big.clone(), layout, EngineOptions::default()).err(),
        );
    }
    // an example says the same after opening its adapter, without a panic
    let dir = common::example::scratch_dir("too-big");
    let (seq, mb) = (t.to_string(), b.to_string());
    let args = [
        "--stages",
        "1",
        "--microbatches",
        "1",
        "--schedule",
        "1f1b",
        "--layers",
        "1",
        "--seq",
        &seq,
        "--micro-batch",
        &mb,
    ];
    if let Some(out) = common::example::run_example("pipeline", &dir, &args) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && !stderr.contains("panicked"),
            "{stderr}"
        );
        for w in want {
            assert!(stderr.contains(w), "{stderr:?} lacks {w:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn engine_refuses_before_any_device_work() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(2) else {
        return;
    };
    let e = Engine::new(&gpus, cfg(4), mesh(2, 1, 1, 2), EngineOptions::default()).err();
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("accumulates 4 microbatches"), "{msg}");
    let e = Engine::new(&gpus, cfg(2), mesh(1, 1, 1, 2), EngineOptions::default()).err();
    assert!(e
        .map(|e| e.to_string())
        .unwrap_or_default()
        .contains("2 are given"));
}

#[test]
fn every_layout_trains_like_one_device_and_states_move_between_layouts() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let (m, steps) = (4, 4);
    let data = batches(m, steps);
    let mut one = Trainer::new(&gpus[0], cfg(m)).unwrap();
    for (s, b) in data.iter().enumerate() {
        one.step(b, s).unwrap();
    }
    let reference = one.model.params().unwrap();
    let rel = |p: &[f32]| common::l2_rel(p, &reference);
    // one device through the engine: the same bits as the trainer
    let mut single = Engine::new(
        &gpus[..1],
        cfg(m),
        mesh(1, 1, 1, m),
        EngineOptions::default(),
    )
    .unwrap();
    for (s, b) in data.iter().enumerate() {
        single.step(b, s).unwrap();
    }
    assert_eq!(
        single.state().unwrap().params,
        reference,
        "1 device: bit-identical"
    );
    for (dp, tp, pp, zero) in [
        (2, 1, 1, 0),
        (1, 1, 2, 0),
        (2, 1, 2, 0),
        (1, 2, 2, 0),
        (2, 2, 1, 0),
        (2, 1, 1, 1),
        (4, 1, 1, 2),
        (2, 1, 1, 3),
        (2, 1, 2, 1),
        (2, 2, 1, 1),
    ] {
        let n = dp * tp * pp;
        let layout = Mesh {
            zero,
            ..mesh(dp, tp, pp, m / dp)
        };
        let mut e = Engine::new(&gpus[..n], cfg(m / dp), layout, EngineOptions::default())
            .unwrap_or_else(|e| panic!("dp={dp} tp={tp} pp={pp}: {e}"));
        assert_eq!(e.placement().len(), n);
        let mut last = None;
        for (s, b) in data.iter().enumerate() {
            last = Some(e.step(b, s).unwrap());
        }
        let c = last.unwrap();
        let err = rel(&e.state().unwrap().params);
        println!(
            "dp={dp} tp={tp} pp={pp} zero={zero}: ‖Δ‖/‖p‖ = {err:.2e}; bubble {:?} (theory {:?}), dp bytes {}, tp bytes {}",
            c.bubble, c.bubble_theory, c.dp_bytes, c.tp_bytes
        );
        assert!(err < 1e-5, "dp={dp} tp={tp} pp={pp}: {err:.2e}");
        assert_eq!(c.bubble.is_some(), pp > 1);
        assert_eq!(c.dp_bytes > 0, dp > 1);
        assert_eq!(c.tp_bytes > 0, tp > 1);
    }
    // stop after 2 steps under dp = 2, resume under pp = 2 (and tp = 2): close to never stopping
    let mut a = Engine::new(
        &gpus[..2],
        cfg(2),
        mesh(2, 1, 1, 2),
        EngineOptions::default(),
    )
    .unwrap();
    for (s, b) in data.iter().enumerate().take(2) {
        a.step(b, s).unwrap();
    }
    let st = a.state().unwrap();
    let mut b = Engine::new(&gpus, cfg(m), mesh(1, 2, 2, m), EngineOptions::default()).unwrap();
    b.set_state(&st).unwrap();
    for (s, batch) in data.iter().enumerate().skip(2) {
        b.step(batch, s).unwrap();
    }
    let err = rel(&b.state().unwrap().params);
    println!("saved at dp = 2, resumed at tp = 2 × pp = 2: ‖Δ‖/‖p‖ = {err:.2e}");
    assert!(err < 1e-5);
}

#[test]
fn stopping_and_resuming_the_same_layout_gives_the_same_bits() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 4);
    let layout = mesh(2, 1, 2, m);
    let mut straight = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate() {
        straight.step(b, s).unwrap();
    }
    let mut first = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate().take(2) {
        first.step(b, s).unwrap();
    }
    let st = first.state().unwrap();
    drop(first);
    let mut second = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    second.set_state(&st).unwrap();
    for (s, b) in data.iter().enumerate().skip(2) {
        second.step(b, s).unwrap();
    }
    assert_eq!(second.checksum().unwrap(), straight.checksum().unwrap());
}

/// The tests of this file run one at a time, so the thread count of the process reflects only
/// the running test.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Threads of this process (Linux), to prove a failed step leaves none behind.
fn threads() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

#[test]
fn every_injected_fault_ends_the_step_with_a_named_error() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 2);
    for (kind, device, action, want_stage, want_action, want) in [
        (FaultKind::Error, 1, 1, 1, "1B0", "injected fault"),
        (
            FaultKind::Panic,
            0,
            2,
            0,
            "0B0",
            "worker panicked: injected panic",
        ),
        (FaultKind::DeviceLost, 1, 0, 1, "1F0", "device lost"),
        (FaultKind::Nan, 1, 1, 1, "gradient check", "not finite"),
        (FaultKind::Nan, 1, 0, 1, "loss", "the loss is NaN"),
    ] {
        let opts = EngineOptions {
            fault: Some(Fault {
                device,
                action,
                step: 1,
                kind,
            }),
            recv_timeout: Duration::from_secs(10),
            ..EngineOptions::default()
        };
        let mut e = Engine::new(&gpus, cfg(m), mesh(2, 1, 2, m), opts).unwrap();
        let before_params = {
            e.step(&data[0], 0).unwrap();
            e.state().unwrap().params
        };
        let base = threads();
        let t = Instant::now();
        let err = e.step(&data[1], 1).unwrap_err();
        let took = t.elapsed();
        println!("{kind:?}: {err} (after {took:?})");
        assert!(took < Duration::from_secs(5), "{kind:?} took {took:?}");
        match &err {
            Error::Worker {
                device: d,
                stage,
                action: a,
                step,
                msg,
            } => {
                // replica 0's schedule device `device` is global device `device` (pp = 2, tp = 1)
                assert_eq!((*d, *stage, *step), (device, want_stage, 1), "{kind:?}");
                assert_eq!(a, want_action, "{kind:?}");
                assert!(msg.contains(want), "{kind:?}: {msg}");
            }
            other => panic!("{kind:?}: expected a worker error, got {other:?}"),
        }
        assert_eq!(
            threads(),
            base,
            "{kind:?}: a thread outlived the failed step"
        );
        // the failed step changed no parameter
        assert_eq!(e.state().unwrap().params, before_params, "{kind:?}");
    }
}

#[test]
fn zero1_inside_pipeline_stages_shards_moments_and_keeps_the_bits() {
    let _serial = one_at_a_time();
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let m = 2;
    let data = batches(2 * m, 3);
    let layout = mesh(2, 1, 2, m);
    let fresh = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    let full_state: Vec<u64> = gpus
        .iter()
        .map(|g| g.memory().current.optimizer_state)
        .collect();
    drop(fresh);
    let sharded_layout = Mesh { zero: 1, ..layout };
    let mut z = Engine::new(&gpus, cfg(m), sharded_layout, EngineOptions::default()).unwrap();
    let sharded_state: Vec<u64> = gpus
        .iter()
        .map(|g| g.memory().current.optimizer_state)
        .collect();
    for (s, b) in data.iter().enumerate() {
        z.step(b, s).unwrap();
    }
    let mut again = Engine::new(&gpus, cfg(m), layout, EngineOptions::default()).unwrap();
    for (s, b) in data.iter().enumerate() {
        again.step(b, s).unwrap();
    }
    // d = 2: each chunk is summed x0 + x1 either way, the same bits as plain data parallelism
    assert_eq!(z.checksum().unwrap(), again.checksum().unwrap());
    assert_eq!(z.state().unwrap().m, again.state().unwrap().m);
    // each device keeps about half of its stage's moments (64-aligned chunks, +8 B placeholders)
    println!("optimizer state per device: unsharded {full_state:?}, ZeRO-1 {sharded_state:?}");
    for (f, s) in full_state.iter().zip(&sharded_state) {
        let half = *f as f64 / 2.0;
        assert!(
            (*s as f64 - half).abs() <= 64.0 * 8.0 + 8.0,
            "{s} vs {half}"
        );
    }
}
