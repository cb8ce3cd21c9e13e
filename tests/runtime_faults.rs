//! Faults injected under every axis run through the one runtime, as clean runs do: an error, a
//! panic, a lost device or a NaN — in replica 1 as well as 0, at step 0, inside a pass or
//! during a gradient reduction — under plain data parallelism, ZeRO-1, ZeRO-3, tensor parallelism and
//! dp × tp × pp. Each ends the step with an error naming device, stage, action and step, within
//! seconds, leaves no thread behind and no parameter changed, and the next step runs clean.
mod common;

use std::time::{Duration, Instant};

use common::tiny::{cfg, no_thread_left, threads};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::error::Error;
use triaxis::gpu;
use triaxis::mesh::Mesh;
use triaxis::runtime::{Fault, FaultKind};

fn mesh(dp: usize, tp: usize, pp: usize, zero: usize) -> Mesh {
    Mesh {
        dp,
        tp,
        pp,
        zero,
        microbatches: 2,
        ..Mesh::default()
    }
}

/// One injected fault and what the error must say.
struct Case {
    layout: Mesh,
    /// In a pass (`false`) or in a gradient reduction (`true`).
    in_reduction: bool,
    fault: Fault,
    /// (device, stage, action, part of the message)
    want: (usize, usize, &'static str, &'static str),
}

fn case(
    layout: Mesh,
    in_reduction: bool,
    (kind, device, action, step): (FaultKind, usize, usize, usize),
    want: (usize, usize, &'static str, &'static str),
) -> Case {
    Case {
        layout,
        in_reduction,
        fault: Fault {
            kind,
            device,
            action,
            step,
        },
        want,
    }
}

fn cases() -> Vec<Case> {
    use FaultKind::*;
    let grad = "gradient reduction of bucket 0";
    // devices are numbered (replica · pp + stage) · tp + tp rank; 1F1B, m = 2: a stage's list is
    // F0 B0 F1 B1 on the last stage (F0 F1 B0 B1 when it has no later stage to wait for)
    vec![
        // plain data parallelism: replica 1, step 0, in a pass and in the reduction
        case(
            mesh(2, 1, 1, 0),
            false,
            (Error, 1, 1, 0),
            (1, 0, "0B0", "injected fault"),
        ),
        case(
            mesh(2, 1, 1, 0),
            false,
            (Panic, 0, 2, 1),
            (0, 0, "0F1", "injected panic"),
        ),
        case(
            mesh(2, 1, 1, 0),
            true,
            (Panic, 1, 0, 0),
            (1, 0, grad, "injected panic"),
        ),
        case(
            mesh(2, 1, 1, 0),
            true,
            (Nan, 1, 0, 1),
            (1, 0, "gradient check", "before any reduction"),
        ),
        case(
            mesh(2, 1, 1, 0),
            false,
            (Nan, 1, 0, 0),
            (1, 0, "loss", "the loss is NaN"),
        ),
        // ZeRO-1: the reduce-scatter
        case(
            mesh(2, 1, 1, 1),
            true,
            (DeviceLost, 1, 0, 0),
            (1, 0, grad, "injected fault"),
        ),
        case(
            mesh(2, 1, 1, 1),
            false,
            (Nan, 0, 1, 1),
            (0, 0, "gradient check", "not finite"),
        ),
        // ZeRO-3: in a pass, in the reduce-scatter, a NaN arriving at it
        case(
            mesh(2, 1, 1, 3),
            false,
            (Panic, 1, 1, 0),
            (1, 0, "0B0", "injected panic"),
        ),
        case(
            mesh(2, 1, 1, 3),
            true,
            (Error, 1, 0, 1),
            (1, 0, grad, "injected fault"),
        ),
        case(
            mesh(2, 1, 1, 3),
            true,
            (Nan, 0, 0, 0),
            (0, 0, "gradient check", "before any reduction"),
        ),
        case(
            mesh(2, 1, 1, 3),
            false,
            (Nan, 1, 2, 1),
            (1, 0, "loss", "the loss is NaN"),
        ),
        // tensor parallelism: tensor rank 1
        case(
            mesh(1, 2, 1, 0),
            false,
            (DeviceLost, 1, 0, 0),
            (1, 0, "0F0", "device lost"),
        ),
        case(
            mesh(1, 2, 1, 0),
            false,
            (Nan, 1, 1, 1),
            (1, 0, "gradient check", "not finite"),
        ),
        // dp × tp × pp: replica 1's last stage, tensor rank 1 (device 7), and a reduction
        case(
            mesh(2, 2, 2, 0),
            false,
            (Error, 7, 1, 0),
            (7, 1, "1B0", "injected fault"),
        ),
        case(
            mesh(2, 2, 2, 0),
            false,
            (Panic, 5, 3, 1),
            (5, 0, "0B1", "injected panic"),
        ),
        case(
            mesh(2, 2, 2, 0),
            true,
            (Error, 6, 0, 0),
            (6, 1, grad, "injected fault"),
        ),
        case(
            mesh(2, 2, 2, 1),
            true,
            (Nan, 4, 0, 1),
            (4, 0, "gradient check", "before any reduction"),
        ),
    ]
}

#[test]
fn every_fault_under_every_axis_is_named_and_leaves_nothing_behind() {
    let Some(gpus) = gpu::test_gpus(8) else {
        return;
    };
    let data = common::addition_batches(4, 6, 4, 3, cfg(1).micro);
    for c in cases() {
        let l = c.layout;
        let what = format!(
            "{} {:?} in {}",
            l.describe(),
            c.fault,
            if c.in_reduction {
                "a reduction"
            } else {
                "a pass"
            }
        );
        let opts = RuntimeOptions {
            fault: (!c.in_reduction).then_some(c.fault),
            reduce_fault: c.in_reduction.then_some(c.fault),
            recv_timeout: Duration::from_secs(10),
            ..RuntimeOptions::default()
        };
        let mut e = Engine::new(&gpus[..l.devices()], cfg(2), l, opts).unwrap();
        let n = e.batches_per_step();
        let step = c.fault.step;
        for (s, b) in data.iter().enumerate().take(step) {
            e.step(&b[..n], s)
                .unwrap_or_else(|err| panic!("{what}: clean step {s}: {err}"));
        }
        let before = e.state().unwrap().params;
        let base = threads();
        let t = Instant::now();
        let err = e.step(&data[step][..n], step).unwrap_err();
        let took = t.elapsed();
        println!("{what}: {err} (after {took:?})");
        assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
        let (device, stage, action, part) = c.want;
        match &err {
            Error::Worker {
                device: d,
                stage: st,
                action: a,
                step: s,
                msg,
            } => {
                assert_eq!((*d, *st, *s), (device, stage, step), "{what}: {err}");
                assert_eq!(a, action, "{what}");
                assert!(msg.contains(part), "{what}: {msg}");
            }
            other => panic!("{what}: expected a worker error, got {other:?}"),
        }
        assert!(
            no_thread_left(base),
            "{what}: a thread outlived the failed step"
        );
        assert_eq!(
            e.state().unwrap().params,
            before,
            "{what}: the failed step changed parameters"
        );
        // the groups are rebuilt: the next step runs clean
        let next = step + 1;
        e.step(&data[next][..n], next)
            .unwrap_or_else(|err| panic!("{what}: the step after the fault: {err}"));
    }
}
