//! Transfers: uploads and downloads through mapped staging buffers, device-to-device copies,
//! recorded into the pending encoder and submitted ahead of the next pass.

use std::time::Duration;

use super::{Gpu, View};
use crate::error::{Error, Result};
use crate::memory::{Allocation, Category};

impl Gpu {
    /// Copies `data` into `dst` through a mapped staging buffer (fast on GL too). The copy is
    /// recorded, not submitted: it runs first in the device's next submit, after everything
    /// submitted before it and before everything submitted after.
    pub fn upload<T: bytemuck::Pod>(&self, dst: &View, data: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 != dst.bytes() {
            return Err(Error::Config(format!(
                "upload of {} bytes into a view of {} bytes",
                bytes.len(),
                dst.bytes()
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let _staged = Allocation::new(&self.memory, Category::Staging, bytes.len() as u64);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("upload"),
            size: bytes.len() as u64,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        staging
            .slice(..)
            .get_mapped_range_mut()
            .map_err(|e| Error::Device(format!("{}: map for upload: {e}", self.label)))?
            .copy_from_slice(bytes);
        staging.unmap();
        self.record_copy(|enc| {
            enc.copy_buffer_to_buffer(&staging, 0, &dst.buf, dst.byte_offset(), dst.bytes())
        })?;
        self.check()
    }

    /// Records a copy into the pending encoder (opened if there is none).
    fn record_copy(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<()> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Device("pending copies poisoned".into()))?;
        let enc = pending.get_or_insert_with(|| {
            self.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("copies"),
                })
        });
        f(enc);
        Ok(())
    }

    /// Submits the pending copies, then `enc` if given (holding `dispatches` compute
    /// dispatches), as one queue submit; nothing when there is neither. The pending lock is
    /// held through the submit, so clones submitting at once keep each copy ahead of every
    /// submit recorded after it.
    pub(super) fn submit_after_pending(
        &self,
        enc: Option<wgpu::CommandEncoder>,
        dispatches: usize,
    ) -> Result<()> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Device("pending copies poisoned".into()))?;
        let buffers: Vec<wgpu::CommandBuffer> = pending
            .take()
            .into_iter()
            .chain(enc)
            .map(wgpu::CommandEncoder::finish)
            .collect();
        if !buffers.is_empty() {
            self.queue.submit(buffers);
            self.counts.submit(dispatches);
        }
        Ok(())
    }

    /// Submits `enc` (holding `dispatches` compute dispatches) after the pending copies, as
    /// one queue submit.
    pub(super) fn submit(&self, enc: wgpu::CommandEncoder, dispatches: usize) -> Result<()> {
        self.submit_after_pending(Some(enc), dispatches)
    }

    /// Reads `src` back to the host (waits for all work submitted before).
    pub fn download<T: bytemuck::Pod>(&self, src: &View) -> Result<Vec<T>> {
        Ok(self.download_many(&[src])?.pop().unwrap_or_default())
    }

    /// Reads several views back with one submit and one wait (each after all work submitted
    /// before): one vector per view, in order.
    pub fn download_many<T: bytemuck::Pod>(&self, views: &[&View]) -> Result<Vec<Vec<T>>> {
        let size: u64 = views.iter().map(|v| v.bytes()).sum();
        if size == 0 {
            return Ok(views.iter().map(|_| Vec::new()).collect());
        }
        let staging = self.readback.lend(&self.device, &self.memory, size);
        let mut enc = self.device.create_command_encoder(&Default::default());
        let mut at = 0;
        for v in views {
            enc.copy_buffer_to_buffer(&v.buf, v.byte_offset(), &staging.buf, at, v.bytes());
            at += v.bytes();
        }
        let all: Vec<T> = self.read_after(enc, &staging.buf, size, "readback")?;
        // kept only after a clean read (unmapped): a failed one drops its buffer
        self.readback.keep(staging);
        let mut out = Vec::with_capacity(views.len());
        let mut rest = &all[..];
        for v in views {
            let (head, tail) = rest.split_at(v.bytes() as usize / std::mem::size_of::<T>());
            out.push(head.to_vec());
            rest = tail;
        }
        Ok(out)
    }

    /// Copies `src` into `dst` (the same size) on the device, in program order (recorded like
    /// an upload's copy, run first in the next submit); no wait.
    pub fn copy(&self, src: &View, dst: &View) -> Result<()> {
        if src.bytes() != dst.bytes() {
            return Err(Error::Config(format!(
                "copy of {} bytes into a view of {} bytes",
                src.bytes(),
                dst.bytes()
            )));
        }
        self.record_copy(|enc| {
            enc.copy_buffer_to_buffer(
                &src.buf,
                src.byte_offset(),
                &dst.buf,
                dst.byte_offset(),
                src.bytes(),
            )
        })?;
        self.check()
    }

    /// Submits `enc` (which fills `buf`'s first `bytes`), waits for it, and reads them back.
    pub(super) fn read_after<T: bytemuck::Pod>(
        &self,
        enc: wgpu::CommandEncoder,
        buf: &wgpu::Buffer,
        bytes: u64,
        what: &str,
    ) -> Result<Vec<T>> {
        self.submit(enc, 0)?;
        let (tx, rx) = std::sync::mpsc::channel();
        buf.slice(..bytes).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.sync()?;
        rx.recv_timeout(Duration::from_secs(60))
            .map_err(|_| Error::Device(format!("{}: {what} never completed", self.label)))?
            .map_err(|e| Error::Device(format!("{}: map failed: {e}", self.label)))?;
        let out = {
            let view = buf
                .slice(..bytes)
                .get_mapped_range()
                .map_err(|e| Error::Device(format!("{}: mapped range: {e}", self.label)))?;
            bytemuck::cast_slice::<u8, T>(&view).to_vec()
        };
        buf.unmap();
        Ok(out)
    }
}
