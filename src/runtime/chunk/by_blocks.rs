//! The ZeRO-2/3 chunk: persistent shards, the model run block by block.

use super::*;

/// A ZeRO-2/3 chunk (flat data-parallel group, the whole model): persistent shards, the model
/// run block by block over step-scoped buffers ([`super::blocks`]).
pub(super) fn by_blocks(gpu: &Gpu, cfg: &TrainConfig, spec: &ChunkSpec) -> Result<Chunk> {
    let model = cfg.model;
    let layout = model.layout(spec.blocks);
    let spans = crate::parallel::chain::spans(&model)?;
    // the buckets come from a probe model's backward (one small microbatch)
    let probe = GpuModel::new(
        gpu,
        model,
        spec.blocks,
        crate::model::Micro { b: 1, t: 1 },
        1.0,
    )?;
    let buckets = buckets(&layout, &probe.grad_ready, spec.bucket_bytes);
    drop(probe);
    let units: Vec<Range<usize>> = buckets.iter().map(|b| b.range.clone()).collect();
    let (rank, d) = spec.dp;
    let grid = Grid::new(&units, layout.total, d)?;
    let unit_of = units_of(&grid, &buckets)?;
    let gather = spec.zero >= 3;
    let shard = grid.shard_len(rank).max(1);
    let init = model.init(&layout, cfg.seed);
    let params = if gather {
        let p = gpu.buffer_in(Category::Parameters, "params shard", shard);
        let mut host = vec![0.0f32; shard];
        for (u, unit) in grid.units.iter().enumerate() {
            let c = grid.chunk(u, rank);
            let at = unit.storage[rank];
            host[at..at + c.len()].copy_from_slice(&init[c]);
        }
        gpu.upload(&p, &host)?;
        p
    } else {
        let p = gpu.buffer_in(Category::Parameters, "params", layout.total);
        gpu.upload(&p, &init)?;
        p
    };
    let grads = gpu.buffer_in(Category::Gradients, "grads shard", shard);
    let m = gpu.buffer_in(Category::OptimizerState, "adam.m shard", shard);
    let v = gpu.buffer_in(Category::OptimizerState, "adam.v shard", shard);
    let pieces = grid.pieces(rank, gather, true);
    let optim = Optimizer::sharded(gpu, &layout, &params, &grads, &m, &v, &pieces)?;
    let zero_grads = crate::kernels::elementwise::fill(gpu, &grads, 0.0)?;
    let shape = blocks::shape(&spans, &buckets, gather);
    let per: Vec<Range<usize>> = (0..spans.len()).map(|i| i..i + 1).collect();
    let layout_canonical = layout.clone();
    let buffers = Buffers {
        layout,
        params,
        grads,
        m: m.slice(0, 0),
        v: v.slice(0, 0),
        master: None,
        packed: false,
    };
    Ok(Chunk {
        stage: spec.stage,
        local: layout_canonical,
        buffers,
        moments: Some((m, v)),
        master_shard: None,
        params_sharded: gather,
        blocks: Some(Blocks {
            spans,
            gather,
            work: None,
            model,
            micro: cfg.micro,
            dloss: spec.dloss,
            recompute: spec.recompute,
        }),
        split: false,
        slots: Vec::new(),
        held: HashMap::new(),
        peak: 0,
        unit_of,
        grid,
        optim,
        zero_grads,
        tree: None,
        segments: [per.clone(), per, vec![]],
        shape,
    })
}
