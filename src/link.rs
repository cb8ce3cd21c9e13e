//! The link model: bandwidth and latency of one device-to-device link, with presets (NVLink-class,
//! PCIe, Ethernet, ideal) and measured values. The one link type of the crate: collectives cost
//! their hops with it, the device-clock replay its transfers, and the cost model its formulas.

use crate::error::{Error, Result};

/// A link model between two neighbouring devices (each direction is a separate resource).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub name: &'static str,
    pub bandwidth_bytes_per_s: f64,
    pub latency_s: f64,
}

impl Link {
    pub const NAMES: [&'static str; 4] = ["nvlink", "pcie", "ethernet", "ideal"];

    /// NVLink-class: 400 GB/s per direction, 2 µs.
    pub fn nvlink() -> Link {
        Link {
            name: "nvlink",
            bandwidth_bytes_per_s: 400e9,
            latency_s: 2e-6,
        }
    }
    /// PCIe 4.0 x16: ~25 GB/s achieved (32 GB/s raw), 5 µs.
    pub fn pcie() -> Link {
        Link {
            name: "pcie",
            bandwidth_bytes_per_s: 25e9,
            latency_s: 5e-6,
        }
    }
    /// 100 Gb/s Ethernet: 12.5 GB/s, 20 µs (TCP-class latency; RDMA is lower).
    pub fn ethernet() -> Link {
        Link {
            name: "ethernet",
            bandwidth_bytes_per_s: 12.5e9,
            latency_s: 20e-6,
        }
    }
    /// Infinitely fast: transfers take no time.
    pub fn ideal() -> Link {
        Link {
            name: "ideal",
            bandwidth_bytes_per_s: f64::INFINITY,
            latency_s: 0.0,
        }
    }
    /// A measured speed, e.g. host staging (download → upload) between virtual devices.
    pub fn measured(bandwidth_bytes_per_s: f64, latency_s: f64) -> Link {
        Link {
            name: "measured",
            bandwidth_bytes_per_s,
            latency_s,
        }
    }
    /// A preset by name: "nvlink", "pcie", "ethernet", "ideal" (case-insensitive).
    pub fn by_name(name: &str) -> Result<Link> {
        match name.trim().to_ascii_lowercase().as_str() {
            "nvlink" => Ok(Link::nvlink()),
            "pcie" => Ok(Link::pcie()),
            "ethernet" => Ok(Link::ethernet()),
            "ideal" => Ok(Link::ideal()),
            _ => Err(Error::Config(format!(
                "unknown link {name:?}: expected one of {} (or a measured bandwidth and latency)",
                Link::NAMES.join(", ")
            ))),
        }
    }
    /// A link of `gb_per_s` GB/s (10⁹ bytes/s) and no latency (the cost model's clusters).
    pub fn gbps(gb_per_s: f64) -> Link {
        Link {
            name: "custom",
            bandwidth_bytes_per_s: gb_per_s * 1e9,
            latency_s: 0.0,
        }
    }
    /// The same link with `micros` µs of latency per message.
    pub fn with_latency_us(self, micros: f64) -> Link {
        Link {
            latency_s: micros * 1e-6,
            ..self
        }
    }
    /// Pure bandwidth time `bytes / β` (no latency): the docs/design.md reference convention.
    pub fn time(&self, bytes: f64) -> f64 {
        bytes / self.bandwidth_bytes_per_s
    }
    /// One message: `bytes / β + α`.
    pub fn message_time(&self, bytes: f64) -> f64 {
        bytes / self.bandwidth_bytes_per_s + self.latency_s
    }
    /// Checks β > 0 and α ≥ 0; `name` says which link (e.g. "intra-node").
    pub fn validate(&self, name: &str) -> Result<()> {
        crate::error::positive(
            &format!("the {name} bandwidth (GB/s)"),
            self.bandwidth_bytes_per_s / 1e9,
            &format!("pass the {name} link speed in GB/s, e.g. 400"),
        )?;
        if !(self.latency_s.is_finite() && self.latency_s >= 0.0) {
            return Err(Error::Config(format!(
                "the {name} latency must be ≥ 0, got {} µs; pass microseconds, e.g. 5",
                self.latency_s * 1e6
            )));
        }
        Ok(())
    }
    /// Seconds the link is occupied by `bytes` (latency excluded).
    pub fn occupancy(&self, bytes: u64) -> f64 {
        bytes as f64 / self.bandwidth_bytes_per_s
    }
    /// Seconds from the start of a transfer of `bytes` to its arrival.
    pub fn transfer_time(&self, bytes: u64) -> f64 {
        self.occupancy(bytes) + self.latency_s
    }
}
