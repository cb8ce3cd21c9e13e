//! Runs the examples as a user does: as child processes of the test, from the binaries cargo
//! builds beside the test binaries (`target/<profile>/examples/<name>`).

use std::path::PathBuf;
use std::process::{Command, Output};

/// The example `name`, built up to date beside the test binaries (one `cargo build --example`
/// per test process and example: a no-op when `cargo test` has just built it).
pub fn example_bin(name: &str) -> Option<PathBuf> {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/examples/<name>
    let profile_dir = exe.parent().and_then(|d| d.parent())?;
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "--quiet", "--example", name]);
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            c.arg("--release");
        }
        let out = c.output().expect("cargo starts");
        assert!(
            out.status.success(),
            "cargo build --example {name} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.push(name.to_string());
    }
    if bin.is_file() {
        return Some(bin);
    }
    let msg = format!("example {name} is not at {} after building it", bin.display());
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIP: {msg}");
    None
}

/// A command for example `name` with `args`, run in `dir` (outputs land there).
pub fn example(name: &str, dir: &std::path::Path, args: &[&str]) -> Option<Command> {
    let mut c = Command::new(example_bin(name)?);
    c.args(args).current_dir(dir);
    Some(c)
}

/// Runs example `name` with `args` in `dir` to its end.
pub fn run_example(name: &str, dir: &std::path::Path, args: &[&str]) -> Option<Output> {
    Some(example(name, dir, args)?.output().expect("the example starts"))
}

/// A fresh empty directory under the system's temporary directory, for one test.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let d = std::env::temp_dir().join(format!(
        "triaxis-test-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).expect("a scratch directory");
    d
}
