//! The model state of a runtime in the one-device layout: gathered from every stage, tensor
//! rank and ZeRO shard for checkpoints and checksums, and scattered back from any layout's
//! state (resharding through the flat one-device view).
//!
//! ```text
//! one-device flat ─cut by stage─▶ stage-local flat ─tp::shard─▶ rank-local flat (params, m, v)
//!                                                  ─grid chunks─▶ ZeRO shards
//! gather: every device's pieces (replica 0's whole buffers, every rank's shard chunks) of
//!         its stage-local flats ─(distributed: exchanged between processes)─▶ assembled
//! ```

use super::chunk::Chunk;
use super::exec::Runtime;
use crate::error::{Error, Result};
use crate::gpu::View;
use crate::model::gpu_model::GpuModel;
use crate::parallel::tensor as tp;
use crate::step::{checksum, ModelState};

/// Which per-parameter buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Params,
    M,
    V,
}

/// A run of one buffer of (model stage, tensor rank) at `at` of its stage-local flat layout
/// of `total` elements.
struct Piece {
    stage: usize,
    tp_rank: usize,
    total: usize,
    at: usize,
    data: Vec<f32>,
}

impl Runtime {
    /// The whole model as a local device trains it, between steps: its one chunk's first slot
    /// model, reading the parameters the step just updated (bf16: the packed words rounded
    /// from the master weights, as the step's forward reads them). `None` when the layout
    /// splits the model (pipeline stages, tensor ranks) or gathers it per block (ZeRO-3). The
    /// forward-only evaluator ([`crate::eval`]) runs on it with no state moved.
    pub fn whole_model(&self) -> Option<&GpuModel> {
        match self.workers.first()?.chunks.as_slice() {
            [c] if !c.params_sharded => c
                .slots
                .first()
                .filter(|m| m.blocks == self.cfg.model.blocks() && m.tp.t == 1),
            _ => None,
        }
    }

    /// This process's pieces of `which`: replica 0's unsharded buffers, every replica's shard
    /// chunks (each flat element in exactly one piece over all processes).
    fn local_pieces(&self, which: Which) -> Result<Vec<Piece>> {
        let mut out = Vec::new();
        for w in &self.workers {
            let (r, k) = (w.place.replica, w.place.tp_rank);
            for c in &w.chunks {
                match shard_of(c, which) {
                    None if r == 0 => out.push(Piece {
                        stage: c.stage,
                        tp_rank: k,
                        total: c.local.total,
                        at: 0,
                        data: c.canonical(w.gpu.download(full_of(c, which))?)?,
                    }),
                    None => {}
                    Some(view) => {
                        let shard: Vec<f32> = w.gpu.download(view)?;
                        for (u, unit) in c.grid.units.iter().enumerate() {
                            let ch = c.grid.chunk(u, r);
                            let from = unit.storage[r];
                            // (storage offsets are the canonical ones but under bf16)
                            for (at, run) in c.canonical_runs(ch.clone()) {
                                let a = from + run.start - ch.start;
                                out.push(Piece {
                                    stage: c.stage,
                                    tp_rank: k,
                                    total: c.local.total,
                                    at,
                                    data: shard[a..a + run.len()].to_vec(),
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Every device's pieces of `which` (exchanged between the processes of a distributed run).
    fn pieces(&self, which: Which) -> Result<Vec<Piece>> {
        let mine = self.local_pieces(which)?;
        let Some(mut c) = self.control() else {
            return Ok(mine);
        };
        let all = c.all_gather_bytes(encode(&mine))?;
        let mut out = Vec::new();
        for (rank, b) in all.iter().enumerate() {
            out.extend(decode(b).ok_or_else(|| {
                Error::Config(format!("a corrupt model-state record from device {rank}"))
            })?);
        }
        Ok(out)
    }

    /// One buffer in the one-device layout.
    fn gather(&self, which: Which) -> Result<Vec<f32>> {
        let model = &self.cfg.model;
        let full = model.layout(&model.blocks());
        let pieces = self.pieces(which)?;
        let mut flat = vec![0.0f32; full.total];
        for (s, blocks) in self.stages.iter().enumerate() {
            let ranks = (0..self.mesh.tp)
                .map(|k| {
                    let mine: Vec<&Piece> = pieces
                        .iter()
                        .filter(|p| p.stage == s && p.tp_rank == k)
                        .collect();
                    let total = mine.first().map(|p| p.total).ok_or_else(|| {
                        Error::Config(format!("no device holds stage {s} of tensor rank {k}"))
                    })?;
                    let mut local = vec![0.0f32; total];
                    for p in mine {
                        local
                            .get_mut(p.at..p.at + p.data.len())
                            .ok_or_else(|| {
                                Error::Config(format!("a model-state piece outside stage {s}"))
                            })?
                            .copy_from_slice(&p.data);
                    }
                    Ok(local)
                })
                .collect::<Result<Vec<_>>>()?;
            let part = tp::gather(model, blocks, &ranks)?;
            for t in &model.layout(blocks).tensors {
                full.slice_mut(&mut flat, &t.name)?
                    .copy_from_slice(&part[t.offset..t.offset + t.len]);
            }
        }
        Ok(flat)
    }

    /// The inverse of [`Runtime::gather`], into this process's devices.
    fn scatter(&self, which: Which, src: &[f32]) -> Result<()> {
        let model = &self.cfg.model;
        let full = model.layout(&model.blocks());
        for (s, blocks) in self.stages.iter().enumerate() {
            let layout = model.layout(blocks);
            let mut part = vec![0.0f32; layout.total];
            for t in &layout.tensors {
                part[t.offset..t.offset + t.len].copy_from_slice(full.slice(src, &t.name)?);
            }
            let shards = tp::shard(model, blocks, &part, self.mesh.tp)?;
            for w in &self.workers {
                let (r, k) = (w.place.replica, w.place.tp_rank);
                for c in w.chunks.iter().filter(|c| c.stage == s) {
                    let canonical = &shards[k];
                    let stored = c.stored(canonical)?;
                    let src: &[f32] = &stored;
                    if which == Which::Params && c.master_shard.is_some() && !c.params_sharded {
                        // ZeRO-1/2 in bf16: every rank holds the full bf16 parameters
                        c.buffers.upload_params(&w.gpu, src)?;
                    }
                    match shard_of(c, which) {
                        // mixed precision: the master weights, and the bf16 parameters rounded
                        None if which == Which::Params => c.buffers.upload_params(&w.gpu, src)?,
                        None => w.gpu.upload(full_of(c, which), src)?,
                        Some(view) => {
                            let shard = c.grid.shard_of(r, src);
                            w.gpu.upload(view, &shard)?;
                            if which == Which::Params
                                && c.master_shard.is_some()
                                && c.params_sharded
                            {
                                // ZeRO-3 in bf16: the shard of the bf16 parameters, rounded
                                let packed = crate::cpu::pack_bf16(&shard);
                                w.gpu.upload(&c.buffers.params, &packed)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Parameters and AdamW moments in the one-device layout (every replica holds the same
    /// parameters; ZeRO moments and ZeRO-3 parameters are assembled from their shards).
    pub fn state(&self) -> Result<ModelState> {
        Ok(ModelState {
            params: self.gather(Which::Params)?,
            m: self.gather(Which::M)?,
            v: self.gather(Which::V)?,
        })
    }

    /// Loads a state given in the one-device layout (from any layout) into every replica,
    /// stage, tensor rank and shard this process runs (a distributed run: every process loads
    /// the same state).
    pub fn set_state(&self, st: &ModelState) -> Result<()> {
        let model = &self.cfg.model;
        st.check(model.layout(&model.blocks()).total)?;
        self.scatter(Which::Params, &st.params)?;
        self.scatter(Which::M, &st.m)?;
        self.scatter(Which::V, &st.v)
    }

    /// The full model's flat parameters (one-device layout).
    pub fn params(&self) -> Result<Vec<f32>> {
        self.gather(Which::Params)
    }

    /// Whether every replica holds replica 0's parameters bit for bit (ZeRO-3 holds one
    /// sharded copy: always true).
    pub fn replicas_agree(&self) -> Result<bool> {
        // (replica, stage, tensor rank, checksum) of every unsharded parameter buffer
        let mut mine = Vec::new();
        for w in &self.workers {
            for c in w.chunks.iter().filter(|c| !c.params_sharded) {
                let p: Vec<f32> = w.gpu.download(c.buffers.params_f32())?;
                mine.push((w.place.replica, c.stage, w.place.tp_rank, checksum(&p)));
            }
        }
        let all: Vec<(usize, usize, usize, String)> = match self.control() {
            None => mine,
            Some(mut c) => {
                let json = serde_json::to_vec(&mine)
                    .map_err(|e| Error::Config(format!("encoding parameter checksums: {e}")))?;
                let mut all = Vec::new();
                for (rank, b) in c.all_gather_bytes(json)?.iter().enumerate() {
                    let theirs: Vec<(usize, usize, usize, String)> = serde_json::from_slice(b)
                        .map_err(|e| {
                            Error::Config(format!("corrupt checksums from device {rank}: {e}"))
                        })?;
                    all.extend(theirs);
                }
                all
            }
        };
        Ok(all.iter().all(|(_, s, k, sum)| {
            all.iter()
                .filter(|(r, s0, k0, _)| *r == 0 && s0 == s && k0 == k)
                .all(|(_, _, _, want)| want == sum)
        }))
    }

    /// SHA-256 of the parameters in the one-device layout.
    pub fn checksum(&self) -> Result<String> {
        Ok(checksum(&self.params()?))
    }
}

/// The pieces as bytes: per piece five little-endian u64 (stage, tensor rank, total, at,
/// length), then its f32s.
fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        for x in [p.stage, p.tp_rank, p.total, p.at, p.data.len()] {
            out.extend((x as u64).to_le_bytes());
        }
        out.extend(bytemuck::cast_slice::<f32, u8>(&p.data));
    }
    out
}

/// The inverse of [`encode`]; `None` for bytes it did not write.
fn decode(mut b: &[u8]) -> Option<Vec<Piece>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let mut w = [0usize; 5];
        for x in &mut w {
            let (head, rest) = b.split_at_checked(8)?;
            *x = usize::try_from(u64::from_le_bytes(head.try_into().ok()?)).ok()?;
            b = rest;
        }
        let (data, rest) = b.split_at_checked(w[4].checked_mul(4)?)?;
        b = rest;
        out.push(Piece {
            stage: w[0],
            tp_rank: w[1],
            total: w[2],
            at: w[3],
            data: data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        });
    }
    Some(out)
}

/// The rank's shard of `which`, when it is sharded.
fn shard_of(c: &Chunk, which: Which) -> Option<&View> {
    match which {
        Which::Params if c.master_shard.is_some() => c.master_shard.as_ref(),
        Which::Params => c.params_sharded.then_some(&c.buffers.params),
        Which::M => c.moments.as_ref().map(|m| &m.0),
        Which::V => c.moments.as_ref().map(|m| &m.1),
    }
}

/// The full (unsharded) f32 buffer of `which` (the master weights under mixed precision).
fn full_of(c: &Chunk, which: Which) -> &View {
    match which {
        Which::Params => c.buffers.params_f32(),
        Which::M => &c.buffers.m,
        Which::V => &c.buffers.v,
    }
}
