//! The communicator interface: every rank in its own thread, through the in-process
//! communicator and through the loopback double (every message serialised, collectives on
//! point-to-point messages), gives bit for bit what the host collectives give on all buffers
//! at once; each rank's ledger holds exactly the ring bytes it sent; a failing or silent peer
//! ends every waiting call with a named error.

use std::time::{Duration, Instant};

use triaxis::collective::{
    host, ring_all_reduce_rank_bytes, ring_reduce_scatter_rank_bytes, Algo, Ledger, Opts, Phases,
};
use triaxis::comm::{self, Communicator, GroupOptions, Tag};
use triaxis::link::Link;
use triaxis::rng::Rng;
use triaxis::Error;

fn inputs(d: usize, n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    (0..d).map(|_| rng.vec(n, 1.0)).collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Runs `f(comm, buf)` on every rank of `comms`, each in its own thread.
fn on_ranks<C: Communicator + 'static>(
    comms: Vec<C>,
    bufs: Vec<Vec<f32>>,
    f: impl Fn(&mut C, &mut Vec<f32>) -> triaxis::Result<()> + Send + Clone + 'static,
) -> Vec<(Vec<f32>, Ledger)> {
    let handles: Vec<_> = comms
        .into_iter()
        .zip(bufs)
        .map(|(mut c, mut b)| {
            let f = f.clone();
            std::thread::spawn(move || {
                f(&mut c, &mut b).expect("collective");
                (b, c.ledger().clone())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn uneven(n: usize, d: usize) -> Vec<usize> {
    // d + 1 offsets: chunk 0 empty when possible, the rest growing
    let mut b = vec![0];
    for k in 1..d {
        b.push((n * k * k / (d * d)).min(n));
    }
    b.push(n);
    b
}

/// Both communicators, every collective, against the host algorithms.
fn check_group(d: usize, n: usize) {
    let opts = GroupOptions::default();
    let link = Link::nvlink();
    let devices: Vec<usize> = (10..10 + d).collect();
    let xs = inputs(d, n, (d * 1000 + n) as u64);
    let ub = uneven(n, d);
    for loopback in [false, true] {
        let name = if loopback { "loopback" } else { "local" };
        macro_rules! run {
            ($f:expr) => {
                if loopback {
                    on_ranks(comm::loopback_group(&devices, &opts), xs.clone(), $f)
                } else {
                    on_ranks(comm::local_group(&devices, &opts), xs.clone(), $f)
                }
            };
        }
        for (algo, avg) in [
            (Algo::Ring, false),
            (Algo::Ring, true),
            (Algo::Naive, false),
            (Algo::Tree, true),
        ] {
            let got = run!(move |c, b| c.all_reduce(b, algo, None, avg));
            let mut want = xs.clone();
            let o = Opts {
                average: avg,
                ..Opts::default()
            };
            let mut l = Ledger::new();
            match algo {
                Algo::Ring => host::ring_all_reduce(&mut want, &o, &mut l, &link).unwrap(),
                Algo::Naive => host::naive_all_reduce(&mut want, &o, &mut l, &link).unwrap(),
                Algo::Tree => host::tree_all_reduce(&mut want, &o, &mut l, &link).unwrap(),
            }
            for (r, (b, ledger)) in got.iter().enumerate() {
                assert_eq!(
                    bits(b),
                    bits(&want[r]),
                    "{name} {algo:?} d={d} n={n} rank {r}"
                );
                if algo == Algo::Ring {
                    let sent: u64 = ledger.entries.iter().map(|e| e.bytes).sum();
                    assert_eq!(sent, ring_all_reduce_rank_bytes(n, d, r), "{name} bytes");
                    assert!(ledger.entries.iter().all(|e| e.group == devices));
                }
            }
        }
        // reduce-scatter and all-gather on uneven bounds, as ZeRO cuts its shards
        let b1 = ub.clone();
        let got = run!(move |c, b| c.reduce_scatter(b, &b1, true));
        let mut want = xs.clone();
        let mut l = Ledger::new();
        let o = Opts::mean();
        host::ring_in(&mut want, Phases::ReduceScatter, &ub, &o, &mut l, &link).unwrap();
        for (r, (b, _)) in got.iter().enumerate() {
            let c = ub[r]..ub[r + 1];
            assert_eq!(bits(&b[c.clone()]), bits(&want[r][c]), "{name} RS rank {r}");
        }
        let b2 = ub.clone();
        let got = run!(move |c, b| c.all_gather(b, &b2));
        let mut want = xs.clone();
        host::ring_in(
            &mut want,
            Phases::AllGather,
            &ub,
            &Opts::default(),
            &mut l,
            &link,
        )
        .unwrap();
        for (r, (b, _)) in got.iter().enumerate() {
            assert_eq!(bits(b), bits(&want[r]), "{name} AG rank {r}");
        }
        let got = run!(move |c, b| c.broadcast(b, d - 1));
        for (r, (b, _)) in got.iter().enumerate() {
            assert_eq!(bits(b), bits(&xs[d - 1]), "{name} broadcast rank {r}");
        }
        // even bounds: each rank's ledger holds its reduce-scatter bytes exactly
        let even = comm::even(n, d);
        let got = run!(move |c, b| c.reduce_scatter(b, &even, false));
        for (r, (_, ledger)) in got.iter().enumerate() {
            let sent: u64 = ledger.entries.iter().map(|e| e.bytes).sum();
            assert_eq!(
                sent,
                ring_reduce_scatter_rank_bytes(n, d, r),
                "{name} RS bytes"
            );
        }
    }
}

#[test]
fn every_collective_gives_the_host_algorithms_bits_on_both_communicators() {
    for d in [1, 2, 3, 4, 5] {
        for n in [1, 7, 33, 1000] {
            check_group(d, n);
        }
    }
    println!("local and loopback: all-reduce (ring, naive, tree), reduce-scatter, all-gather, broadcast bit-identical to the host collectives for d = 1..5");
}

#[test]
fn messages_and_byte_gathers_arrive_in_order_with_their_tags_flows_interleaved() {
    for loopback in [false, true] {
        let opts = GroupOptions::default();
        let run = |mut c: Box<dyn Communicator>| {
            std::thread::spawn(move || {
                let r = c.rank();
                let all = c.all_gather_bytes(vec![r as u8; r + 1]).unwrap();
                assert_eq!(all, vec![vec![0u8], vec![1, 1], vec![2, 2, 2]]);
                let next = (r + 1) % 3;
                let prev = (r + 2) % 3;
                for micro in 0..4 {
                    let tag = Tag {
                        flow: 0,
                        micro,
                        stage: r,
                    };
                    c.send(next, tag, vec![(r * 10 + micro) as f32; 3]).unwrap();
                    let want = Tag {
                        flow: 0,
                        micro,
                        stage: prev,
                    };
                    let got = c.recv(prev, want).unwrap();
                    assert_eq!(got, vec![(prev * 10 + micro) as f32; 3]);
                }
                // flows interleave: a gradient sent before an activation is kept until its
                // receive, whichever is received first
                let t = |flow: u8, micro: usize, stage: usize| Tag { flow, micro, stage };
                c.send(next, t(1, 9, r), vec![1.0]).unwrap();
                c.send(next, t(0, 9, r), vec![0.0]).unwrap();
                assert_eq!(c.recv(prev, t(0, 9, prev)).unwrap(), vec![0.0]);
                assert_eq!(c.recv(prev, t(1, 9, prev)).unwrap(), vec![1.0]);
                // a wrong tag within a flow is an error, not a silent mix-up
                c.send(next, t(0, 10, r), vec![1.0]).unwrap();
                let e = c.recv(prev, t(0, 11, prev)).unwrap_err();
                assert!(e.to_string().contains("expected"), "{e}");
            })
        };
        let comms: Vec<Box<dyn Communicator>> = if loopback {
            comm::loopback_group(&[0, 1, 2], &opts)
                .into_iter()
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .collect()
        } else {
            comm::local_group(&[0, 1, 2], &opts)
                .into_iter()
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .collect()
        };
        for h in comms.into_iter().map(run).collect::<Vec<_>>() {
            h.join().unwrap();
        }
    }
}

#[test]
fn a_failed_or_silent_peer_ends_every_waiting_call_with_a_named_error() {
    let opts = GroupOptions {
        timeout: Duration::from_millis(300),
        ..GroupOptions::default()
    };
    for loopback in [false, true] {
        let mut comms: Vec<Box<dyn Communicator>> = if loopback {
            comm::loopback_group(&[4, 5, 6], &opts)
                .into_iter()
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .collect()
        } else {
            comm::local_group(&[4, 5, 6], &opts)
                .into_iter()
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .collect()
        };
        // rank 2 fails and says so: ranks 0 and 1 stop waiting at once
        let failing = comms.pop().unwrap();
        let waiting: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                std::thread::spawn(move || {
                    let t = Instant::now();
                    let mut b = vec![1.0f32; 64];
                    let e = c.all_reduce(&mut b, Algo::Ring, None, false).unwrap_err();
                    (e, t.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        failing.abort("injected failure");
        for h in waiting {
            let (e, took) = h.join().unwrap();
            println!("loopback={loopback}: {e} (after {took:?})");
            assert!(matches!(e, Error::Aborted(_)), "{e:?}");
            assert!(e.to_string().contains("device 6") && e.to_string().contains("injected"));
            assert!(took < Duration::from_millis(250), "{took:?}");
        }
        // a silent peer: the call ends after the group's timeout
        let mut comms = comm::local_group(&[0, 1], &opts);
        let _silent = comms.pop().unwrap();
        let t = Instant::now();
        let mut b = vec![0.0f32; 4];
        let e = comms[0]
            .all_reduce(&mut b, Algo::Ring, None, false)
            .unwrap_err();
        println!("silent peer: {e} (after {:?})", t.elapsed());
        assert!(e.to_string().contains("no answer"), "{e}");
    }
}

#[test]
fn ranks_that_call_different_collectives_are_told_so() {
    let comms = comm::local_group(&[0, 1], &GroupOptions::default());
    let hs: Vec<_> = comms
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut b = vec![1.0f32; 8];
                if c.rank() == 0 {
                    c.all_reduce(&mut b, Algo::Ring, None, false)
                } else {
                    c.broadcast(&mut b, 0)
                }
            })
        })
        .collect();
    let errs: Vec<String> = hs
        .into_iter()
        .filter_map(|h| h.join().unwrap().err().map(|e| e.to_string()))
        .collect();
    println!("{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("programs differ")),
        "{errs:?}"
    );
}
