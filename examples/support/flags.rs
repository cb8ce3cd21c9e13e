//! Checks of the values a user passes on a command line, shared by every example: each refuses
//! a value before any device work with the flag and its constraint named, e.g.
//! `--lr must be a finite number in (0, 1] (got NaN)`.
//!
//! Integer flags get a range (zero and absurdly large values refused; [`count`] parses them,
//! `1e9` included, and names a negative value instead of clap's "unexpected argument"), float
//! flags a finite range, comma lists a range per element, and paths are checked for what the
//! run will do with them: an input file must exist, be a regular file (not a pipe or device)
//! and not be empty; an output path must name a file (not a directory, nor a path ending in a
//! separator), must not be an input of the same run ([`not_an_input`]), and must be creatable
//! and writable (probed with a temporary file that is removed again).
//!
//! The `MAX_*` caps are the examples' shared upper bounds: far beyond anything that fits on a
//! device today, low enough that sizes computed from them cannot overflow.
//!
//! Included by each example with `#[path = "support/flags.rs"] mod flags;`.

#![allow(dead_code)] // each example uses its own part

use std::path::Path;

use triaxis::error::{Error, Result};

/// Transformer layers (`--layers`).
pub const MAX_LAYERS: usize = 4096;
/// Model width (`--channels`, `--hidden`); the head count is capped by it too.
pub const MAX_CHANNELS: usize = 65536;
/// Tokens per sequence (`--seq`).
pub const MAX_SEQ: usize = 65536;
/// Sequences per microbatch (`--micro-batch`).
pub const MAX_MICRO_BATCH: usize = 65536;
/// Microbatches per step (`--microbatches`, `--accum`).
pub const MAX_MICROBATCHES: usize = 65536;
/// Parallel degrees and device counts (`--degrees`, `--stages`, `--chunks`, `--devices`).
pub const MAX_DEGREE: usize = 1024;
/// Measured steps of a benchmark (`--steps`).
pub const MAX_STEPS: usize = 1_000_000;
/// Sequences per optimizer step (`--global-batch`), as the planner's cap.
pub const MAX_GLOBAL_BATCH: usize = triaxis::cost::plan::MAX_GLOBAL_BATCH;
/// Adapter index (`--adapter`): `devices` lists the real ones.
pub const MAX_ADAPTER: usize = 255;
/// Sustained compute per device in TFLOP/s (`--tflops`, `--reference-tflops`): an exaflop.
pub const MAX_TFLOPS: f64 = 1e6;
/// Gradient bucket size in MB (`--bucket-mb`): 1 TB.
pub const MAX_BUCKET_MB: f64 = 1e6;

/// An example's end as its exit status: flags that `checked` refused exit 2 (before any device
/// work), a failed `run` 1, each with its error (and its causes) printed.
pub fn exit_status<C, E: std::fmt::Display, F: std::fmt::Display>(
    checked: std::result::Result<C, E>,
    run: impl FnOnce(C) -> std::result::Result<(), F>,
) {
    let checked = checked.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    });
    if let Err(e) = run(checked) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn bad(msg: String) -> Error {
    Error::Config(msg)
}

/// `v` must be at least `min` (no upper bound beyond the type's).
pub fn at_least(flag: &str, v: usize, min: usize) -> Result<()> {
    if v < min {
        return Err(bad(format!("{flag} must be at least {min} (got {v})")));
    }
    Ok(())
}

/// `v` must lie in `lo..=hi`; the message names both ends.
pub fn in_range(flag: &str, v: usize, lo: usize, hi: usize) -> Result<()> {
    if v < lo || v > hi {
        return Err(bad(format!(
            "{flag} must be between {lo} and {hi} (got {v})"
        )));
    }
    Ok(())
}

/// Every element of a comma list must lie in `lo..=hi`, and the list must not be empty.
pub fn list_in_range(flag: &str, vs: &[usize], lo: usize, hi: usize) -> Result<()> {
    if vs.is_empty() {
        return Err(bad(format!("{flag} must list at least one value")));
    }
    vs.iter().try_for_each(|&v| in_range(flag, v, lo, hi))
}

/// `v` must be finite and in `(0, max]`.
pub fn positive(flag: &str, v: f64, max: f64) -> Result<()> {
    if !v.is_finite() || v <= 0.0 || v > max {
        return Err(bad(format!(
            "{flag} must be a finite number in (0, {max}] (got {v})"
        )));
    }
    Ok(())
}

/// `v` must be finite and in `[0, max]`.
pub fn non_negative(flag: &str, v: f64, max: f64) -> Result<()> {
    if !v.is_finite() || !(0.0..=max).contains(&v) {
        return Err(bad(format!(
            "{flag} must be a finite number in [0, {max}] (got {v})"
        )));
    }
    Ok(())
}

/// An input file: it must exist, be a regular file (not a directory, a named pipe or a device
/// such as `/dev/zero`) and hold at least one byte.
pub fn input_file(flag: &str, path: &Path) -> Result<()> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("{flag} {shown}: {e}")))?;
    if meta.is_dir() {
        return Err(bad(format!("{flag} {shown} is a directory, not a file")));
    }
    if !meta.is_file() {
        return Err(bad(format!(
            "{flag} {shown} is not a regular file (a pipe, socket or device): give a file"
        )));
    }
    if meta.len() == 0 {
        return Err(bad(format!("{flag} {shown} is empty (0 bytes)")));
    }
    Ok(())
}

/// An output file the run will write: its directory is created if missing and must accept a
/// new file, and the path itself must not be a directory. Nothing is left behind but the
/// directories.
pub fn output_file(flag: &str, path: &Path) -> Result<()> {
    let shown = path.display();
    if path.is_dir() {
        return Err(bad(format!(
            "{flag} {shown} is a directory: give a file path inside it"
        )));
    }
    if ends_in_separator(path) {
        return Err(bad(format!(
            "{flag} {shown} ends in a path separator, so it names a directory: give a file path \
             (without the trailing separator, or a file name inside it)"
        )));
    }
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            return Err(bad(format!(
                "{flag} {shown} exists and is not a regular file (a pipe, socket or device): \
                 give a file path"
            )));
        }
    }
    let Some(name) = path.file_name() else {
        return Err(bad(format!("{flag} {shown} names no file")));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        bad(format!(
            "{flag} {shown}: cannot create the directory {} ({e})",
            dir.display()
        ))
    })?;
    let mut probe_name = std::ffi::OsString::from(".");
    probe_name.push(name);
    probe_name.push(format!(".probe-{}", std::process::id()));
    let probe = dir.join(probe_name);
    std::fs::write(&probe, b"").map_err(|e| {
        bad(format!(
            "{flag} {shown}: the directory {} is not writable ({e})",
            dir.display()
        ))
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Whether the path as written ends in a separator (`runs/` or `runs/x/`): a directory to be,
/// never a file, although [`Path::file_name`] ignores the separator.
fn ends_in_separator(path: &Path) -> bool {
    let s = path.as_os_str().as_encoded_bytes();
    s.last()
        .is_some_and(|&b| std::path::is_separator(char::from(b)))
}

/// Whether `a` and `b` name the same file: the same path once canonicalised (the directory,
/// when the file does not exist yet), or the same file on disk (a hard or symbolic link).
pub fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    if let (Ok(x), Ok(y)) = (a.canonicalize(), b.canonicalize()) {
        if x == y {
            return true;
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            if x.dev() == y.dev() && x.ino() == y.ino() {
                return true;
            }
        }
    }
    let canon = |p: &Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.map_or_else(|| Path::new(".").canonicalize(), |d| d.canonicalize());
        dir.ok().zip(p.file_name().map(|n| n.to_os_string()))
    };
    canon(a).is_some_and(|x| Some(x) == canon(b))
}

/// An output path must not name an input of the same run (writing it would destroy the
/// input): `--checkpoint data.txt` with `--data data.txt` is refused with both flags named.
pub fn not_an_input(out_flag: &str, out: &Path, in_flag: &str, input: &Path) -> Result<()> {
    if same_file(out, input) {
        return Err(bad(format!(
            "{out_flag} {} names the same file as {in_flag} {}: writing it would overwrite \
             the input; give {out_flag} another path",
            out.display(),
            input.display()
        )));
    }
    Ok(())
}

/// Parses a whole number for a clap `value_parser`: digits (`1500`, `1_000`) or an integer
/// in scientific notation (`1e9`, `2.5e3`); a negative, fractional or too large value gets an
/// error naming the constraint (clap prefixes it with the flag).
pub fn whole_number(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().replace('_', "");
    if t.starts_with('-') {
        return Err(format!("must be a whole number ≥ 0, not negative ({s})"));
    }
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    let sci = t.contains(['e', 'E']) && t.chars().all(|c| c.is_ascii_digit() || "eE.+".contains(c));
    if sci {
        if let Ok(x) = t.parse::<f64>() {
            if !x.is_finite() || x >= u64::MAX as f64 {
                return Err(format!("{s} is too large (at most {})", u64::MAX));
            }
            if x.fract() != 0.0 {
                return Err(format!("must be a whole number, not {s}"));
            }
            return Ok(x as u64);
        }
    }
    if t.chars().all(|c| c.is_ascii_digit()) && !t.is_empty() {
        return Err(format!("{s} is too large (at most {})", u64::MAX));
    }
    Err(format!(
        "must be a whole number ≥ 0 such as 1500 or 1e9, not {s:?}"
    ))
}

/// [`whole_number`] for a `usize` flag.
pub fn count(s: &str) -> std::result::Result<usize, String> {
    let v = whole_number(s)?;
    usize::try_from(v).map_err(|_| format!("{s} is too large (at most {})", usize::MAX))
}

/// An output directory the run will write files into: created if missing (with its parents),
/// it must be a directory and accept a new file. Only the directories are left behind.
pub fn output_dir(flag: &str, path: &Path) -> Result<()> {
    let shown = path.display();
    if path.exists() && !path.is_dir() {
        return Err(bad(format!("{flag} {shown} exists and is not a directory")));
    }
    std::fs::create_dir_all(path)
        .map_err(|e| bad(format!("{flag} {shown}: cannot create the directory ({e})")))?;
    let probe = path.join(format!(".probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        bad(format!(
            "{flag} {shown}: the directory is not writable ({e})"
        ))
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Parses a comma list such as `1,2,4`, naming the flag and the bad element.
pub fn list<T: std::str::FromStr>(flag: &str, s: &str) -> Result<Vec<T>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| bad(format!("{flag}: {x:?} is not a valid value in {s:?}")))
        })
        .collect()
}
