//! MPI's own collectives, for [`Reduction::Native`](super::Reduction::Native): nonblocking
//! `MPI_Iallreduce`, `MPI_Ireduce_scatter_block`, `MPI_Iallgather` and `MPI_Ibcast` on host
//! floats, waited on like every other call (abort notices, the group's timeout). Chunks of
//! arbitrary bounds are padded with zeros to the longest, which MPI's block variants need.

use std::os::raw::{c_int, c_void};

use ::mpi::datatype::Equivalence;
use ::mpi::ffi;
use ::mpi::raw::AsRaw;

use super::{count, MpiWire};
use crate::error::Result;

impl MpiWire {
    /// A nonblocking sum over the group of every rank's `send`, `out` floats of it landing on
    /// this rank, started by `start`.
    fn sum(&self, start: StartSum, send: Vec<f32>, out: usize, call: &str) -> Result<Vec<f32>> {
        let _ = count(send.len(), call)?;
        let n = count(out, call)?;
        let mut recv = vec![0f32; out];
        // SAFETY: MPI reads `send` and writes `n` floats of `recv` until the request completes;
        // `settle` keeps both alive until then (the Vecs move, their heap blocks do not).
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            start(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                n,
                f32::equivalent_datatype().as_raw(),
                ffi::RSMPI_SUM,
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        let (_, recv) = self.settle(req, (send, recv), call)?;
        Ok(recv)
    }

    /// MPI_Iallreduce (sum) over `buf`, then the division by the size.
    pub(super) fn all_reduce(&self, buf: &mut Vec<f32>, average: bool) -> Result<()> {
        let n = buf.len();
        *buf = self.sum(
            ffi::MPI_Iallreduce,
            std::mem::take(buf),
            n,
            "mpi_all_reduce",
        )?;
        if average {
            mean(buf, self.size);
        }
        Ok(())
    }

    /// Reduce-scatter over arbitrary chunk bounds: every chunk padded with zeros to the
    /// longest, then MPI_Ireduce_scatter_block; rank r keeps its chunk's first |c_r| sums.
    pub(super) fn reduce_scatter(
        &self,
        buf: &mut [f32],
        bounds: &[usize],
        average: bool,
    ) -> Result<()> {
        let (d, r) = (self.size, self.rank);
        let m = longest(bounds);
        let mut send = vec![0f32; d * m];
        for k in 0..d {
            let c = &buf[bounds[k]..bounds[k + 1]];
            send[k * m..k * m + c.len()].copy_from_slice(c);
        }
        let call = "mpi_reduce_scatter";
        let sum = self.sum(ffi::MPI_Ireduce_scatter_block, send, m, call)?;
        let own = &mut buf[bounds[r]..bounds[r + 1]];
        own.copy_from_slice(&sum[..own.len()]);
        if average {
            mean(own, d);
        }
        Ok(())
    }

    /// All-gather over arbitrary chunk bounds: each rank's chunk padded to the longest, then
    /// MPI_Iallgather; chunk k is copied back from its padded slot.
    pub(super) fn all_gather(&self, buf: &mut [f32], bounds: &[usize]) -> Result<()> {
        let (d, r) = (self.size, self.rank);
        let m = longest(bounds);
        let mut send = vec![0f32; m];
        let own = &buf[bounds[r]..bounds[r + 1]];
        send[..own.len()].copy_from_slice(own);
        let _ = count(d * m, "mpi_all_gather")?;
        let mut recv = vec![0f32; d * m];
        // SAFETY: as in `sum`: MPI reads m floats of `send` and writes d·m of `recv`.
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            ffi::MPI_Iallgather(
                send.as_ptr().cast(),
                m as c_int,
                f32::equivalent_datatype().as_raw(),
                recv.as_mut_ptr().cast(),
                m as c_int,
                f32::equivalent_datatype().as_raw(),
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        let (_, all) = self.settle(req, (send, recv), "mpi_all_gather")?;
        for k in 0..d {
            let c = &mut buf[bounds[k]..bounds[k + 1]];
            let len = c.len();
            c.copy_from_slice(&all[k * m..k * m + len]);
        }
        Ok(())
    }

    /// MPI_Ibcast of the root's length, then of its floats into every rank's `buf`.
    pub(super) fn broadcast(&self, buf: &mut Vec<f32>, root: usize) -> Result<()> {
        let root = root as c_int;
        let len = vec![buf.len() as u64];
        let (len,) = self.ibcast(len, root)?;
        if self.rank as c_int != root {
            buf.clear();
            buf.resize(len[0] as usize, 0.0);
        }
        let _ = count(buf.len(), "mpi_broadcast")?;
        let (got,) = self.ibcast(std::mem::take(buf), root)?;
        *buf = got;
        Ok(())
    }

    /// MPI_Ibcast of `data` (the root's is sent, the others' overwritten).
    fn ibcast<T: Equivalence>(&self, mut data: Vec<T>, root: c_int) -> Result<(Vec<T>,)> {
        // SAFETY: MPI reads (root) or writes (others) `data.len()` elements until the request
        // completes; `settle` keeps the Vec alive. The length fits: checked by the caller.
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            ffi::MPI_Ibcast(
                data.as_mut_ptr().cast(),
                data.len() as c_int,
                T::equivalent_datatype().as_raw(),
                root,
                self.mpi.comm.as_raw(),
                &mut req,
            );
            req
        };
        self.settle(req, (data,), "mpi_broadcast")
    }
}

/// `MPI_Iallreduce` or `MPI_Ireduce_scatter_block`, which take the same arguments: send
/// buffer, receive buffer, floats received, datatype, operation, communicator, request.
type StartSum = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    c_int,
    ffi::MPI_Datatype,
    ffi::MPI_Op,
    ffi::MPI_Comm,
    *mut ffi::MPI_Request,
) -> c_int;

/// The sum divided by the size, once (as the ring averages).
fn mean(xs: &mut [f32], d: usize) {
    let d = d as f32;
    xs.iter_mut().for_each(|x| *x /= d);
}

/// The longest chunk of `bounds`.
fn longest(bounds: &[usize]) -> usize {
    bounds.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}
