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
    let ranges = |points: &[usize], len: usize| {
        let mut out = Vec::with_capacity(points.len() + 1);
        let mut from = 0;
        for &p in points {
            out.push(from..p);
            from = p;
        }
        out.push(from..len);
        out
    };
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
        ranges(&fwd_points, m.forward.len()),
        ranges(&bwd_points, m.backward.len()),
        ranges(&[], m.weight.len()),
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
