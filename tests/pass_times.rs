//! Timed passes are submitted without a wait and read back together: every pass's time comes
//! back in order, with one host wait for all of them where the adapter has timestamps, and
//! each pass's work is done as if it had been waited on.
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
