//! The distributed runtime without MPI: every device's engine in a thread of its own, as if
//! each were a process, talking only through serialising (loopback) communicators — its
//! pipeline, tensor- and data-parallel groups and a control group on which the "processes"
//! exchange chunk shapes, step records and model state. Each ends with the bits of the same
//! layout run in one engine, with the same step costs' bytes, and every "process" assembles
//! the same model state.
mod common;

use common::tiny::{batches, cfg, mesh};
use triaxis::comm::{loopback_group, Communicator, GroupOptions};
use triaxis::engine::Engine;
use triaxis::gpu;
use triaxis::mesh::Mesh;
use triaxis::runtime::{groups, CommKind, RuntimeOptions};

/// (checksum, losses, dp bytes, tp bytes) of `mesh` run with one engine per device.
fn per_device(gpus: &[gpu::Gpu], mesh: Mesh) -> Vec<(String, Vec<f32>, u64, u64)> {
    let n = mesh.devices();
    let ro = RuntimeOptions {
        comm: CommKind::Loopback,
        ..RuntimeOptions::default()
    };
    let comms = groups(&mesh, &ro);
    let control = loopback_group(
        &(0..n).collect::<Vec<_>>(),
        &GroupOptions {
            timeout: std::time::Duration::from_secs(60),
            channel_bound: 2,
            link: ro.link,
        },
    );
    let data = batches(mesh.dp * mesh.microbatches, 3);
    std::thread::scope(|scope| {
        let handles: Vec<_> = comms
            .into_iter()
            .zip(control)
            .enumerate()
            .map(|(d, (c, ctl))| {
                let g = gpus[d].clone();
                let data = &data;
                scope.spawn(move || {
                    let ctl: Box<dyn Communicator> = Box::new(ctl);
                    let mut e = Engine::distributed(
                        &[(d, g)],
                        cfg(mesh.microbatches),
                        mesh,
                        RuntimeOptions::default(),
                        vec![c],
                        ctl,
                    )
                    .unwrap_or_else(|e| panic!("device {d}: {e}"));
                    let (mut losses, mut bytes) = (Vec::new(), (0, 0));
                    for (s, b) in data.iter().enumerate() {
                        let c = e.step(b, s).unwrap_or_else(|e| panic!("device {d}: {e}"));
                        assert_eq!(c.memory.len(), n, "every device's memory is reported");
                        losses.push(c.stats.loss);
                        bytes = (c.dp_bytes, c.tp_bytes);
                    }
                    assert!(e.replicas_agree().unwrap());
                    (e.checksum().unwrap(), losses, bytes.0, bytes.1)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn one_engine_per_device_gives_the_one_process_bits() {
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    for layout in [
        mesh(2, 1, 1, 2),
        mesh(1, 1, 2, 2),
        mesh(1, 2, 1, 2),
        mesh(2, 1, 2, 2),
        Mesh {
            zero: 3,
            ..mesh(2, 1, 1, 2)
        },
        Mesh {
            zero: 1,
            ..mesh(2, 1, 2, 2)
        },
    ] {
        let n = layout.devices();
        let mut one = Engine::new(
            &gpus[..n],
            cfg(layout.microbatches),
            layout,
            RuntimeOptions::default(),
        )
        .unwrap();
        let (mut losses, mut bytes) = (Vec::new(), (0, 0));
        for (s, b) in batches(layout.dp * layout.microbatches, 3)
            .iter()
            .enumerate()
        {
            let c = one.step(b, s).unwrap();
            losses.push(c.stats.loss);
            bytes = (c.dp_bytes, c.tp_bytes);
        }
        let want = one.checksum().unwrap();
        let got = per_device(&gpus, layout);
        println!("{}: {want}", layout.describe());
        for (d, (sum, l, dp, tp)) in got.iter().enumerate() {
            assert_eq!(sum, &want, "{} device {d}: checksum", layout.describe());
            assert_eq!(l, &losses, "{} device {d}: losses", layout.describe());
            assert_eq!((*dp, *tp), bytes, "{} device {d}: bytes", layout.describe());
        }
    }
}

#[test]
fn a_fault_in_one_process_ends_every_process_with_its_name() {
    use triaxis::runtime::{Fault, FaultKind};
    let Some(gpus) = gpu::test_gpus(4) else {
        return;
    };
    let layout = mesh(2, 1, 2, 2);
    let n = layout.devices();
    let ro = RuntimeOptions {
        comm: CommKind::Loopback,
        ..RuntimeOptions::default()
    };
    let comms = groups(&layout, &ro);
    let gopts = GroupOptions {
        timeout: std::time::Duration::from_secs(30),
        channel_bound: 2,
        link: ro.link,
    };
    let control = loopback_group(&(0..n).collect::<Vec<_>>(), &gopts);
    let opts = RuntimeOptions {
        fault: Some(Fault {
            device: 3,
            action: 1,
            step: 0,
            kind: FaultKind::Panic,
        }),
        ..RuntimeOptions::default()
    };
    let data = batches(layout.dp * layout.microbatches, 1);
    let t0 = std::time::Instant::now();
    let errors: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = comms
            .into_iter()
            .zip(control)
            .enumerate()
            .map(|(d, (c, ctl))| {
                let (g, data, opts) = (gpus[d].clone(), &data, opts.clone());
                scope.spawn(move || {
                    let mut e = Engine::distributed(
                        &[(d, g)],
                        cfg(layout.microbatches),
                        layout,
                        opts,
                        vec![c],
                        Box::new(ctl),
                    )
                    .unwrap();
                    e.step(&data[0], 0).unwrap_err().to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = t0.elapsed();
    for (d, e) in errors.iter().enumerate() {
        println!("device {d}: {e}");
        assert!(
            e.contains("device 3"),
            "device {d} must name the failed device: {e}"
        );
    }
    assert!(errors[3].contains("injected panic"), "{}", errors[3]);
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}
