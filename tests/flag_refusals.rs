//! Every bad command line of every example is refused before any device work, with the
//! constraint named (a table run as child processes); unusual but valid values run to the end.
mod common;

use std::time::Instant;

use common::example::{refusal, Refusal};
use common::tiny::one_at_a_time;
use triaxis::gpu;

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
        refusal("data_parallel", "--precision fp8", &["unknown precision \"fp8\""]),
        refusal("data_parallel", "--precision bf16 --algo naive", &["--precision bf16 reduces on the bf16 ring or tree"]),
        refusal("data_parallel", "--layers 99999999999999999999", &["invalid value '99999999999999999999' for '--layers"]),
        refusal("pipeline", "--stages 20", &["--stages 20 × 1 chunk(s) = 20 model stages, but the model has only 10 blocks"]),
        refusal("pipeline", "--schedule interleaved --chunks 8", &["32 model stages", "lower --stages or --chunks"]),
        refusal("pipeline", "--schedule interleaved --microbatches 1,2,3", &["takes none of --microbatches [1, 2, 3] on --stages 4", "m % p == 0"]),
        refusal("pipeline", "--schedule zigzag", &["unknown pipeline schedule \"zigzag\""]),
        refusal("pipeline", "--balance speed", &["--balance must be params or time"]),
        refusal("pipeline", "--devices some", &["--devices must be virtual or all"]),
        refusal("pipeline", "--link pigeon", &["unknown link \"pigeon\""]),
        refusal("pipeline", "--precision f16", &["unknown precision \"f16\""]),
        refusal("pipeline", "--heads 3", &["heads (3) must divide channels (64)"]),
        refusal("pipeline", "--seq 60000", &["--seq 60000", "cannot fill a window of 60001"]),
        refusal("tensor_parallel", "--degrees 3", &["--degrees 3", "tensor-parallel degree 3 must divide the heads (8)"]),
        refusal("tensor_parallel", "--degrees 1 --heads 3", &["heads (3) must divide channels (256)"]),
        refusal("tensor_parallel", "--links pcie,pigeon", &["unknown link \"pigeon\""]),
        refusal("tensor_parallel", "--precision half", &["unknown precision \"half\""]),
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
        refusal("simulate", "--schedule zigzag", &["unknown pipeline schedule \"zigzag\""]),
        refusal("simulate", "--tp 3", &["tensor-parallel degree 3 must divide the heads (64)"]),
        refusal("simulate", "--dp 200", &["needs 12800 devices; the cluster has 1024"]),
        refusal("simulate", "--schedule zb-v --chunks 3", &["got --chunks 3; use --chunks 2"]),
        refusal("simulate", "--calibration {empty}", &["--calibration", "is empty (0 bytes)"]),
        refusal("simulate", "--calibration {file}", &["is no calibration file"]),
        refusal("simulate", "--precision fp8", &["unknown precision \"fp8\""]),
        refusal("simulate", "--recompute some", &["unknown recompute mode \"some\""]),
        refusal("simulate", "--bucket-mb 0", &["--bucket-mb must be a finite number"]),
        refusal("simulate", "--validate --link pigeon", &["unknown link \"pigeon\""]),
        refusal("simulate", "--comm calibrated", &["--comm calibrated needs --calibration FILE"]),
        refusal("simulate", "--comm pigeon", &["invalid value 'pigeon' for '--comm"]),
        refusal("throughput", "--heads 3", &["heads (3) must divide channels (128)"]),
        refusal("throughput", "--vocab 1", &["--vocab must be between 2 and 62 (got 1)"]),
        refusal("throughput", "--vocab 63", &["--vocab must be between 2 and 62 (got 63)"]),
        refusal("throughput", "--precisions f32,fp8", &["--precisions: \"fp8\" is not a valid value"]),
        refusal("throughput", "--backend nope", &["unknown backend \"nope\""]),
        refusal("throughput", "--torch-device tpu", &["--torch-device \"tpu\": cpu or cuda"]),
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
        ("throughput", &["--channels", "--heads", "--seq", "--batch"], 1, m),
        ("throughput", &["--layers"], 1, 4096),
        ("throughput", &["--steps"], 1, mega),
        ("throughput", &["--rounds"], 1, 1000),
        ("throughput", &["--adapter"], 0, 255),
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
    for (flag, max) in [("--lr", 1.0), ("--stop-grace", 3600.0), ("--max-memory", 1e6)] {
        for v in ["0", "-1", "nan", "inf", "1e9"] {
            let got: f32 = v.parse().expect("a float");
            let want = format!("{flag} must be a finite number in (0, {max}] (got {got})");
            rows.push(refusal("train", &format!("{flag}={v}"), &[&want]));
        }
    }
    for flag in ["--min-lr-frac", "--weight-decay"] {
        for v in ["-1", "nan", "inf", "2"] {
            let got: f32 = v.parse().expect("a float");
            let want = format!("{flag} must be a finite number in [0, 1] (got {got})");
            rows.push(refusal("train", &format!("{flag}={v}"), &[&want]));
        }
    }
    rows.extend([
        refusal("train", "--steps 10 --warmup 11", &[&range("--warmup", 0, 10, "11")]),
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
    for ex in ["data_parallel", "pipeline", "tensor_parallel", "zero", "throughput"] {
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
    // the simulator's default: 1024 devices as one replica, and a trace written
    let trace = dir.join("trace.json");
    let args = ["--trace", trace.to_str().unwrap()];
    let Some(sim) = common::example::run_example("simulate", &dir, &args) else {
        return;
    };
    let out = String::from_utf8_lossy(&sim.stdout);
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    assert!(
        out.contains("(1024 devices)") && out.contains("standing for all"),
        "{out}"
    );
    assert!(
        out.contains("critical path") && out.contains("planner  step"),
        "{out}"
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(json["traceEvents"].as_array().unwrap().len() > 100);
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
