//! Serial timing's turn: one device computes (or stages) at a time, so each pass's kernel time
//! is its own. Inside one process a lock; with [`crate::runtime::RuntimeOptions::serial_lock`]
//! also an advisory lock on a file that every process of the run opens (MPI ranks sharing one
//! host's cores), so one device of any process holds the turn.
//!
//! ```text
//!   worker ─ take() ─▶ process lock ─▶ file lock (flock, when given) ─▶ pass ─▶ drop: unlock
//! ```

use std::fs::File;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// The turn of one step's workers.
pub struct Turn {
    here: Mutex<()>,
    file: Option<File>,
}

/// A held turn; released when dropped.
pub struct Held<'a> {
    _here: MutexGuard<'a, ()>,
    file: Option<&'a File>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.file {
            let _ = f.unlock();
        }
    }
}

impl Turn {
    /// A turn of this process, shared with every process that opens `file` too.
    pub fn new(file: Option<&Path>) -> Result<Turn> {
        let file = file
            .map(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(p)
                    .map_err(|e| {
                        Error::Config(format!("the serial-timing lock {}: {e}", p.display()))
                    })
            })
            .transpose()?;
        Ok(Turn {
            here: Mutex::new(()),
            file,
        })
    }

    /// Waits for the turn (a poisoned turn is still a turn). Should the file lock fail, the
    /// turn is this process's alone: the timing may overlap another process's, the results
    /// cannot change.
    pub fn take(&self) -> Held<'_> {
        let here = self.here.lock().unwrap_or_else(|e| e.into_inner());
        let file = self.file.as_ref().filter(|f| f.lock().is_ok());
        Held { _here: here, file }
    }
}

#[cfg(test)]
mod tests {
    use super::Turn;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn two_turns_on_one_file_never_overlap() {
        // two opens of one file stand for two processes: each lock is its own description's
        let path = std::env::temp_dir().join(format!("triaxis-turn-{}.lock", std::process::id()));
        let (a, b) = (
            Turn::new(Some(&path)).unwrap(),
            Turn::new(Some(&path)).unwrap(),
        );
        let released = AtomicBool::new(false);
        std::thread::scope(|s| {
            let held = a.take();
            let waiter = s.spawn(|| {
                let _turn = b.take();
                released.load(Ordering::SeqCst)
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            released.store(true, Ordering::SeqCst);
            drop(held);
            assert!(
                waiter.join().unwrap(),
                "the second turn began before the first ended"
            );
        });
        let _ = std::fs::remove_file(&path);
        let e = Turn::new(Some(std::path::Path::new("/nonexistent-dir/x.lock")));
        assert!(e.is_err_and(|e| e.to_string().contains("serial-timing lock")));
    }
}
