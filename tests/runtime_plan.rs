//! The step IR as data: lowered device programs look like the picture, every layout's programs
//! pass the validator, and the validator refuses programs that would lose a message, reduce a
//! bucket twice or too early, or deadlock.

use triaxis::mesh::Mesh;
use triaxis::pipeline::{Schedule, ScheduleKind};
use triaxis::runtime::{check, lower, ChunkShape, Mark, Op, Plan};

/// A chunk of one layer: two tensor-parallel cuts per pass when `tp > 1`, two buckets (one
/// final halfway through the backward, one at its end).
fn shape(tp: usize, split: bool) -> ChunkShape {
    let cuts = if tp > 1 {
        vec![Mark::Cut, Mark::Cut]
    } else {
        vec![]
    };
    let backward = if tp > 1 {
        vec![Mark::Cut, Mark::Ready(vec![0]), Mark::Cut]
    } else {
        vec![Mark::Ready(vec![0])]
    };
    ChunkShape {
        forward: cuts,
        backward: if split { vec![] } else { backward },
        weight: vec![],
        buckets: 2,
        split,
        gather: false,
    }
}

fn plan(mesh: &Mesh) -> (Plan, Schedule) {
    let sched = Schedule::new(mesh.schedule, mesh.pp, mesh.microbatches, mesh.chunks).unwrap();
    let split = mesh.schedule.split_backward();
    let shapes = vec![vec![shape(mesh.tp, split); mesh.chunks]; mesh.pp];
    (lower(mesh, &sched, &shapes).unwrap(), sched)
}

fn mesh(dp: usize, tp: usize, pp: usize, m: usize, zero: usize) -> Mesh {
    Mesh {
        dp,
        tp,
        pp,
        zero,
        microbatches: m,
        ..Mesh::default()
    }
}

#[test]
fn dp2_pp2_zero1_programs_look_like_the_picture() {
    let m = mesh(2, 1, 2, 2, 1);
    let (p, s) = plan(&m);
    let text = p.to_string();
    println!("{text}");
    let want = "\
0 (r0 s0 t0): F0 >1 F1 >1 <1 B0 <1 B1.0 rs0 B1.1 rs1 norm adam ag0 ag1
1 (r0 s1 t0): <0 F0 B0 >0 <0 F1 B1.0 rs0 B1.1 >0 rs1 norm adam ag0 ag1
2 (r1 s0 t0): F0 >3 F1 >3 <3 B0 <3 B1.0 rs0 B1.1 rs1 norm adam ag0 ag1
3 (r1 s1 t0): <2 F0 B0 >2 <2 F1 B1.0 rs0 B1.1 >2 rs1 norm adam ag0 ag1
";
    assert_eq!(text, want);
    check(&p, &m, &s, 2).unwrap();
    // without ZeRO: all-reduces, no parameter gathers
    let (p, _) = plan(&mesh(2, 1, 2, 2, 0));
    assert!(p
        .to_string()
        .starts_with("0 (r0 s0 t0): F0 >1 F1 >1 <1 B0 <1 B1.0 ar0 B1.1 ar1 norm adam\n"));
}

/// Device 0's ops as printed.
fn first_line(p: &Plan) -> String {
    let text = p.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.split_once(": ").map_or("", |x| x.1).to_string()
}

/// ZeRO-3 with tensor parallelism: each block gathered one block ahead as without it, and the
/// tensor-parallel all-reduce at a cut inside a block between that block's two segments.
#[test]
fn zero_3_with_tensor_parallel_cuts_gathers_per_block_and_all_reduces_inside() {
    // three blocks; the middle one cut once in either pass
    let blocks = ChunkShape {
        forward: vec![Mark::Block, Mark::Cut, Mark::Block],
        backward: vec![Mark::Ready(vec![0]), Mark::Cut, Mark::Block],
        weight: vec![],
        buckets: 2,
        split: false,
        gather: true,
    };
    let m = mesh(2, 2, 1, 1, 3);
    let sched = Schedule::new(m.schedule, 1, 1, 1).unwrap();
    let p = lower(&m, &sched, &[vec![blocks]]).unwrap();
    println!("{p}");
    assert_eq!(
        first_line(&p),
        "us0 us1 F0.0 us2 F0.1 tp F0.2 F0.3 us2 us1 B0.0 rs0 us0 B0.1 tp B0.2 B0.3 rs1 norm adam"
    );
    check(&p, &m, &sched, 2).unwrap();
}

#[test]
fn zero_2_and_3_programs_run_block_by_block() {
    // three blocks; bucket 0 final once the last block's backward is done, bucket 1 at the end
    let blocks = ChunkShape {
        forward: vec![Mark::Block, Mark::Block],
        backward: vec![Mark::Ready(vec![0]), Mark::Block],
        weight: vec![],
        buckets: 2,
        split: false,
        gather: true,
    };
    let m = mesh(2, 1, 1, 2, 3);
    let sched = Schedule::new(m.schedule, 1, 2, 1).unwrap();
    let p = lower(&m, &sched, &[vec![blocks.clone()]]).unwrap();
    println!("{p}");
    // each block's gather one block ahead of its compute; the backward from the last block
    // down; bucket 0 reduce-scattered right after the last block's final backward; no
    // parameter gather after the update (the next step's use unshards)
    assert_eq!(
        first_line(&p),
        "us0 us1 F0.0 us2 F0.1 F0.2 us2 us1 B0.0 us0 B0.1 B0.2 \
         us0 us1 F1.0 us2 F1.1 F1.2 us2 us1 B1.0 rs0 us0 B1.1 B1.2 rs1 norm adam"
    );
    check(&p, &m, &sched, 2).unwrap();
    // ZeRO-2: the same marks, nothing gathered per block, the parameters gathered after AdamW
    let m2 = Mesh { zero: 2, ..m };
    let p2 = lower(
        &m2,
        &sched,
        &[vec![ChunkShape {
            gather: false,
            ..blocks
        }]],
    )
    .unwrap();
    assert_eq!(
        first_line(&p2),
        "F0 B0 F1 B1.0 rs0 B1.1-2 rs1 norm adam ag0 ag1"
    );
    check(&p2, &m2, &sched, 2).unwrap();
}

#[test]
fn tensor_parallel_cuts_and_one_device_look_like_the_picture() {
    let (p, _) = plan(&mesh(1, 2, 1, 1, 0));
    let text = p.to_string();
    println!("{text}");
    assert_eq!(
        text,
        "0 (r0 s0 t0): F0.0 tp F0.1 tp F0.2 B0.0 tp B0.1-2 tp B0.3 norm adam\n\
         1 (r0 s0 t1): F0.0 tp F0.1 tp F0.2 B0.0 tp B0.1-2 tp B0.3 norm adam\n"
    );
    let (p, _) = plan(&mesh(1, 1, 1, 2, 0));
    assert_eq!(p.to_string(), "0 (r0 s0 t0): F0 B0 F1 B1 norm adam\n");
    // zero-bubble: the buckets wait for the chunk's last W
    let zb = Mesh {
        schedule: ScheduleKind::ZeroBubbleH1,
        ..mesh(2, 1, 2, 2, 0)
    };
    let (p, s) = plan(&zb);
    println!("{p}");
    assert!(p.programs[0].ops.ends_with(&[
        Op::Compute {
            action: triaxis::pipeline::Action::w(1, 0),
            segs: 0..1
        },
        Op::ReduceGrad {
            chunk: 0,
            bucket: 0,
            scatter: false
        },
        Op::ReduceGrad {
            chunk: 0,
            bucket: 1,
            scatter: false
        },
        Op::GradNorm,
        Op::Optimizer,
    ]));
    check(&p, &zb, &s, 2).unwrap();
}

#[test]
fn every_layout_lowers_to_programs_the_validator_accepts() {
    let mut n = 0;
    for dp in [1, 2, 3] {
        for tp in [1, 2] {
            for pp in [1, 2, 4] {
                for kind in [
                    ScheduleKind::GPipe,
                    ScheduleKind::OneFOneB,
                    ScheduleKind::Interleaved,
                    ScheduleKind::ZeroBubbleH1,
                ] {
                    for m in [1, 2, 4, 8] {
                        for zero in [0, 1] {
                            let v = if kind == ScheduleKind::Interleaved {
                                2
                            } else {
                                1
                            };
                            if v > 1 && m % pp != 0 || zero == 1 && dp == 1 {
                                continue;
                            }
                            let mesh = Mesh {
                                schedule: kind,
                                chunks: v,
                                ..mesh(dp, tp, pp, m, zero)
                            };
                            let (p, s) = plan(&mesh);
                            check(&p, &mesh, &s, 2)
                                .unwrap_or_else(|e| panic!("{}: {e}\n{p}", mesh.describe()));
                            n += 1;
                        }
                    }
                }
            }
        }
    }
    println!("{n} layouts lowered and checked");
    assert!(n > 200);
}

#[test]
fn the_validator_refuses_broken_programs() {
    let m = mesh(2, 1, 2, 2, 0);
    let (good, s) = plan(&m);
    type Edit = Box<dyn Fn(&mut Plan)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "a lost receive",
            Box::new(|p: &mut Plan| {
                let ops = &mut p.programs[1].ops;
                let i = ops
                    .iter()
                    .position(|o| matches!(o, Op::Recv { .. }))
                    .unwrap();
                ops.remove(i);
            }),
            "sends",
        ),
        (
            "a bucket reduced twice",
            Box::new(|p: &mut Plan| {
                let ops = &mut p.programs[0].ops;
                let i = ops
                    .iter()
                    .position(|o| matches!(o, Op::ReduceGrad { .. }))
                    .unwrap();
                let dup = ops[i].clone();
                ops.insert(i, dup);
            }),
            "reduced 2 times",
        ),
        (
            "a bucket reduced before its gradient",
            Box::new(|p: &mut Plan| {
                for prog in &mut p.programs {
                    let ops = &mut prog.ops;
                    let i = ops
                        .iter()
                        .position(|o| matches!(o, Op::ReduceGrad { .. }))
                        .unwrap();
                    let r = ops.remove(i);
                    ops.insert(0, r);
                }
            }),
            "before its last gradient",
        ),
        (
            "replicas calling collectives in different orders",
            Box::new(|p: &mut Plan| {
                // device 2 sends its first activation after the norm reduction: device 0's
                // data-parallel peer is then at another call than device 0
                let ops = &mut p.programs[2].ops;
                let n = ops.iter().position(|o| *o == Op::GradNorm).unwrap();
                let i = ops
                    .iter()
                    .position(|o| matches!(o, Op::ReduceGrad { .. }))
                    .unwrap();
                let r = ops.remove(i);
                ops.insert(n, r);
            }),
            "calls",
        ),
        (
            "a receive before the matching send can happen",
            Box::new(|p: &mut Plan| {
                // device 0 waits for a gradient before sending its first activation
                let ops = &mut p.programs[0].ops;
                let r = ops
                    .iter()
                    .position(|o| matches!(o, Op::Recv { .. }))
                    .unwrap();
                let recv = ops.remove(r);
                ops.insert(0, recv);
            }),
            "deadlock",
        ),
        (
            "a pass cut short",
            Box::new(|p: &mut Plan| {
                let ops = &mut p.programs[3].ops;
                let i = ops
                    .iter()
                    .rposition(|o| matches!(o, Op::Compute { .. }))
                    .unwrap();
                ops.remove(i);
            }),
            "expected",
        ),
    ];
    for (what, edit, want) in cases {
        let mut p = good.clone();
        edit(&mut p);
        let e = check(&p, &m, &s, 2).expect_err(what).to_string();
        println!("{what}: {e}");
        assert!(e.contains(want), "{what}: {e}");
    }
}
