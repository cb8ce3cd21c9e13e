//! A described cluster and where a layout's ranks land on it.
//!
//! Placement: tensor parallel innermost, then pipeline, then data parallel. Rank r of a
//! dp × tp × pp layout, on node `r / devices_per_node`:
//!
//! ```text
//! r = (dp_i · pp + pp_i) · tp + tp_i
//!
//! node 0: [tp0 tp1 | tp0 tp1] [tp0 tp1 | tp0 tp1]      tp=2, pp=2, dp=2, 4 devices per node
//!          └ pp0 ┘   └ pp1 ┘   └ pp0 ┘   └ pp1 ┘
//!          └───── dp0 ─────┘   └───── dp1 ─────┘
//! ```
//!
//! A TP group is `tp` consecutive ranks, a PP group `pp` ranks `tp` apart, a DP group `dp`
//! ranks `tp·pp` apart. A group whose ranks are all on one node uses the intra-node link,
//! otherwise every ring step runs at the speed of its slowest hop, the inter-node link.
//! Inter-node bandwidth is per device (one NIC per device, e.g. 8 × 200 Gb/s = 25 GB/s), and
//! concurrent groups do not contend.

use super::comm::Link;
use super::{at_least_one, positive, GB};
use crate::error::Result;

/// The most devices a cluster may have (2²⁰), so that planning stays fast.
pub const MAX_DEVICES: usize = 1 << 20;

/// Nodes of identical devices joined by two kinds of links.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// Number of nodes.
    pub nodes: usize,
    /// Devices in each node.
    pub devices_per_node: usize,
    /// Usable memory per device, bytes.
    pub mem_per_device: f64,
    /// Link between devices of one node (e.g. NVLink-class 400 GB/s).
    pub intra: Link,
    /// Link between nodes, per device (e.g. 25 GB/s).
    pub inter: Link,
    /// Achieved (not peak) dense compute per device, FLOP/s.
    pub flops: f64,
}

impl Cluster {
    /// `nodes` × `devices_per_node` devices of `mem_gb` GB, links in GB/s and µs latency,
    /// `tflops` achieved TFLOP/s per device.
    pub fn new(
        nodes: usize,
        devices_per_node: usize,
        mem_gb: f64,
        intra: Link,
        inter: Link,
        tflops: f64,
    ) -> Result<Self> {
        let c = Cluster {
            nodes,
            devices_per_node,
            mem_per_device: mem_gb * GB,
            intra,
            inter,
            flops: tflops * 1e12,
        };
        c.validate()?;
        Ok(c)
    }

    /// All devices: nodes × devices per node.
    pub fn devices(&self) -> usize {
        self.nodes.saturating_mul(self.devices_per_node)
    }

    /// Checks every field; the error names the flag to change.
    pub fn validate(&self) -> Result<()> {
        at_least_one("nodes", self.nodes, "pass --nodes ≥ 1")?;
        at_least_one(
            "devices per node",
            self.devices_per_node,
            "pass --devices-per-node ≥ 1",
        )?;
        positive(
            "memory per device (GB)",
            self.mem_per_device / GB,
            "pass --mem-gb, e.g. 80",
        )?;
        positive(
            "compute per device (TFLOP/s)",
            self.flops / 1e12,
            "pass --tflops (achieved), e.g. 300",
        )?;
        if self.devices() > MAX_DEVICES {
            return Err(crate::Error::Config(format!(
                "{} nodes × {} devices is more than the {MAX_DEVICES} devices the planner handles; describe a smaller cluster",
                self.nodes, self.devices_per_node
            )));
        }
        self.intra.validate("intra-node")?;
        self.inter.validate("inter-node")?;
        Ok(())
    }

    /// Whether any group of `size` ranks `stride` apart has ranks on two nodes, for groups
    /// tiling the ranks in blocks of `stride·size` (as every layout's TP, PP and DP groups do:
    /// `stride·size` divides the device count). The ranks `q·stride·size .. (q+1)·stride·size`
    /// form `stride` groups; if such a block lies inside a node no group spans, and if a node
    /// boundary falls strictly inside a block, the groups holding the ranks just before and just
    /// after it cross it. So a group spans exactly when there are several nodes and
    /// `stride·size` does not divide `devices_per_node`.
    pub fn group_spans_nodes(&self, stride: usize, size: usize) -> bool {
        if size <= 1 || self.nodes <= 1 {
            return false;
        }
        match stride.checked_mul(size) {
            Some(block) if block > 0 => !self.devices_per_node.is_multiple_of(block),
            _ => true,
        }
    }

    /// The link a group of `size` ranks `stride` apart runs on: intra unless it spans nodes.
    /// The flag says whether it crosses nodes.
    pub fn group_link(&self, stride: usize, size: usize) -> (Link, bool) {
        if self.group_spans_nodes(stride, size) {
            (self.inter, true)
        } else {
            (self.intra, false)
        }
    }
}
