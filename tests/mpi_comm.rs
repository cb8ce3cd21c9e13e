//! The MPI communicator across real processes: the test launches this test binary under
//! `mpirun -n 2` and `-n 4`, where each process runs `mpi_child` as one rank. The children
//! check that every collective in ordered mode gives the in-process communicator's bits (each
//! rank recomputes every rank's seeded input and runs a `local_group` of threads for the
//! expected result), that native mode agrees to rounding and keeps the ring's ledger bytes,
//! that tagged messages of two flows interleave, and that an aborting peer or a silent one ends
//! a waiting receive with a named error. The parent checks mpirun's status and every rank's
//! report lines.
#![cfg(feature = "mpi")]

use std::ops::Range;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use triaxis::collective::{
    even_bounds, ring_all_gather_rank_bytes, ring_all_reduce_rank_bytes,
    ring_reduce_scatter_rank_bytes, Algo, Ledger,
};
use triaxis::comm::mpi::{self, MpiComm, Reduction, SimpleCommunicator};
use triaxis::comm::{self, Communicator, GroupOptions, Tag};
use triaxis::rng::Rng;
use triaxis::Error;

/// Set in the children's environment: only then does `mpi_child` run.
const CHILD: &str = "TRIAXIS_MPI_CHILD";

/// What each rank reports when a part passed.
const PARTS: [&str; 5] = ["ordered", "native", "messages", "abort", "timeout"];

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[test]
fn the_mpi_communicator_under_mpirun_with_2_and_4_ranks() {
    let Some(mpirun) = find_on_path("mpirun") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "mpirun is not on PATH, but CI runs the MPI tests: install Open MPI \
             (apt-get install openmpi-bin libopenmpi-dev)"
        );
        println!("skipped: mpirun is not on PATH (install Open MPI to run the MPI tests)");
        return;
    };
    let exe = std::env::current_exe().expect("the test binary's path");
    for n in [2usize, 4] {
        let t = Instant::now();
        let out = Command::new(&mpirun)
            .args(["--oversubscribe", "-n", &n.to_string()])
            .arg(&exe)
            .args(["--exact", "mpi_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            // shared memory within the machine, no network probing, no ptrace-based copies
            .env("OMPI_MCA_btl", "self,vader")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .output()
            .expect("run mpirun");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "mpirun -n {n} failed ({}):\n{text}",
            out.status
        );
        for r in 0..n {
            for part in PARTS {
                let line = format!("mpi n={n} rank {r}: {part} ok");
                assert!(text.contains(&line), "no {line:?} in:\n{text}");
            }
        }
        for line in text.lines().filter(|l| l.starts_with("mpi n=")) {
            println!("{line}");
        }
        println!("mpirun -n {n}: every rank passed in {:.1?}", t.elapsed());
    }
}

fn input(device: usize, len: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed * 1000 + device as u64).vec(len, 1.0)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// d + 1 offsets, multiples of 64, uneven (chunk 0 often empty), ending at 64·units.
fn uneven64(units: usize, d: usize) -> Vec<usize> {
    let mut b: Vec<usize> = (0..d).map(|k| 64 * (units * k * k / (d * d))).collect();
    b.push(64 * units);
    b
}

/// One collective, run on an MPI rank and on every thread of an in-process group.
type Op = fn(&mut dyn Communicator, &mut Vec<f32>, &[usize]) -> triaxis::Result<()>;

/// Every rank's result of `op` over `comm::local_group` (the in-process communicator).
fn in_process(devices: &[usize], xs: &[Vec<f32>], bounds: &[usize], op: Op) -> Vec<Vec<f32>> {
    let comms = comm::local_group(devices, &GroupOptions::default());
    let hs: Vec<_> = comms
        .into_iter()
        .zip(xs.to_vec())
        .map(|(mut c, mut b)| {
            let bounds = bounds.to_vec();
            std::thread::spawn(move || {
                op(&mut c, &mut b, &bounds).expect("in-process collective");
                b
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The hop bytes of `comm`'s last call and its collective's name.
fn last_call(ledger: &Ledger) -> (u64, Option<&'static str>) {
    let call = ledger.calls - 1;
    let es: Vec<_> = ledger.entries.iter().filter(|e| e.call == call).collect();
    (
        es.iter().map(|e| e.bytes).sum(),
        es.first().map(|e| e.collective),
    )
}

/// The collectives checked, each with the part of the buffer that is defined afterwards
/// (reduce-scatter: only the rank's own chunk) and the ring bytes the ledger must show.
struct Case {
    name: &'static str,
    op: Op,
    own_chunk_only: bool,
    /// (n, d, r) → bytes this rank's ledger records, with even bounds.
    ring_bytes: Option<fn(usize, usize, usize) -> u64>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "ring all-reduce",
            op: |c, b, _| c.all_reduce(b, Algo::Ring, None, false),
            own_chunk_only: false,
            ring_bytes: Some(ring_all_reduce_rank_bytes),
        },
        Case {
            name: "ring all-reduce, bounds, mean",
            op: |c, b, bounds| c.all_reduce(b, Algo::Ring, Some(bounds), true),
            own_chunk_only: false,
            ring_bytes: None,
        },
        Case {
            name: "naive all-reduce",
            op: |c, b, _| c.all_reduce(b, Algo::Naive, None, false),
            own_chunk_only: false,
            ring_bytes: None,
        },
        Case {
            name: "tree all-reduce, mean",
            op: |c, b, _| c.all_reduce(b, Algo::Tree, None, true),
            own_chunk_only: false,
            ring_bytes: None,
        },
        Case {
            name: "reduce-scatter, mean",
            op: |c, b, bounds| c.reduce_scatter(b, bounds, true),
            own_chunk_only: true,
            ring_bytes: Some(ring_reduce_scatter_rank_bytes),
        },
        Case {
            name: "all-gather",
            op: |c, b, bounds| c.all_gather(b, bounds),
            own_chunk_only: false,
            ring_bytes: Some(ring_all_gather_rank_bytes),
        },
        Case {
            name: "broadcast from the last rank",
            op: |c, b, _| {
                let root = c.size() - 1;
                c.broadcast(b, root)
            },
            own_chunk_only: false,
            ring_bytes: None,
        },
    ]
}

/// Every case, lengths 1, 7, 1000 (even bounds) and 832 = 13·64 (even and uneven 64-aligned
/// bounds), on `c` against the in-process group: bitwise (ordered) or to 1e-5 (native).
fn check_collectives(c: &mut MpiComm, seed: u64) {
    let (d, r) = (c.size(), c.rank());
    let devices = c.devices().to_vec();
    let native = c.reduction() == Reduction::Native;
    let mut layouts: Vec<(usize, Vec<usize>)> = [1, 7, 1000, 832]
        .iter()
        .map(|&n| (n, even_bounds(n, d)))
        .collect();
    layouts.push((832, uneven64(13, d)));
    for (n, bounds) in layouts {
        let even = bounds == even_bounds(n, d);
        let xs: Vec<Vec<f32>> = devices.iter().map(|&dev| input(dev, n, seed)).collect();
        for case in cases() {
            let want = &in_process(&devices, &xs, &bounds, case.op)[r];
            let mut got = xs[r].clone();
            (case.op)(c, &mut got, &bounds).expect(case.name);
            let span: Range<usize> = if case.own_chunk_only {
                bounds[r]..bounds[r + 1]
            } else {
                0..n
            };
            let what = format!(
                "{} n={n} bounds={bounds:?} rank {r} of {devices:?}",
                case.name
            );
            assert_eq!(got.len(), n, "{what}");
            if native {
                for (i, (g, w)) in got[span.clone()].iter().zip(&want[span]).enumerate() {
                    let tol = 1e-5 * w.abs().max(1.0);
                    assert!((g - w).abs() <= tol, "{what}: element {i}: {g} vs {w}");
                }
            } else {
                let (g, w) = (bits(&got[span.clone()]), bits(&want[span]));
                let first = g.iter().zip(&w).position(|(a, b)| a != b);
                assert!(first.is_none(), "{what}: first differing element {first:?}");
            }
            let (bytes, name) = last_call(c.ledger());
            if let (Some(f), true) = (case.ring_bytes, even) {
                assert_eq!(bytes, f(n, d, r), "{what}: ledger bytes");
            }
            if let (true, Some(name)) = (native, name) {
                assert!(name.starts_with("mpi_"), "{what}: {name}");
            }
        }
    }
    // the byte all-gather: point-to-point in both modes
    let mine = vec![devices[r] as u8; r + 1];
    let all = c.all_gather_bytes(mine).unwrap();
    let want: Vec<Vec<u8>> = (0..d).map(|q| vec![devices[q] as u8; q + 1]).collect();
    assert_eq!(all, want);
}

/// Tagged messages around the ring: in order, two flows interleaved, a wrong tag refused, and
/// a message large enough for MPI's rendezvous protocol sent by every rank before any
/// receives (nonblocking sends: no deadlock).
fn check_messages(c: &mut MpiComm) {
    let (d, r) = (c.size(), c.rank());
    let (next, prev) = ((r + 1) % d, (r + d - 1) % d);
    let t = |flow: u8, micro: usize, stage: usize| Tag { flow, micro, stage };
    for micro in 0..4 {
        c.send(next, t(0, micro, r), vec![(r * 10 + micro) as f32; 3])
            .unwrap();
    }
    for micro in 0..4 {
        let got = c.recv(prev, t(0, micro, prev)).unwrap();
        assert_eq!(got, vec![(prev * 10 + micro) as f32; 3]);
    }
    c.send(next, t(1, 9, r), vec![1.0]).unwrap();
    c.send(next, t(0, 9, r), vec![0.0]).unwrap();
    assert_eq!(c.recv(prev, t(0, 9, prev)).unwrap(), vec![0.0]);
    assert_eq!(c.recv(prev, t(1, 9, prev)).unwrap(), vec![1.0]);
    let big: Vec<f32> = input(r, 300_000, 7);
    c.send(next, t(2, 0, r), big).unwrap();
    assert_eq!(
        bits(&c.recv(prev, t(2, 0, prev)).unwrap()),
        bits(&input(prev, 300_000, 7))
    );
    c.send(next, t(0, 10, r), vec![1.0]).unwrap();
    let e = c.recv(prev, t(0, 11, prev)).unwrap_err();
    assert!(e.to_string().contains("expected"), "{e}");
    let sends = c.ledger().entries.iter().filter(|e| e.collective == "send");
    assert_eq!(sends.count(), 4 + 2 + 1 + 1);
}

/// A fresh ordered group of the whole world in rank order, waiting at most `timeout`.
fn world_group(world: &SimpleCommunicator, n: usize, timeout: Duration) -> MpiComm {
    let opts = GroupOptions {
        timeout,
        ..GroupOptions::default()
    };
    let devices: Vec<usize> = (0..n).collect();
    mpi::mpi_group(world, &devices, &opts, Reduction::Ordered)
        .unwrap()
        .expect("every rank is in the world group")
}

/// The last rank aborts; every other rank's receive from it fails at once, naming it and why;
/// the aborted rank's own next call fails too.
fn check_abort(world: &SimpleCommunicator, n: usize, r: usize) -> String {
    let mut c = world_group(world, n, Duration::from_secs(20));
    let failing = n - 1;
    let tag = Tag {
        flow: 0,
        micro: 0,
        stage: 0,
    };
    if r == failing {
        std::thread::sleep(Duration::from_millis(50));
        c.abort("injected failure");
        let e = c.recv(0, tag).unwrap_err();
        assert!(e.to_string().contains("injected failure"), "{e}");
        return format!("aborted ({e})");
    }
    let t = Instant::now();
    let e = c.recv(failing, tag).unwrap_err();
    let took = t.elapsed();
    let msg = e.to_string();
    assert!(matches!(e, Error::Aborted(_)), "{e:?}");
    assert!(
        msg.contains(&format!(
            "rank {failing} (device {failing}) stopped: injected failure"
        )),
        "{msg}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}: {msg}");
    // stopped for good: the next call fails at once
    let mut b = vec![1.0f32; 8];
    let again = c.all_reduce(&mut b, Algo::Ring, None, false).unwrap_err();
    assert!(again.to_string().contains("injected failure"), "{again}");
    format!("{msg} (after {took:.1?})")
}

/// Nobody sends: the receive ends after the group's short timeout, naming the rank and call.
fn check_timeout(world: &SimpleCommunicator, n: usize, r: usize) -> String {
    let mut c = world_group(world, n, Duration::from_millis(300));
    let from = (r + 1) % n;
    let tag = Tag {
        flow: 1,
        micro: 3,
        stage: from,
    };
    let t = Instant::now();
    let e = c.recv(from, tag).unwrap_err();
    let took = t.elapsed();
    let msg = e.to_string();
    assert!(matches!(e, Error::Aborted(_)), "{e:?}");
    assert!(msg.contains("no answer within 300ms"), "{msg}");
    assert!(msg.contains(&format!("waiting for rank {from}")), "{msg}");
    assert!(msg.contains("recv Tag"), "{msg}");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(5));
    format!("{msg} (after {took:.1?})")
}

/// One rank of the mpirun job (a no-op unless `CHILD` is set).
#[test]
fn mpi_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let universe = mpi::init().expect("MPI initialises with MPI_THREAD_MULTIPLE");
    let world = universe.world();
    let (n, r) = (mpi::world_size(&world), mpi::world_rank(&world));
    assert!(comm::launched_by_mpirun());
    if r == 0 {
        let lib = mpi::library_version().unwrap();
        let host = mpi::processor_name().unwrap();
        println!("mpi n={n}: {} on {host}", lib.lines().next().unwrap_or(""));
    }
    let ok = |part: &str| println!("mpi n={n} rank {r}: {part} ok");
    let opts = GroupOptions {
        timeout: Duration::from_secs(20),
        ..GroupOptions::default()
    };
    // the world in reverse (group rank = position in the list) and a family of disjoint
    // groups: two pairs in mixed order for 4 ranks, single-rank groups for 2
    let reversed: Vec<usize> = (0..n).rev().collect();
    let family: Vec<Vec<usize>> = if n == 4 {
        vec![vec![3, 1], vec![0, 2]]
    } else {
        (0..n).map(|q| vec![q]).collect()
    };
    for (reduction, part) in [
        (Reduction::Ordered, "ordered"),
        (Reduction::Native, "native"),
    ] {
        let mut w = mpi::mpi_group(&world, &reversed, &opts, reduction)
            .unwrap()
            .expect("every rank is in the world group");
        assert_eq!(w.rank(), n - 1 - r);
        assert_eq!(w.devices(), &reversed[..]);
        assert_eq!(w.reduction(), reduction);
        let mut g = mpi::mpi_groups(&world, &family, &opts, reduction)
            .unwrap()
            .expect("every rank is in one group of the family");
        let mine = family.iter().find(|m| m.contains(&r)).unwrap();
        assert_eq!(g.devices(), &mine[..]);
        assert_eq!(g.devices()[g.rank()], r);
        check_collectives(&mut w, 1);
        check_collectives(&mut g, 2);
        ok(part);
    }
    let mut w = mpi::mpi_group(&world, &reversed, &opts, Reduction::Native)
        .unwrap()
        .unwrap();
    check_messages(&mut w);
    ok("messages");
    let outside = mpi::mpi_group(&world, &[0], &opts, Reduction::Ordered).unwrap();
    assert_eq!(outside.is_some(), r == 0);
    assert!(mpi::mpi_groups(&world, &[vec![0, 1], vec![1]], &opts, Reduction::Ordered).is_err());
    let why = check_abort(&world, n, r);
    println!("mpi n={n} rank {r}: abort: {why}");
    ok("abort");
    let why = check_timeout(&world, n, r);
    println!("mpi n={n} rank {r}: timeout: {why}");
    ok("timeout");
}
