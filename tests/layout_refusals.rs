//! Impossible layouts and sizes are refused before any device work: the violated constraint
//! and a valid alternative named, nothing allocated on any device.
mod common;

use common::tiny::{cfg, mesh, model, one_at_a_time};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::pipeline::{Link, ScheduleKind};
use triaxis::runtime::FaultKind;
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;
use triaxis::Error;

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
            "zb-v with one chunk per device",
            Mesh {
                schedule: ScheduleKind::ZeroBubbleV,
                ..mesh(1, 1, 2, 4)
            },
            m,
            2,
            8,
            2,
            vec!["zb-v places 2 chunks per device in a V", "--chunks 2"],
        ),
        (
            "dualpipev with fewer microbatches than stages",
            Mesh {
                schedule: ScheduleKind::DualPipeV,
                chunks: 2,
                ..mesh(1, 1, 2, 3)
            },
            m,
            2,
            8,
            2,
            vec!["m ≥ 2·pp", "--microbatches 4"],
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
            Engine::new(&gpus, big.clone(), layout, RuntimeOptions::default()).err(),
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
    let e = Engine::new(&gpus, cfg(4), mesh(2, 1, 1, 2), RuntimeOptions::default()).err();
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("accumulates 4 microbatches"), "{msg}");
    let e = Engine::new(&gpus, cfg(2), mesh(1, 1, 1, 2), RuntimeOptions::default()).err();
    assert!(e
        .map(|e| e.to_string())
        .unwrap_or_default()
        .contains("2 are given"));
}
