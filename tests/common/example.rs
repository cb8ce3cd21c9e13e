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
        if cfg!(feature = "mpi") {
            // the same features as the tests, or this build would replace the MPI binary
            c.args(["--features", "mpi"]);
        }
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
    let msg = format!(
        "example {name} is not at {} after building it",
        bin.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIP: {msg}");
    None
}

/// The train example's tiny model and short evaluation (2 layers of 16 channels, sequences of
/// 8 tokens): the start of every test's command line for it.
#[allow(dead_code)] // not every test file that shares this module trains
pub const TINY_TRAIN: &[&str] = &[
    "--channels",
    "16",
    "--heads",
    "2",
    "--layers",
    "2",
    "--batch",
    "2",
    "--seq",
    "8",
    "--eval-every",
    "1000",
    "--eval-batches",
    "1",
];

/// A command for example `name` with `args`, run in `dir` (outputs land there).
pub fn example(name: &str, dir: &std::path::Path, args: &[&str]) -> Option<Command> {
    let mut c = Command::new(example_bin(name)?);
    c.args(args).current_dir(dir);
    Some(c)
}

/// Runs example `name` with `args` in `dir` to its end.
pub fn run_example(name: &str, dir: &std::path::Path, args: &[&str]) -> Option<Output> {
    Some(
        example(name, dir, args)?
            .output()
            .expect("the example starts"),
    )
}

/// A fresh empty directory under the system's temporary directory, for one test.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let d = std::env::temp_dir().join(format!("triaxis-test-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("a scratch directory");
    d
}

/// A running example whose output is read as it comes: stdout lines through a channel (so a
/// test can act when a step is logged), stderr collected for the end.
pub struct Running {
    pub child: std::process::Child,
    lines: crossbeam_channel::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
    pub stdout: Vec<String>,
}

impl Running {
    /// Starts `cmd` with piped output.
    pub fn start(mut cmd: Command) -> Running {
        use std::io::{BufRead, Read};
        use std::process::Stdio;
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let out = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Running {
            child,
            lines,
            stderr,
            stdout: Vec::new(),
        }
    }

    /// Waits (at most `limit`) until a progress line `step <n>: …` with n ≥ `step` appears;
    /// false if the output ended or the time ran out first.
    pub fn wait_for_step(&mut self, step: usize, limit: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            let Ok(l) = self.lines.recv_timeout(left) else {
                return false;
            };
            let n = l
                .strip_prefix("step")
                .and_then(|r| r.split(':').next())
                .and_then(|n| n.trim().parse::<usize>().ok());
            self.stdout.push(l);
            if n.is_some_and(|n| n >= step) {
                return true;
            }
        }
    }

    /// Sends `signal` (a name such as INT, TERM, KILL) to the child.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {} failed", self.child.id());
    }

    /// Waits for the end (killing the child after `limit`): exit status, stdout, stderr.
    pub fn finish(
        mut self,
        limit: std::time::Duration,
    ) -> (std::process::ExitStatus, String, String) {
        let end = std::time::Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if std::time::Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the example ran past {limit:?} and was killed");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        self.stdout.extend(self.lines.iter());
        let err = self.stderr.join().unwrap_or_default();
        (status, self.stdout.join("\n"), err)
    }
}

/// One command line an example must refuse: the example, its arguments (split at spaces;
/// `{file}` stands for an existing regular file, `{empty}` for an empty one beside it) and the
/// parts its error must contain.
pub struct Refusal {
    pub example: &'static str,
    pub args: String,
    pub want: Vec<String>,
}

/// A row of a refusal table: `refusal("pipeline", "--stages 0", &["--stages must be …"])`.
pub fn refusal(example: &'static str, args: &str, want: &[&str]) -> Refusal {
    Refusal {
        example,
        args: args.to_string(),
        want: want.iter().map(|w| w.to_string()).collect(),
    }
}

/// A wgpu backend no adapter of this platform offers. Refusals run with it as `WGPU_BACKEND`:
/// a child that got past its checks to open a device fails with "no GPU adapter found"
/// instead of the expected message.
pub fn absent_backend() -> &'static str {
    if cfg!(target_os = "macos") {
        "dx12"
    } else {
        "metal"
    }
}

/// Runs `r` in `dir` (`{file}` replaced by `file`) and checks the refusal: exit status 2,
/// every expected part on stderr, no panic, and nothing on stdout (every example prints its
/// first line only after all its checks). `Ok(false)`: the example binary is missing (skipped).
pub fn check_refusal(
    dir: &std::path::Path,
    file: &std::path::Path,
    r: &Refusal,
) -> Result<bool, String> {
    let empty = file.with_file_name("empty-file").display().to_string();
    let file = file.display().to_string();
    let args: Vec<String> = r
        .args
        .split_whitespace()
        .map(|a| a.replace("{file}", &file).replace("{empty}", &empty))
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(mut cmd) = example(r.example, dir, &args) else {
        return Ok(false);
    };
    let out = cmd
        .env("WGPU_BACKEND", absent_backend())
        .output()
        .expect("the example starts");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let what = format!("{} {}", r.example, r.args);
    let mut wrong = Vec::new();
    if out.status.code() != Some(2) {
        wrong.push(format!("exited with {} instead of 2", out.status));
    }
    if stderr.contains("panicked") {
        wrong.push("panicked".into());
    }
    if !stdout.is_empty() {
        wrong.push(format!("printed {stdout:?} before refusing"));
    }
    for w in &r.want {
        if !stderr.contains(w.as_str()) {
            wrong.push(format!("lacks {w:?}"));
        }
    }
    if wrong.is_empty() {
        Ok(true)
    } else {
        Err(format!("{what}: {} — stderr {stderr:?}", wrong.join(", ")))
    }
}

/// `mpirun` with the settings of an oversubscribed single host (root allowed, shared-memory
/// transport), or `None` — a loud failure under `CI` — when it is not installed.
pub fn mpirun() -> Option<Command> {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "mpirun is missing under CI: install openmpi-bin libopenmpi-dev"
        );
        eprintln!("SKIP: mpirun is not installed (apt install openmpi-bin libopenmpi-dev)");
        return None;
    }
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,vader")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    Some(c)
}

/// (step, validation loss, exact match) of every evaluation in a train example's run record.
pub fn evals(rec: &serde_json::Value) -> Vec<(u64, f64, f64)> {
    rec["evals"]
        .as_array()
        .expect("evaluations")
        .iter()
        .map(|e| {
            (
                e["step"].as_u64().expect("step"),
                e["val_loss"].as_f64().expect("val_loss"),
                e["accuracy"].as_f64().expect("exact match"),
            )
        })
        .collect()
}
