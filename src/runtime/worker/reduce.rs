//! A worker's data-parallel and world collectives: the gradient-bucket reductions (with the
//! finiteness check of every bucket before it is mixed with its peers'), the reduction fault
//! hook, and the gradient-norm reduction with the verdict every device reaches.

use super::super::norm::{verdict, Share};
use super::{comm_call, Scratch, StepIn, Worker};
use crate::error::{Error, Result};
use crate::parallel::tensor::{split_of, Split};
use crate::runtime::fault::{FaultKind, GradScale};

impl Worker {
    /// Bucket `bucket` of chunk `chunk` over the data-parallel group: download, check it is
    /// finite (so a NaN is named where it started), sum (or reduce-scatter: ZeRO 1–3, only this
    /// rank's chunk is reduced, into its range of the full gradients), upload. The words are
    /// the chunk's precision's (bf16: 2 bytes per element on the wire).
    pub(super) fn reduce(
        &mut self,
        chunk: usize,
        bucket: usize,
        scatter: bool,
        serial: Option<&crate::runtime::turn::Turn>,
        sc: &mut Scratch,
    ) -> Result<f64> {
        let rank = self.place.replica;
        let stage = self.stage_of(chunk);
        let c = &self.chunks[chunk];
        let p = c.precision;
        let (range, rel) = c.bucket_geometry(bucket);
        let k = p.per_word();
        if !range.start.is_multiple_of(k) || rel.iter().any(|b| !b.is_multiple_of(k)) {
            return Err(Error::Config(format!(
                "bucket {range:?}: {p} chunk bounds {rel:?} must be whole words"
            )));
        }
        let view = c.words(&c.buffers.grads, range.clone());
        let mut words: Vec<u32> = {
            let _one = super::one(serial);
            self.gpu.download(&view)?
        };
        if sc.local_bad.is_none() {
            if let Some(i) = crate::comm::first_non_finite(p, &words, range.len()) {
                sc.local_bad = Some((stage, c.buffers.layout.tensor_at(range.start + i)));
            }
        }
        let mut bounds: Vec<usize> = rel.iter().map(|b| b / k).collect();
        if let Some(last) = bounds.last_mut() {
            *last = words.len();
        }
        let algo = self.dp_algo;
        if !scatter {
            let link = comm_call(&mut *self.comms.dp, |d| {
                crate::comm::all_reduce_words(d, p, &mut words, algo, &bounds, bucket)
            })?;
            let _one = super::one(serial);
            self.gpu.upload(&view, &words)?;
            return Ok(link);
        }
        let link = comm_call(&mut *self.comms.dp, |d| {
            crate::comm::reduce_scatter_words(d, p, &mut words, &bounds, bucket)
        })?;
        let own = bounds[rank]..bounds[rank + 1];
        if !own.is_empty() {
            let _one = super::one(serial);
            self.gpu.upload(&c.own_grads(bucket, rank), &words[own])?;
        }
        Ok(link)
    }

    /// ZeRO-3: block `block`'s parameters gathered from every rank's shard into its slot,
    /// one part per grid unit the block meets (host staging: download → all-gather → upload).
    pub(super) fn unshard(&mut self, chunk: usize, block: usize) -> Result<f64> {
        let r = self.place.replica;
        let c = &self.chunks[chunk];
        let p = c.precision;
        let slots = c
            .buffers
            .slots
            .as_ref()
            .ok_or_else(|| Error::Config(format!("chunk {chunk} gathers no blocks")))?;
        let span = slots
            .spans
            .get(block)
            .ok_or_else(|| Error::Config(format!("chunk {chunk} has no block {block}")))?;
        let slot = &slots.views[block % 2];
        let mut link = 0.0;
        // in u32 words: f32 elements, or pairs of bf16 (every bound is on 128 elements then)
        let k = p.per_word();
        for part in c.grid.parts(span.clone()) {
            let bounds: Vec<usize> = part.bounds.iter().map(|b| b / k).collect();
            let (a, b) = (bounds[r], bounds[r + 1]);
            let mut words = vec![0u32; p.words(part.sub.len())];
            if b > a {
                let mine: Vec<u32> = self
                    .gpu
                    .download(&c.buffers.params.slice(part.storage[r] / k, b - a))?;
                words[a..b].copy_from_slice(&mine);
            }
            link += comm_call(&mut *self.comms.dp, |d| {
                crate::comm::all_gather_words(d, p, &mut words, &bounds, block)
            })?;
            let at = (part.sub.start - span.start) / k;
            self.gpu.upload(&slot.slice(at, words.len()), &words)?;
        }
        Ok(link)
    }

    /// The reduction fault hook: fails in the `action`-th gradient reduction of the step
    /// (`true`: the bucket is to be poisoned with a NaN).
    pub(super) fn reduce_fault(&self, input: &StepIn, sc: &mut Scratch) -> Result<bool> {
        let i = sc.reductions;
        sc.reductions += 1;
        let hit = input
            .reduce_fault
            .filter(|f| f.device == self.device && f.step == input.step && f.action == i);
        match hit.map(|f| f.kind) {
            Some(FaultKind::Panic) => panic!("injected panic"),
            Some(FaultKind::Nan) => Ok(true),
            None => Ok(false),
            Some(FaultKind::Stall) => {
                std::thread::sleep(std::time::Duration::from_secs(600));
                Ok(false)
            }
            Some(k) => Err(Error::Device(format!("injected fault ({k:?})"))),
        }
    }

    /// The [`GradScale`] hook: this device's gradient of `g.tensor` times `g.factor`, on the
    /// host (a test hook, not a kernel), on the full gradient buffer between the reductions and
    /// the norm (under ZeRO the norm reads the own shard's range of it).
    pub(super) fn scale_grad(&self, g: &GradScale) -> Result<()> {
        let hook = |msg: String| Error::Config(format!("gradient-scale hook: {msg}"));
        let (c, t) = self
            .chunks
            .iter()
            .find_map(|c| c.buffers.layout.get(&g.tensor).ok().map(|t| (c, t)))
            .ok_or_else(|| {
                hook(format!(
                    "device {} holds no tensor {}",
                    self.device, g.tensor
                ))
            })?;
        if c.buffers.packed() {
            // the packed layout starts every tensor on a word
            let view = c.buffers.grads.slice(t.offset / 2, t.len.div_ceil(2));
            let words: Vec<u32> = self.gpu.download(&view)?;
            let x: Vec<f32> = crate::cpu::unpack_bf16(&words, t.len)
                .iter()
                .map(|v| v * g.factor)
                .collect();
            return self.gpu.upload(&view, &crate::cpu::pack_bf16(&x));
        }
        let view = c.buffers.grads.slice(t.offset, t.len);
        let x: Vec<f32> = self.gpu.download(&view)?;
        let x: Vec<f32> = x.iter().map(|v| v * g.factor).collect();
        self.gpu.upload(&view, &x)
    }

    /// The world's byte all-gather of every device's share; the verdict every device reaches.
    pub(super) fn grad_norm(&mut self, step: usize, sc: &mut Scratch) -> Result<()> {
        let last = self
            .chunks
            .iter()
            .any(|c| c.stage + 1 == self.schedule.stages());
        let counts = self.mesh.zero >= 1 || self.place.replica == 0;
        // the step's one read of its losses and norm parts: one wait
        let mut views = Vec::new();
        for c in &self.chunks {
            views.push(c.optim.norm_sq_parts()?.clone());
        }
        // one row of B·T token losses per microbatch
        let n = self
            .loss_log
            .as_ref()
            .map_or(0, |l| l.len / self.mesh.microbatches);
        if let (Some(log), true) = (&self.loss_log, sc.losses > 0) {
            views.push(log.slice(0, sc.losses * n));
        }
        let read = self
            .gpu
            .download_many::<f32>(&views.iter().collect::<Vec<_>>())?;
        // each forward's token losses summed, then the forwards in the order they ran
        let mut loss = 0.0;
        for row in read[self.chunks.len()..].iter().flat_map(|l| l.chunks(n)) {
            loss += row.iter().map(|&x| x as f64).sum::<f64>();
        }
        if sc.nan_loss {
            loss = f64::NAN;
        }
        let mut share = Share {
            device: self.device,
            stage: self.chunks[0].stage,
            loss: if self.place.tp_rank == 0 { loss } else { 0.0 },
            has_loss: last && self.place.tp_rank == 0,
            parts: Vec::new(),
            local_bad: sc.local_bad.clone(),
        };
        for (c, sq) in self.chunks.iter().zip(&read) {
            for p in c.optim.parts_from(sq) {
                let whole_copy = self.place.tp_rank > 0 && split_of(&p.tensor) == Split::Whole;
                if counts && !whole_copy {
                    share.parts.push((c.stage, p));
                } else if !p.sq.is_finite() && share.local_bad.is_none() {
                    // a part nobody counts (a replica's or a tensor rank's copy) is checked
                    // here, so a NaN in a copy cannot slip into its optimizer step
                    share.local_bad = Some((c.stage, p.tensor));
                }
            }
        }
        let all = self.comms.world.all_gather_bytes(share.encode())?;
        let shares = all
            .iter()
            .map(|b| Share::decode(b))
            .collect::<Result<Vec<_>>>()?;
        let v = verdict(&shares, &self.canonical, step)?;
        let tokens = (self.cfg.tokens_per_step() * self.mesh.dp) as f64;
        sc.mean_loss = (v.loss / tokens) as f32;
        sc.norm_sq = v.norm_sq;
        sc.tensor_sq = v.tensor_sq;
        Ok(())
    }
}
