//! The gradient-norm reduction: every device sends what it knows — its share of the loss, the
//! Σg² of the norm parts it is responsible for, and the first non-finite gradient it saw in its
//! own buckets before they were reduced — to every device (a byte all-gather over the world
//! group). Every device then computes the same global norm (parts summed in canonical tensor
//! order, then flat order: the bits do not depend on the layout's placement) and reaches the
//! same verdict on finiteness, naming the device and the tensor where it started.
//!
//! Responsibility for a part: the data-parallel rank that owns it (ZeRO-1), or rank 0 when every
//! replica holds the same reduced gradients; a tensor every tensor-parallel rank holds whole is
//! counted from tensor rank 0 only.

use crate::error::{Error, Result};
use crate::optim::{global_norm_sq_parts, tensor_norms_sq, NormPart};

/// One device's share.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Share {
    pub device: usize,
    /// Model stage of the device's parts (its first chunk), for error messages.
    pub stage: usize,
    /// Summed token losses of its last-stage forwards (0 elsewhere, and on tensor ranks > 0).
    pub loss: f64,
    /// Whether this device computes the loss (last stage, tensor rank 0).
    pub has_loss: bool,
    /// (model stage, part).
    pub parts: Vec<(usize, NormPart)>,
    /// (model stage, tensor) of the first non-finite gradient in its own buckets, before any
    /// reduction mixed it with its peers'.
    pub local_bad: Option<(usize, String)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u32).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Share {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend((self.device as u64).to_le_bytes());
        out.extend((self.stage as u64).to_le_bytes());
        out.extend(self.loss.to_le_bytes());
        out.push(self.has_loss as u8);
        match &self.local_bad {
            Some((st, t)) => {
                out.push(1);
                out.extend((*st as u64).to_le_bytes());
                put_str(&mut out, t);
            }
            None => out.push(0),
        }
        out.extend((self.parts.len() as u64).to_le_bytes());
        for (st, p) in &self.parts {
            out.extend((*st as u64).to_le_bytes());
            put_str(&mut out, &p.tensor);
            out.extend((p.start as u64).to_le_bytes());
            out.extend(p.sq.to_le_bytes());
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Share> {
        let mut r = Reader { b, at: 0 };
        let device = r.u64()? as usize;
        let stage = r.u64()? as usize;
        let loss = f64::from_bits(r.u64()?);
        let has_loss = r.take(1)?[0] == 1;
        let local_bad = if r.take(1)?[0] == 1 {
            let st = r.u64()? as usize;
            Some((st, r.string()?))
        } else {
            None
        };
        let n = r.u64()? as usize;
        let mut parts = Vec::with_capacity(n.min(1 << 20));
        for _ in 0..n {
            let st = r.u64()? as usize;
            let tensor = r.string()?;
            let start = r.u64()? as usize;
            let sq = f32::from_le_bytes(r.array()?);
            parts.push((st, NormPart { tensor, start, sq }));
        }
        Ok(Share {
            device,
            stage,
            loss,
            has_loss,
            parts,
            local_bad,
        })
    }
}

/// Reads a share's bytes in order.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| Error::Config("a gradient-norm share is truncated".into()))?;
        self.at += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn string(&mut self) -> Result<String> {
        let n = u32::from_le_bytes(self.array()?) as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

/// What every device concludes from all shares: the step's summed token loss, the global Σg²
/// and each tensor's Σg² (canonical order).
#[derive(Clone, Debug, Default)]
pub(crate) struct Verdict {
    pub loss: f64,
    pub norm_sq: f32,
    pub tensor_sq: Vec<(String, f32)>,
}

/// What every device concludes from all shares (in device order), or the named error that
/// stops the step before any update.
pub(crate) fn verdict(shares: &[Share], canonical: &[String], step: usize) -> Result<Verdict> {
    let stop = |device: usize, stage: usize, action: &str, msg: String| Error::Worker {
        device,
        stage,
        action: action.into(),
        step,
        msg: format!("{msg}; stopping before the optimizer step"),
    };
    let mut loss = 0.0f64;
    for s in shares.iter().filter(|s| s.has_loss) {
        if !s.loss.is_finite() {
            return Err(stop(
                s.device,
                s.stage,
                "loss",
                format!("the loss is {}", s.loss),
            ));
        }
        loss += s.loss;
    }
    if let Some(s) = shares.iter().find(|s| s.local_bad.is_some()) {
        let (stage, tensor) = s.local_bad.clone().unwrap_or_default();
        return Err(stop(
            s.device,
            stage,
            "gradient check",
            format!("the gradient of {tensor} is not finite on this device, before any reduction"),
        ));
    }
    let mut all: Vec<NormPart> = Vec::new();
    for s in shares {
        for (stage, p) in &s.parts {
            if !p.sq.is_finite() {
                return Err(stop(
                    s.device,
                    *stage,
                    "gradient check",
                    format!(
                        "the gradient of {} is not finite (Σg² = {})",
                        p.tensor, p.sq
                    ),
                ));
            }
            all.push(p.clone());
        }
    }
    Ok(Verdict {
        loss,
        norm_sq: global_norm_sq_parts(&all, canonical),
        tensor_sq: tensor_norms_sq(&all, canonical),
    })
}
