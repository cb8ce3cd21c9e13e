//! The memory ledger: every buffer a [`crate::gpu::Gpu`] allocates is recorded by category, and
//! released when the last view of it drops; current and peak bytes per category, per device.
//!
//! ```text
//! gpu.buffer_in(Category::Gradients, "grads", n) ─▶ View { buf: Buffer { wgpu, Arc<Allocation> } }
//!        ledger.current[Gradients] += 4n          every clone of the view shares the Arc;
//!        ledger.peak = max(peak, current)         the last drop runs Allocation::drop:
//!                                                 ledger.current[Gradients] −= 4n
//! ```
//!
//! Untagged buffers (`gpu.buffer(label, n)`: what a microbatch's forward keeps for its backward,
//! and recomputation's workspace) count as activations; scratch that lives only inside one pass
//! (activation gradients, kernel temporaries, optimizer partials) as workspace; the mapped staging
//! buffers of `upload` / `download` as communication staging.
//! Uniform buffers of pre-built ops (16 bytes each) are not counted. Bytes are what wgpu was
//! asked for (`4·len` rounded up to 4), not what a driver may round them to.

use std::sync::{Arc, Mutex};

/// What a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Category {
    Parameters,
    Gradients,
    /// Adam moments m and v (the optimizer's per-parameter state).
    OptimizerState,
    /// What a microbatch's forward keeps for its backward (and the recompute workspace): what
    /// [`crate::cost::activation`] predicts.
    Activations,
    /// Host-staging buffers of transfers (upload, download, timestamp read-back).
    Staging,
    /// Scratch used within one pass: activation gradients, kernel temporaries (padded operands,
    /// norm partials), optimizer partials and hyper-parameters.
    Workspace,
}

impl Category {
    pub const ALL: [Category; 6] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerState,
        Category::Activations,
        Category::Staging,
        Category::Workspace,
    ];

    fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activations => "activations",
            Category::Staging => "comm staging",
            Category::Workspace => "workspace",
        }
    }
}

/// Bytes per category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bytes {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub staging: u64,
    #[serde(default)]
    pub workspace: u64,
}

impl Bytes {
    fn from_array(a: [u64; 6]) -> Bytes {
        Bytes {
            parameters: a[0],
            gradients: a[1],
            optimizer_state: a[2],
            activations: a[3],
            staging: a[4],
            workspace: a[5],
        }
    }

    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Parameters => self.parameters,
            Category::Gradients => self.gradients,
            Category::OptimizerState => self.optimizer_state,
            Category::Activations => self.activations,
            Category::Staging => self.staging,
            Category::Workspace => self.workspace,
        }
    }

    /// Parameters + gradients + optimizer state: what ZeRO shards.
    pub fn model_state(&self) -> u64 {
        self.parameters + self.gradients + self.optimizer_state
    }

    pub fn total(&self) -> u64 {
        self.model_state() + self.activations + self.staging + self.workspace
    }

    /// Element-wise maximum.
    pub fn max(&self, o: &Bytes) -> Bytes {
        let mut a = [0u64; 6];
        for (i, c) in Category::ALL.iter().enumerate() {
            a[i] = self.get(*c).max(o.get(*c));
        }
        Bytes::from_array(a)
    }
}

/// One device's usage: current bytes, and the peak of each category (and of the total) since
/// the ledger was made or its peaks were last reset.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub device: String,
    pub current: Bytes,
    pub peak: Bytes,
    /// Peak of the sum over categories (≤ the sum of the per-category peaks).
    pub peak_total: u64,
    /// Buffers allocated since the ledger was made.
    pub allocations: u64,
    /// Of those, host-transfer staging buffers (one per upload, and per download that finds
    /// the device's kept read-back buffer too small).
    #[serde(default)]
    pub staging_allocations: u64,
}

#[derive(Debug, Default)]
struct State {
    current: [u64; 6],
    peak: [u64; 6],
    peak_total: u64,
    allocations: u64,
    staging_allocations: u64,
}

/// The ledger of one device (shared by every clone of its `Gpu`).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    state: Mutex<State>,
}

impl MemoryLedger {
    pub fn new() -> Arc<MemoryLedger> {
        Arc::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s)
    }

    /// Records an allocation of `bytes` in `cat`.
    pub fn alloc(&self, cat: Category, bytes: u64) {
        self.with(|s| {
            let i = cat.index();
            s.current[i] += bytes;
            s.peak[i] = s.peak[i].max(s.current[i]);
            s.peak_total = s.peak_total.max(s.current.iter().sum());
            s.allocations += 1;
            if cat == Category::Staging {
                s.staging_allocations += 1;
            }
        })
    }

    /// Records a release (saturating: a release never makes a category negative).
    pub fn free(&self, cat: Category, bytes: u64) {
        self.with(|s| {
            let i = cat.index();
            s.current[i] = s.current[i].saturating_sub(bytes);
        })
    }

    /// Current and peak bytes, labelled `device`.
    pub fn usage(&self, device: &str) -> Usage {
        self.with(|s| Usage {
            device: device.to_string(),
            current: Bytes::from_array(s.current),
            peak: Bytes::from_array(s.peak),
            peak_total: s.peak_total,
            allocations: s.allocations,
            staging_allocations: s.staging_allocations,
        })
    }

    /// Starts a new peak window: every peak becomes the current value (call at a step's start).
    pub fn reset_peaks(&self) {
        self.with(|s| {
            s.peak = s.current;
            s.peak_total = s.current.iter().sum();
        })
    }
}

/// One recorded allocation: dropping it (with the last view of its buffer) records the release.
#[derive(Debug)]
pub struct Allocation {
    ledger: Arc<MemoryLedger>,
    pub category: Category,
    pub bytes: u64,
}

impl Allocation {
    /// Records `bytes` in `category` now; the release is recorded on drop.
    pub fn new(ledger: &Arc<MemoryLedger>, category: Category, bytes: u64) -> Allocation {
        ledger.alloc(category, bytes);
        Allocation {
            ledger: ledger.clone(),
            category,
            bytes,
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.ledger.free(self.category, self.bytes);
    }
}
