//! The ZeRO-2/3 chunk: persistent shards, the model run block by block.
//!
//! ```text
//!                  f32                          bf16 (packed words, f32 master weights)
//! ZeRO-2   P 4N, G 4N/d, m v 8N/d          P 2N, G 2N/d, master m v 12N/d
//! ZeRO-3   P 4N/d, G 4N/d, m v 8N/d        P 2N/d, G 2N/d, master m v 12N/d
//! ```

use super::*;

/// A ZeRO-2/3 chunk (flat data-parallel group, the whole model): persistent shards, the model
/// run block by block over step-scoped buffers ([`super::blocks`]).
pub(super) fn by_blocks(gpu: &Gpu, cfg: &TrainConfig, spec: &ChunkSpec) -> Result<Chunk> {
    let model = cfg.model;
    let prec = spec.precision;
    let local = model.layout(spec.blocks);
    // the storage layout: under bf16 every tensor on 128 elements (a word view on 256 bytes)
    let layout = prec.storage(local.clone());
    let spans = crate::parallel::chain::spans(&model, prec)?;
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
    let grid = Grid::aligned(&units, layout.total, d, prec.align())?;
    let unit_of = units_of(&grid, &buckets)?;
    let gather = spec.zero >= 3;
    let shard = grid.shard_len(rank).max(1);
    let init = local.relayout(&model.init(&local, cfg.seed), &layout)?;
    let words = |n: usize| prec.words(n);
    let names = match prec {
        Precision::F32 => ["params shard", "params", "grads shard"],
        Precision::Bf16 => ["params.bf16 shard", "params.bf16", "grads.bf16 shard"],
    };
    let params = match gather {
        true => gpu.buffer_in(Category::Parameters, names[0], words(shard)),
        false => gpu.buffer_in(Category::Parameters, names[1], words(layout.total)),
    };
    let host = if gather {
        grid.shard_of(rank, &init)
    } else {
        init
    };
    match prec {
        Precision::F32 => gpu.upload(&params, &host)?,
        Precision::Bf16 => gpu.upload(&params, &crate::cpu::pack_bf16(&host))?,
    }
    let grads = gpu.buffer_in(Category::Gradients, names[2], words(shard));
    let m = gpu.buffer_in(Category::OptimizerState, "adam.m shard", shard);
    let v = gpu.buffer_in(Category::OptimizerState, "adam.v shard", shard);
    let pieces = grid.pieces(rank, gather, true);
    // bf16: this rank's shard of the f32 master weights
    let master_shard = match prec {
        Precision::F32 => None,
        Precision::Bf16 => {
            let master = gpu.buffer_in(Category::OptimizerState, "master shard", shard);
            let mine = match gather {
                true => host,
                false => grid.shard_of(rank, &host),
            };
            gpu.upload(&master, &mine)?;
            Some(master)
        }
    };
    let optim = Optimizer::sharded(
        gpu,
        &layout,
        &params,
        &grads,
        master_shard.as_ref(),
        &m,
        &v,
        &pieces,
    )?;
    let zero_grads = crate::kernels::elementwise::fill(gpu, &grads, 0.0)?;
    let shape = blocks::shape(&spans, &buckets, gather);
    let per: Vec<Range<usize>> = (0..spans.len()).map(|i| i..i + 1).collect();
    let buffers = Buffers {
        layout,
        params,
        grads,
        m: m.slice(0, 0),
        v: v.slice(0, 0),
        master: None,
        packed: prec == Precision::Bf16,
    };
    Ok(Chunk {
        stage: spec.stage,
        local,
        buffers,
        moments: Some((m, v)),
        master_shard,
        params_sharded: gather,
        blocks: Some(Blocks {
            spans,
            gather,
            work: None,
            model,
            micro: cfg.micro,
            dloss: spec.dloss,
            recompute: spec.recompute,
            precision: prec,
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
