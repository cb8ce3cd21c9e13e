//! The tiny model, configuration and layouts the layout tests share.

use triaxis::cpu::AdamW;
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::step::TrainConfig;

pub fn model() -> GptConfig {
    GptConfig {
        vocab: 13,
        ctx: 8,
        channels: 16,
        heads: 2,
        layers: 2,
    }
}

pub fn cfg(accum: usize) -> TrainConfig {
    TrainConfig {
        model: model(),
        micro: Micro { b: 2, t: 8 },
        grad_accum: accum,
        steps: 6,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 1,
        min_lr_frac: 0.1,
        seed: 5,
    }
}

pub fn mesh(dp: usize, tp: usize, pp: usize, m: usize) -> Mesh {
    Mesh {
        dp,
        tp,
        pp,
        microbatches: m,
        ..Mesh::default()
    }
}

pub fn batches(n: usize, steps: usize) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    super::addition_batches(4, 6, n, steps, cfg(1).micro)
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The tests of a file that count threads or allocations run one at a time, so the process's
/// figures reflect only the running test.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Threads of this process (Linux), to prove a failed step leaves none behind.
pub fn threads() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Whether the process is back to at most `base` threads within two seconds (a driver's
/// own thread of an earlier test may still be exiting; a thread of ours left blocked never
/// goes away).
pub fn no_thread_left(base: Option<usize>) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        match (threads(), base) {
            (Some(n), Some(b)) if n <= b => return true,
            (None, _) | (_, None) => return true,
            _ if t0.elapsed() > std::time::Duration::from_secs(2) => return false,
            _ => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}
