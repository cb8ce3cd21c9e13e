//! A worker's passes: segments of a forward, backward or weight-gradient pass on one of its
//! chunks, with the pass's input staged before its first segment (tokens, or the activation /
//! gradient received) and its output after the last (the loss, the message for the next
//! stage, the activation slot freed), and the fault hooks of a pass.

use std::ops::Range;

use super::{Scratch, StepIn, Worker};
use crate::error::{Error, Result};
use crate::memory::Category;
use crate::pipeline::schedule::{Action, Flow, Kind};
use crate::runtime::fault::FaultKind;

impl Worker {
    /// Segments `segs` of `a`: inputs before the first, outputs and hooks after the last.
    /// Returns the index of the pass's device time in the step's
    /// [`Gpu::pass_times`](crate::gpu::Gpu::pass_times) (`None` when the step is not timed).
    pub(super) fn compute(
        &mut self,
        a: &Action,
        segs: Range<usize>,
        input: &StepIn,
        sc: &mut Scratch,
    ) -> Result<Option<usize>> {
        let stage = self.stage_of(a.chunk);
        let last_stage = stage + 1 == self.schedule.stages();
        let n = self.chunks[a.chunk].segments[a.kind.index()].len();
        let fault = input
            .fault
            .filter(|f| f.device == self.device && f.step == input.step);
        if segs.start == 0 {
            if fault.is_some_and(|f| f.action == sc.action) {
                match fault.map(|f| f.kind) {
                    Some(FaultKind::Error) => return Err(Error::Device("injected fault".into())),
                    Some(FaultKind::DeviceLost) => {
                        return Err(Error::Device("device lost (injected)".into()))
                    }
                    Some(FaultKind::Panic) => panic!("injected panic"),
                    Some(FaultKind::Stall) => {
                        std::thread::sleep(std::time::Duration::from_secs(600))
                    }
                    _ => {}
                }
            }
            self.stage_in(a, last_stage, input, sc)?;
            let c = &self.chunks[a.chunk];
            if let (Some(tree), true) = (&c.tree, grads_of(a.kind, c.split)) {
                // the pass leaves exactly this microbatch's gradient in `grads`
                self.gpu.run(std::slice::from_ref(&tree.zero))?;
            }
        }
        let c = &self.chunks[a.chunk];
        let slot = *c.held.get(&a.micro).ok_or_else(|| missing(a))?;
        // timed on the device when the step is, read back after it (see `Gpu::run_stamped`)
        let t = self
            .gpu
            .run_pass(&c.ops(slot, a.kind, &segs)?, input.timed)?;
        if input.serial.is_some() {
            // one device at a time: the pass is done before the next device starts
            self.gpu.sync()?;
        }
        if segs.end == n {
            self.stage_out(a, slot, last_stage, sc)?;
            if fault.is_some_and(|f| f.action == sc.action && f.kind == FaultKind::Nan) {
                if a.kind == Kind::F && last_stage {
                    sc.nan_loss = true;
                } else {
                    let g = &self.chunks[a.chunk].buffers.grads;
                    self.gpu.upload(&g.slice(0, 1), &[f32::NAN])?;
                }
            }
            let m = self.mesh.microbatches;
            let c = &mut self.chunks[a.chunk];
            if let (Some(tree), true) = (&mut c.tree, grads_of(a.kind, c.split)) {
                tree.push()?;
                if a.micro + 1 == m {
                    // every schedule runs a chunk's gradient passes in microbatch order
                    tree.finish()?;
                }
            }
            sc.action += 1;
        }
        Ok(t)
    }

    /// Before a pass: a slot for a forward, its input (tokens, or the received activation /
    /// gradient), the targets on the last stage.
    fn stage_in(&mut self, a: &Action, last: bool, input: &StepIn, sc: &mut Scratch) -> Result<()> {
        let c = &mut self.chunks[a.chunk];
        let slot = match a.kind {
            Kind::F => {
                let free = (0..c.slot_count())
                    .find(|s| !c.held.values().any(|h| h == s))
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "stage {}: no free activation slot for microbatch {}",
                            c.stage, a.micro
                        ))
                    })?;
                c.held.insert(a.micro, free);
                c.peak = c.peak.max(c.held.len());
                free
            }
            _ => *c.held.get(&a.micro).ok_or_else(|| missing(a))?,
        };
        let got = sc.inbox.remove(a);
        let (tokens, targets) = (&c.slots[slot].tokens, &c.slots[slot].targets);
        match (a.kind, got) {
            (Kind::F, Some(act)) => self.gpu.upload(&c.slots[slot].resid[0], &act)?,
            (Kind::F, None) => {
                let (x, _) = batch(input, a.micro)?;
                self.gpu.upload(tokens, x)?
            }
            (Kind::B, Some(g)) => self.gpu.upload(&c.slots[slot].dresid, &g)?,
            _ => {}
        }
        if a.kind == Kind::F && last {
            let (_, y) = batch(input, a.micro)?;
            self.gpu.upload(targets, y)?;
        }
        Ok(())
    }

    /// After a pass: the loss (last stage), the output for the next stage (to the outbox, or
    /// straight to the inbox of a chunk on this device), the slot freed after its backward.
    fn stage_out(&mut self, a: &Action, slot: usize, last: bool, sc: &mut Scratch) -> Result<()> {
        let c = &mut self.chunks[a.chunk];
        if a.kind == Kind::F && last {
            // kept on the device and read back with the gradient norm's parts, in one wait
            let from = c.slots[slot].losses_view()?;
            let n = from.len;
            let rows = self.mesh.microbatches;
            if sc.losses == rows {
                return Err(Error::Device(format!(
                    "{}: more last-stage forwards in a step than its {rows} microbatches",
                    self.gpu.label
                )));
            }
            let log = self.loss_log.get_or_insert_with(|| {
                self.gpu
                    .buffer_in(Category::Workspace, "step losses", rows * n)
            });
            self.gpu.copy(from, &log.slice(sc.losses * n, n))?;
            sc.losses += 1;
        }
        let out = match a.kind {
            Kind::F if !last => c.slots.get(slot).map(|m| m.output()),
            Kind::B if c.stage > 0 => c.slots.get(slot).map(|m| &m.dresid),
            _ => None,
        };
        if let (Some(view), Some(msg)) = (out, self.schedule.output(self.place.stage, a)) {
            let data: Vec<f32> = self.gpu.download(view)?;
            if msg.to == self.place.stage {
                let (_, chunk) = self.schedule.place(match msg.flow {
                    Flow::Activation => msg.stage + 1,
                    Flow::Gradient => msg.stage - 1,
                });
                let kind = if msg.flow == Flow::Activation {
                    Kind::F
                } else {
                    Kind::B
                };
                let consumer = Action {
                    kind,
                    micro: a.micro,
                    chunk,
                };
                sc.inbox.insert(consumer, data);
            } else {
                sc.outbox.insert(*a, data);
            }
        }
        if a.kind == Kind::W || (a.kind == Kind::B && !c.split) {
            c.held.remove(&a.micro);
        }
        Ok(())
    }
}

/// Whether pass `kind` computes the chunk's parameter gradients (W when the backward is split).
fn grads_of(kind: Kind, split: bool) -> bool {
    kind == if split { Kind::W } else { Kind::B }
}

pub(super) fn missing(a: &Action) -> Error {
    Error::Config(format!("{a:?}: its input or activations are missing"))
}

fn batch(input: &StepIn, micro: usize) -> Result<&(Vec<u32>, Vec<u32>)> {
    input
        .batches
        .get(micro)
        .ok_or_else(|| Error::Config(format!("microbatch {micro} is missing from the step")))
}
