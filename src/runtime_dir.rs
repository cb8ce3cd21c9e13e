//! Mesa's Vulkan software adapter (lavapipe) prints `error: XDG_RUNTIME_DIR is invalid or not
//! set in the environment` whenever an instance is created without that variable. When it is
//! unset, [`ensure`] points it at a private directory (mode 0700) before the first wgpu instance:
//! `$TMPDIR/triaxis-runtime-<uid>`, reused when it is this user's own private directory, else a
//! fresh one for this process. A value the user set is never changed.

use std::path::PathBuf;
use std::sync::Once;

/// Sets `XDG_RUNTIME_DIR` if it is unset or empty (once per process; before any instance).
pub fn ensure() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|v| !v.is_empty()) {
            return;
        }
        if let Some(dir) = private_dir() {
            // before any wgpu instance exists: nothing reads the environment concurrently
            std::env::set_var("XDG_RUNTIME_DIR", dir);
        }
    });
}

#[cfg(unix)]
fn private_dir() -> Option<PathBuf> {
    use std::fs::DirBuilder;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = std::env::temp_dir();
    let private = |d: &PathBuf, uid: u32| {
        std::fs::symlink_metadata(d)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o777 == 0o700)
    };
    if let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) {
        let d = base.join(format!("triaxis-runtime-{uid}"));
        let _ = DirBuilder::new().mode(0o700).create(&d);
        if private(&d, uid) {
            return Some(d);
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let d = base.join(format!("triaxis-runtime-{}-{nanos}", std::process::id()));
    DirBuilder::new().mode(0o700).create(&d).ok().map(|()| d)
}

#[cfg(not(unix))]
fn private_dir() -> Option<PathBuf> {
    None
}
