//! The atomic write of a checkpoint file: a temporary file beside the target, synced, then
//! renamed over it.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

use super::{fail, CRASH_ENV};
use crate::error::Result;

/// Writes through `body` into `<name>.tmp-<pid>` beside `path`, syncs, renames over `path`.
pub(super) fn write_atomic(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> Result<()> {
    let name = path.file_name().ok_or_else(|| {
        fail(
            path,
            "the path names no file: give one such as runs/model.safetensors",
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        fail(
            path,
            format!(
                "cannot create the directory {} ({e}): choose a writable location",
                dir.display()
            ),
        )
    })?;
    // the crash test hook (see `Checkpoint::save`), read once per save
    let crash_before_rename = std::env::var_os(CRASH_ENV).is_some_and(|v| v == "before-rename");
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| {
            fail(
                path,
                format!(
                    "cannot create the temporary file {} ({e}): choose a writable location; nothing was changed",
                    tmp.display()
                ),
            )
        })?;
    let written = (|| {
        let mut w = BufWriter::new(&file);
        body(&mut w)?;
        w.flush()?;
        drop(w);
        file.sync_all()
    })();
    drop(file);
    if crash_before_rename && written.is_ok() {
        std::process::abort();
    }
    let result = written
        .map_err(|e| {
            fail(
                path,
                format!(
                    "writing failed ({e}): free disk space or choose another location; an existing checkpoint is untouched"
                ),
            )
        })
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| {
                fail(
                    path,
                    format!(
                        "cannot replace the target ({e}): the path must name a file, not a directory; an existing checkpoint is untouched"
                    ),
                )
            })
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    } else if let Ok(d) = File::open(dir) {
        let _ = d.sync_all(); // make the rename durable where the platform allows
    }
    result
}
