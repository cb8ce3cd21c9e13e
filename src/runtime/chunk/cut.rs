//! How a chunk's passes are cut into segments: at tensor-parallel all-reduces and where
//! gradient buckets become final, and which grid unit each bucket is.

use super::*;

/// The segments of every pass of `m` and the shape the lowering reads: forward cut at its
/// tensor-parallel cuts; an unsplit backward also at the points where buckets become final
/// (a point at the pass's end is no mark: the bucket is final after the pass) unless
/// `ready_marks` is off; W uncut.
pub(super) fn cut(
    m: &GpuModel,
    buckets: &[Bucket],
    split: bool,
    ready_marks: bool,
) -> ([Vec<Range<usize>>; 3], ChunkShape) {
    let fwd_points: Vec<usize> = m.forward_cuts.iter().map(|c| c.0).collect();
    // backward marks in op order: (op index, 0 = cut / 1 = ready, what)
    let mut marks: Vec<(usize, u8, Vec<usize>)> =
        m.backward_cuts.iter().map(|c| (c.0, 0, vec![])).collect();
    if !split && ready_marks {
        for (b, bucket) in buckets.iter().enumerate() {
            let at = m.grad_ready[bucket.ready_point].0;
            if at >= m.backward.len() {
                continue;
            }
            match marks.iter_mut().find(|x| x.0 == at && x.1 == 1) {
                Some(x) => x.2.push(b),
                None => marks.push((at, 1, vec![b])),
            }
        }
    }
    marks.sort_by_key(|x| (x.0, x.1));
    let bwd_points: Vec<usize> = marks.iter().map(|x| x.0).collect();
    let shape = ChunkShape {
        forward: vec![Mark::Cut; fwd_points.len()],
        backward: marks
            .into_iter()
            .map(|(_, k, bs)| if k == 0 { Mark::Cut } else { Mark::Ready(bs) })
            .collect(),
        weight: Vec::new(),
        buckets: buckets.len(),
        split,
        gather: false,
    };
    let segments = [
        segments(&fwd_points, m.forward.len()),
        segments(&bwd_points, m.backward.len()),
        segments(&[], m.weight.len()),
    ];
    (segments, shape)
}

/// The grid unit of each bucket (the grid keeps its units in flat order, buckets come in
/// backward order).
pub(super) fn units_of(grid: &Grid, buckets: &[Bucket]) -> Result<Vec<usize>> {
    buckets
        .iter()
        .map(|b| {
            grid.units
                .iter()
                .position(|u| u.range == b.range)
                .ok_or_else(|| Error::Config(format!("bucket {:?} is no grid unit", b.range)))
        })
        .collect()
}

/// The segments and shape of a chunk whose blocks are gathered one at a time (ZeRO-3): a mark
/// at every block boundary of either pass (the backward from the last block down) and at every
/// tensor-parallel cut inside a block; in the backward each bucket is ready at the first block
/// boundary after which every block it touches is done (every gradient of a bucket lies in
/// blocks at or after its start). `spans` are the blocks' storage ranges, in block order.
pub(super) fn by_block(
    m: &GpuModel,
    spans: &[Range<usize>],
    buckets: &[Bucket],
) -> Result<([Vec<Range<usize>>; 3], ChunkShape)> {
    let n = spans.len();
    let tiled = |ranges: &[Range<usize>], len: usize| {
        ranges.len() == n
            && ranges.first().is_none_or(|r| r.start == 0)
            && ranges.windows(2).all(|w| w[0].end == w[1].start)
            && ranges.last().is_none_or(|r| r.end == len)
    };
    let forward: Vec<Range<usize>> = m.forward_blocks.iter().map(|b| b.1.clone()).collect();
    let backward: Vec<Range<usize>> = m.backward_blocks.iter().map(|b| b.1.clone()).collect();
    if n == 0 || m.split || !tiled(&forward, m.forward.len()) || !tiled(&backward, m.backward.len())
    {
        return Err(Error::Config(
            "ZeRO-3 gathers block by block and needs an unsplit backward (a schedule without \
             the zero-bubble split, e.g. 1f1b)"
                .into(),
        ));
    }
    let mut done = vec![false; buckets.len()];
    let ready: Vec<Mark> = (1..n)
        .map(|seg| {
            // after backward block segment seg − 1: blocks n − seg .. n are done
            let from = spans[n - seg].start;
            let ready: Vec<usize> = (0..buckets.len())
                .filter(|&b| !done[b] && buckets[b].range.start >= from)
                .collect();
            for &b in &ready {
                done[b] = true;
            }
            match ready.is_empty() {
                true => Mark::Block,
                false => Mark::Ready(ready),
            }
        })
        .collect();
    // (op index, 0 = cut / 1 = block boundary, mark): a cut at a block's end comes first
    let pass = |blocks: &[Range<usize>],
                cuts: &crate::model::gpu_model::Cuts,
                bounds: Vec<Mark>,
                len: usize| {
        let mut at: Vec<(usize, u8, Mark)> = cuts.iter().map(|c| (c.0, 0, Mark::Cut)).collect();
        at.extend(blocks.iter().zip(bounds).map(|(b, mark)| (b.end, 1, mark)));
        at.sort_by_key(|x| (x.0, x.1));
        let points: Vec<usize> = at.iter().map(|x| x.0).collect();
        let marks: Vec<Mark> = at.into_iter().map(|x| x.2).collect();
        (segments(&points, len), marks)
    };
    let (fsegs, fmarks) = pass(
        &forward[..n - 1],
        &m.forward_cuts,
        vec![Mark::Block; n - 1],
        m.forward.len(),
    );
    let (bsegs, bmarks) = pass(
        &backward[..n - 1],
        &m.backward_cuts,
        ready,
        m.backward.len(),
    );
    let shape = ChunkShape {
        forward: fmarks,
        backward: bmarks,
        weight: Vec::new(),
        buckets: buckets.len(),
        split: false,
        gather: true,
    };
    Ok(([fsegs, bsegs, Vec::new()], shape))
}

/// The op ranges between consecutive cut `points` of a pass of `len` ops (points ascending).
fn segments(points: &[usize], len: usize) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut from = 0;
    for &p in points {
        out.push(from..p);
        from = p;
    }
    out.push(from..len);
    out
}
