//! Collectives: the ring against its naive twin, reduce-scatter ∘ all-gather = all-reduce,
//! bit-identical results under shuffled thread timing, uneven chunks, exact ledger bytes, and
//! errors that name the failing rank.

mod common;

use triaxis::collective::{self, host, Algo, Fault, Ledger, Opts};
use triaxis::cost::comm::ring_allreduce_bytes;
use triaxis::link::Link;
use triaxis::rng::Rng;
use triaxis::Error;

const DS: [usize; 5] = [1, 2, 3, 4, 7];
const NS: [usize; 5] = [0, 1, 5, 64, 1001];

fn inputs(seed: u64, d: usize, n: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    (0..d).map(|_| rng.vec(n, 1.0)).collect()
}

fn bits(bufs: &[Vec<f32>]) -> Vec<Vec<u32>> {
    bufs.iter()
        .map(|b| b.iter().map(|x| x.to_bits()).collect())
        .collect()
}

fn run_ring(bufs: &[Vec<f32>], opts: &Opts) -> (Vec<Vec<f32>>, Ledger) {
    let mut out = bufs.to_vec();
    let mut ledger = Ledger::new();
    host::ring_all_reduce(&mut out, opts, &mut ledger, &Link::pcie()).unwrap();
    (out, ledger)
}

fn run_naive(bufs: &[Vec<f32>], opts: &Opts) -> Vec<Vec<f32>> {
    let mut out = bufs.to_vec();
    host::naive_all_reduce(&mut out, opts, &mut Ledger::new(), &Link::pcie()).unwrap();
    out
}

#[test]
fn ring_matches_naive_twin() {
    for d in DS {
        for n in NS {
            for average in [false, true] {
                let x = inputs(7 * d as u64 + n as u64, d, n);
                let opts = Opts {
                    average,
                    ..Opts::default()
                };
                let (ring, _) = run_ring(&x, &opts);
                let naive = run_naive(&x, &opts);
                let mut worst = 0.0f64;
                for i in 0..n {
                    // Summation error scales with Σ|x|, not with the (possibly tiny) sum.
                    let scale: f64 = x.iter().map(|b| b[i].abs() as f64).sum::<f64>()
                        / if average { d as f64 } else { 1.0 };
                    let exact: f64 = x.iter().map(|b| b[i] as f64).sum::<f64>()
                        / if average { d as f64 } else { 1.0 };
                    for r in 0..d {
                        assert_eq!(ring[r][i].to_bits(), ring[0][i].to_bits(), "ranks agree");
                        assert_eq!(naive[r][i].to_bits(), naive[0][i].to_bits());
                        let e = (ring[r][i] as f64 - naive[r][i] as f64).abs();
                        assert!(e <= 1e-5 * scale.max(1e-30), "d={d} n={n} i={i}: {e}");
                        let e = (ring[r][i] as f64 - exact).abs();
                        assert!(
                            e <= 1e-5 * scale.max(1e-30),
                            "d={d} n={n} i={i} vs f64: {e}"
                        );
                        worst = worst.max(e / scale.max(1e-30));
                    }
                }
                if d <= 2 {
                    assert_eq!(bits(&ring), bits(&naive), "d={d}: same sum, same bits");
                }
                println!("d={d} n={n} average={average}: ring vs exact rel err {worst:.2e}");
            }
        }
    }
}

#[test]
fn ring_sums_each_chunk_in_ring_order() {
    // Chunk c = x(c+1) + x(c+2) + … + x(c), indices mod d: the documented order, bit for bit.
    for (d, n) in [(3, 7), (4, 64), (7, 1001), (7, 5)] {
        let x = inputs(11, d, n);
        let (ring, _) = run_ring(&x, &Opts::default());
        for c in 0..d {
            for i in collective::chunk(n, d, c) {
                let mut acc = x[(c + 1) % d][i];
                for k in 2..=d {
                    acc += x[(c + k) % d][i];
                }
                assert_eq!(ring[0][i].to_bits(), acc.to_bits(), "d={d} chunk {c} i={i}");
            }
        }
    }
}

#[test]
fn reduce_scatter_then_all_gather_is_all_reduce() {
    let link = Link::ideal();
    for d in DS {
        for n in NS {
            for average in [false, true] {
                let opts = Opts {
                    average,
                    ..Opts::default()
                };
                let x = inputs(3 + d as u64 * 1000 + n as u64, d, n);
                let (all, _) = run_ring(&x, &opts);
                let mut y = x.clone();
                let mut ledger = Ledger::new();
                host::ring_reduce_scatter(&mut y, &opts, &mut ledger, &link).unwrap();
                for (r, buf) in y.iter().enumerate() {
                    for i in collective::chunk(n, d, r) {
                        assert_eq!(buf[i].to_bits(), all[r][i].to_bits(), "d={d} n={n} r={r}");
                    }
                }
                // All-gather never reads outside the owned chunk: poison the rest.
                for (r, buf) in y.iter_mut().enumerate() {
                    let own = collective::chunk(n, d, r);
                    for (i, v) in buf.iter_mut().enumerate() {
                        if !own.contains(&i) {
                            *v = f32::NAN;
                        }
                    }
                }
                host::ring_all_gather(&mut y, &opts, &mut ledger, &link).unwrap();
                assert_eq!(bits(&y), bits(&all), "d={d} n={n} average={average}");
            }
        }
    }
}

#[test]
fn repeats_are_bit_identical_under_random_thread_timing() {
    for (d, n) in [(7, 1001), (4, 5), (3, 64)] {
        let x = inputs(5, d, n);
        let (reference, ref_ledger) = run_ring(&x, &Opts::default());
        for seed in 0..10 {
            let opts = Opts {
                jitter_us: 300,
                seed,
                average: seed % 2 == 1,
                ..Opts::default()
            };
            let (got, ledger) = run_ring(&x, &opts);
            let want = if opts.average {
                run_ring(&x, &Opts::mean()).0
            } else {
                reference.clone()
            };
            assert_eq!(bits(&got), bits(&want), "d={d} n={n} seed {seed}");
            // The ledger is in the same order whatever the timing (only wall times differ).
            let shape = |l: &Ledger| -> Vec<_> {
                l.entries
                    .iter()
                    .map(|e| (e.rank, e.kind, e.bytes))
                    .collect()
            };
            assert_eq!(shape(&ledger), shape(&ref_ledger));
        }
    }
}

#[test]
fn broadcast_copies_the_root() {
    for d in DS {
        for root in [0, d / 2, d - 1] {
            let x = inputs(9, d, 33);
            let mut y = x.clone();
            let mut ledger = Ledger::new();
            host::broadcast(&mut y, root, &mut ledger, &Link::nvlink()).unwrap();
            for b in &y {
                assert_eq!(bits(std::slice::from_ref(b)), bits(&x[root..root + 1]));
            }
            assert_eq!(ledger.hop_bytes(), (d as u64 - 1) * 33 * 4);
            assert!(ledger.entries.iter().all(|e| e.rank == root));
        }
    }
}

#[test]
fn chunks_split_odd_sizes() {
    for d in DS {
        for n in NS {
            let mut next = 0;
            let lens: Vec<usize> = (0..d)
                .map(|k| {
                    let c = collective::chunk(n, d, k);
                    assert_eq!(c.start, next, "chunks are contiguous");
                    next = c.end;
                    c.len()
                })
                .collect();
            assert_eq!(next, n, "chunks cover [0, n)");
            let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
            assert!(hi - lo <= 1, "d={d} n={n}: {lens:?}");
        }
    }
}

#[test]
fn ledger_bytes_equal_the_ring_formula() {
    let link = Link::pcie();
    for d in DS {
        for n in [0, 1, 5, 64, 1001, 7 * 12, 4 * 250] {
            let x = inputs(1, d, n);
            let (_, ledger) = run_ring(&x, &Opts::default());
            let hops: Vec<_> = ledger.entries.iter().filter(|e| e.is_hop()).collect();
            assert_eq!(hops.len(), 2 * (d - 1) * d, "d={d}: 2(d−1) hops per rank");
            let sent = ledger.sent_by_rank(d);
            for (r, &s) in sent.iter().enumerate() {
                assert_eq!(
                    s,
                    collective::ring_all_reduce_rank_bytes(n, d, r),
                    "d={d} n={n}"
                );
            }
            assert_eq!(
                ledger.hop_bytes(),
                collective::ring_all_reduce_group_bytes(n, d),
                "group total is 2(d−1)·S"
            );
            assert_eq!(ledger.staged_bytes(), 0, "host buffers: no staging");
            if n % d == 0 {
                let formula = ring_allreduce_bytes(4.0 * n as f64, d);
                assert_eq!(formula.fract(), 0.0);
                assert_eq!(collective::ring_all_reduce_bytes(n, d), formula as u64);
                assert!(sent.iter().all(|&s| s == formula as u64), "d={d} n={n}");
                // Link clock: 2(d−1) rounds of one S/d chunk each.
                let want = 2.0 * (d - 1) as f64 * link.transfer_time(4 * (n / d) as u64);
                assert!((ledger.link_clock() - want).abs() <= 1e-12 * want.max(1.0));
            } else {
                let max = *sent.iter().max().unwrap();
                assert_eq!(collective::ring_all_reduce_bytes(n, d), max);
                let exact = ring_allreduce_bytes(4.0 * n as f64, d);
                assert!(
                    (max as f64 - exact).abs() <= 8.0,
                    "d={d} n={n}: {max} vs {exact}"
                );
            }
            // Halves: reduce-scatter and all-gather alone.
            let mut y = x.clone();
            let mut l = Ledger::new();
            host::ring_reduce_scatter(&mut y, &Opts::default(), &mut l, &link).unwrap();
            let rs: Vec<u64> = (0..d)
                .map(|r| collective::ring_reduce_scatter_rank_bytes(n, d, r))
                .collect();
            assert_eq!(l.sent_by_rank(d), rs);
            let mut l = Ledger::new();
            host::ring_all_gather(&mut y, &Opts::default(), &mut l, &link).unwrap();
            let ag: Vec<u64> = (0..d)
                .map(|r| collective::ring_all_gather_rank_bytes(n, d, r))
                .collect();
            assert_eq!(l.sent_by_rank(d), ag);
        }
    }
    // The naive twin moves 2(d−1)·S through rank 0.
    let mut x = inputs(2, 4, 100);
    let mut l = Ledger::new();
    host::naive_all_reduce(&mut x, &Opts::default(), &mut l, &link).unwrap();
    assert_eq!(l.hop_bytes(), 2 * 3 * 400);
    assert_eq!(l.sent_by_rank(4), vec![3 * 400, 400, 400, 400]);
}

#[test]
fn ledger_stamps_step_group_and_call() {
    let mut l = Ledger {
        step: 5,
        group: vec![4, 5, 6],
        ..Ledger::default()
    };
    let mut x = inputs(3, 3, 10);
    host::ring_all_reduce(&mut x, &Opts::default(), &mut l, &Link::ideal()).unwrap();
    l.step = 6;
    host::naive_all_reduce(&mut x, &Opts::default(), &mut l, &Link::ideal()).unwrap();
    assert!(l.entries.iter().all(|e| e.group == vec![4, 5, 6]));
    let s5 = l.for_step(5);
    assert!(s5
        .entries
        .iter()
        .all(|e| e.call == 0 && e.collective == "ring_all_reduce"));
    assert_eq!(
        s5.hop_bytes(),
        collective::ring_all_reduce_group_bytes(10, 3)
    );
    assert!(l
        .for_step(6)
        .entries
        .iter()
        .all(|e| e.call == 1 && e.collective == "naive_all_reduce"));
    assert_eq!(l.link_clock(), 0.0, "ideal link");
    // A group of the wrong size is refused.
    let mut y = inputs(3, 2, 10);
    let e = host::ring_all_reduce(&mut y, &Opts::default(), &mut l, &Link::ideal());
    assert!(matches!(e, Err(Error::Config(_))), "{e:?}");
}

#[test]
fn bad_input_and_failing_ranks_are_errors() {
    let (o, link) = (Opts::default(), Link::ideal());
    let mut l = Ledger::new();
    let mut empty: Vec<Vec<f32>> = Vec::new();
    let e = host::ring_all_reduce(&mut empty, &o, &mut l, &link).unwrap_err();
    println!("{e}");
    assert!(matches!(e, Error::Config(ref m) if m.contains("empty group")));
    assert!(host::naive_all_reduce(&mut empty, &o, &mut l, &link).is_err());
    let mut ragged = vec![vec![0.0; 5], vec![0.0; 5], vec![0.0; 4]];
    let e = host::ring_reduce_scatter(&mut ragged, &o, &mut l, &link).unwrap_err();
    println!("{e}");
    assert!(matches!(e, Error::Config(ref m) if m.contains("rank 2 has 4")));
    assert!(host::naive_all_reduce(&mut ragged, &o, &mut l, &link).is_err());
    let mut x = inputs(1, 3, 8);
    let e = host::broadcast(&mut x, 3, &mut l, &link).unwrap_err();
    assert!(matches!(e, Error::Config(ref m) if m.contains("root rank 3")));

    // A rank that fails mid-ring: the error names it, and every other thread ends.
    let d = 5;
    for round in 0..2 * (d - 1) {
        for rank in [0, 3] {
            let opts = Opts {
                fault: Some(Fault { rank, round }),
                jitter_us: 50,
                seed: round as u64,
                ..Opts::default()
            };
            let mut x = inputs(1, d, 101);
            let e = host::ring_all_reduce(&mut x, &opts, &mut l, &link).unwrap_err();
            match e {
                Error::Worker { device, .. } => assert_eq!(device, rank, "{e}"),
                other => panic!("expected a worker error, got {other}"),
            }
        }
    }
    let opts = Opts {
        fault: Some(Fault { rank: 1, round: 2 }),
        ..Opts::default()
    };
    let e = host::ring_all_reduce(&mut inputs(1, 4, 9), &opts, &mut l, &link).unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("ring_all_reduce round 2"));
}

/// The pairwise tree over ranks, spelled out: ((x0+x1)+(x2+x3))+…, copied to every rank.
fn pairwise_tree(x: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let mut level: Vec<Vec<f32>> = x.to_vec();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| match p {
                [a, b] => a.iter().zip(b).map(|(u, v)| u + v).collect(),
                [a] => a.clone(),
                _ => unreachable!(),
            })
            .collect();
    }
    vec![level.remove(0); x.len()]
}

#[test]
fn tree_all_reduce_sums_in_a_pairwise_tree() {
    // values where the grouping decides the bits
    let x: Vec<Vec<f32>> = (0..4)
        .map(|r| vec![1e8, 1.0 + r as f32, -1e8, 0.5])
        .collect();
    let mut got = x.clone();
    host::tree_all_reduce(
        &mut got,
        &Opts::default(),
        &mut Ledger::new(),
        &Link::nvlink(),
    )
    .unwrap();
    assert_eq!(bits(&got), bits(&pairwise_tree(&x)));
    assert_eq!(Algo::by_name("tree").unwrap(), Algo::Tree);
}
