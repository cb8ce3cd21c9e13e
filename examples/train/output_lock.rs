//! Lock files beside the outputs: `<checkpoint>.lock` and `<record>.lock` hold the pid of the
//! run writing them, so a second run on the same paths is refused (naming the first one's pid)
//! instead of writing into its files. A lock whose pid is no longer running (a run killed
//! with SIGKILL) is taken over with a warning. Every ending removes them: the guard's drop,
//! and the signal thread's abandon hook before it exits the process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The lock files this run holds; removed on drop or [`Locks::release`].
pub struct Locks {
    held: Mutex<Vec<PathBuf>>,
}

/// `<path>.lock`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".lock");
    PathBuf::from(s)
}

/// Whether process `pid` is running (on Linux its `/proc` entry; elsewhere `kill -0`).
fn alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if Path::new("/proc/self").exists() {
        return Path::new(&format!("/proc/{pid}")).exists();
    }
    std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn create(lock: &Path) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(lock)?;
    writeln!(f, "{}", std::process::id())
}

impl Locks {
    /// Takes the lock of every `(flag, output path)`; refuses (taking none) when another
    /// running process holds one.
    pub fn take(outputs: &[(&str, &Path)]) -> anyhow::Result<Locks> {
        let locks = Locks {
            held: Mutex::new(Vec::new()),
        };
        for &(flag, path) in outputs {
            let lock = lock_path(path);
            let mut tries = 0;
            loop {
                tries += 1;
                match create(&lock) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 3 => {
                        let text = std::fs::read_to_string(&lock).unwrap_or_default();
                        match text.trim().parse::<u32>() {
                            Ok(pid) if alive(pid) => anyhow::bail!(
                                "{flag} {} is in use by another run (pid {pid}, lock file {}): \
                                 wait for it to end, or give {flag} another path",
                                path.display(),
                                lock.display()
                            ),
                            Ok(pid) => eprintln!(
                                "warning: taking over the lock file {} of pid {pid}, which is \
                                 not running (a run that ended without removing it)",
                                lock.display()
                            ),
                            Err(_) => eprintln!(
                                "warning: taking over the lock file {}, which names no pid",
                                lock.display()
                            ),
                        }
                        let _ = std::fs::remove_file(&lock);
                    }
                    Err(e) => anyhow::bail!(
                        "{flag} {}: cannot create the lock file {} ({e})",
                        path.display(),
                        lock.display()
                    ),
                }
            }
            locks
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(lock);
        }
        Ok(locks)
    }

    /// Removes the lock files (those still holding this process's pid); idempotent.
    pub fn release(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id().to_string();
        for lock in held.drain(..) {
            let ours = std::fs::read_to_string(&lock).is_ok_and(|t| t.trim() == me);
            if ours {
                let _ = std::fs::remove_file(&lock);
            }
        }
    }
}

impl Drop for Locks {
    fn drop(&mut self) {
        self.release();
    }
}

/// Releases the locks when dropped (at the end of the run or of the abandon hook, however
/// it ends: the hook and its clone of the locks live as long as the signal thread).
pub struct Release(pub std::sync::Arc<Locks>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}
