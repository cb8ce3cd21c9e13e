//! Timed passes are submitted without a wait and read back together: every pass's time comes
//! back in order, with one host wait for all of them where the adapter has timestamps, and
//! each pass's work is done as if it had been waited on.
mod common;
use common::tiny;
use triaxis::engine::Engine;
use triaxis::gpu;
use triaxis::kernels::elementwise as k;
use triaxis::precision::Precision::F32;

#[test]
fn timed_passes_are_read_back_once_in_order() {
    let Some(g) = gpu::test_gpu() else { return };
    let n = 1000;
    let x = g.buffer("x", n);
    // more passes than one query set holds, so a full set is read back early and reused
    let passes = 300;
    let before = g.counts();
    for i in 0..passes {
        let at = g
            .run_stamped(&[k::fill(&g, F32, &x, i as f32).unwrap()])
            .unwrap();
        assert_eq!(at, i, "pass {i} got time index {at}");
    }
    let times = g.pass_times().unwrap();
    let counted = g.counts() - before;
    assert_eq!(times.len(), passes);
    assert_eq!(counted.dispatches, passes as u64, "one dispatch per pass");
    let want = if g.has_timestamps() {
        2
    } else {
        2 * passes as u64
    };
    assert_eq!(counted.waits, want, "host waits for {passes} timed passes");
    assert!(
        g.pass_times().unwrap().is_empty(),
        "a second read has nothing left"
    );
    let last = (passes - 1) as f32;
    assert!(g.download::<f32>(&x).unwrap().iter().all(|&v| v == last));
}

/// A training step waits for its device twice, whatever its microbatch count: once for the
/// gradient norm's parts and the step's losses together, once for the pass times.
#[test]
fn a_step_waits_twice_at_any_microbatch_count() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let g = &gpus[0];
    for m in [1, 4] {
        let mut e = Engine::new(
            &gpus,
            tiny::cfg(m),
            tiny::mesh(1, 1, 1, m),
            Default::default(),
        )
        .unwrap();
        let data = tiny::batches(m, 2);
        for (s, batches) in data.iter().enumerate() {
            let costs = e.step(batches, s).unwrap();
            // without timestamps every timed pass is waited on for its wall time
            if g.has_timestamps() {
                assert_eq!(costs.waits, 2, "m = {m}, step {s}: host waits");
            }
            assert!(costs.dispatches > 0 && costs.stats.loss.is_finite());
        }
    }
}

/// With the device clock off no pass is timed: a step waits for its device once (the norm's
/// read), at any microbatch count, its costs carry no device-clock figures and there is no
/// clock to summarise, and the parameters come out bit for bit as with the clock on.
#[test]
fn without_the_device_clock_a_step_waits_once_with_the_same_bits() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    for m in [1, 4] {
        let engine = |device_clock| {
            let opts = triaxis::engine::RuntimeOptions {
                device_clock,
                ..Default::default()
            };
            Engine::new(&gpus, tiny::cfg(m), tiny::mesh(1, 1, 1, m), opts).unwrap()
        };
        let (mut on, mut off) = (engine(true), engine(false));
        for (s, batches) in tiny::batches(m, 2).iter().enumerate() {
            let a = on.step(batches, s).unwrap();
            let b = off.step(batches, s).unwrap();
            assert_eq!(
                b.waits, 1,
                "m = {m}, step {s}: host waits without the clock"
            );
            assert!(
                a.device_step > 0.0 && b.device_step == 0.0,
                "m = {m}, step {s}"
            );
            assert_eq!(a.stats.loss.to_bits(), b.stats.loss.to_bits(), "m = {m}");
        }
        assert_eq!(on.checksum().unwrap(), off.checksum().unwrap(), "m = {m}");
        assert!(
            off.summary(1).unwrap().is_none(),
            "m = {m}: no clock to summarise"
        );
    }
}

/// Uploads and device copies cost no submit of their own: they are recorded and go to the
/// queue at the head of the next submit, in program order with the passes around them.
#[test]
fn uploads_and_copies_ride_with_the_next_submit_in_program_order() {
    let Some(g) = gpu::test_gpu() else { return };
    let n = 64;
    let (a, b, c) = (g.buffer("a", n), g.buffer("b", n), g.buffer("c", n));
    let before = g.counts();
    g.upload(&a, &vec![1.0f32; n]).unwrap();
    g.copy(&a, &b).unwrap(); // b = 1
    g.upload(&a, &vec![2.0f32; n]).unwrap();
    assert_eq!((g.counts() - before).submits, 0, "recorded, not submitted");
    // a pass after them sees a = 2; a copy after the pass sees its result
    g.run(&[k::scale(&g, F32, &a, 3.0).unwrap()]).unwrap(); // a = 6
    assert_eq!(
        (g.counts() - before).submits,
        1,
        "the copies rode with the pass"
    );
    g.copy(&a, &c).unwrap(); // c = 6
    g.upload(&a, &vec![5.0f32; n]).unwrap(); // a = 5, after the copy
    let got = g.download_many::<f32>(&[&a, &b, &c]).unwrap();
    assert_eq!(
        (g.counts() - before).submits,
        2,
        "the last copies rode with the download"
    );
    for (name, v, want) in [
        ("a", &got[0], 5.0),
        ("b", &got[1], 1.0),
        ("c", &got[2], 6.0),
    ] {
        assert!(v.iter().all(|&x| x == want), "{name}: {v:?}, want {want}");
    }
    // a sync submits what is pending before it waits
    g.upload(&b, &vec![7.0f32; n]).unwrap();
    g.sync().unwrap();
    assert_eq!((g.counts() - before).submits, 3);
    assert!(g.download::<f32>(&b).unwrap().iter().all(|&x| x == 7.0));
}
