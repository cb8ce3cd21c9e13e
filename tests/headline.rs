//! The figures a newcomer sees first, pinned on each software adapter: the train example's
//! default model and task on a short schedule (model checksum, the validation loss and exact
//! match of each evaluation, the greedy sample), and — `--ignored`, about two minutes in
//! release — the default run itself (`cargo run --release --example train`). A change that
//! moves a pin says why in its commit and updates the pins and docs/training.md together.
//!
//! Pins are per adapter (backend and driver): other hardware rounds differently, so there the
//! tests print their figures and skip (under `CI`, an adapter without pins is a failure).

mod common;

use common::example::{run_example, scratch_dir};

/// What a run reports: checksum, (step, validation loss, exact match) of every evaluation,
/// and the sample.
#[derive(Debug, PartialEq)]
struct Figures {
    checksum: String,
    evals: Vec<(u64, f64, f64)>,
    sample: String,
}

/// One adapter's pinned figures.
struct Pin {
    backend: &'static str,
    driver_info: &'static str,
    checksum: &'static str,
    evals: &'static [(u64, f64, f64)],
    sample: &'static str,
}

/// Runs the train example with `args` in a scratch directory: the adapter (backend, driver
/// info) and the figures of its record, or `None` when the example cannot run here.
fn run(tag: &str, args: &[&str]) -> Option<((String, String), Figures)> {
    let dir = scratch_dir(tag);
    let mut a = args.to_vec();
    a.extend(["--no-checkpoint", "--record", "run.json"]);
    let out = run_example("train", &dir, &a)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("run.json")).expect("the run record");
    let rec: serde_json::Value = serde_json::from_str(&text).expect("a JSON record");
    let _ = std::fs::remove_dir_all(&dir);
    let s = |v: &serde_json::Value| v.as_str().expect("a string").to_string();
    let adapter = (
        s(&rec["adapter"]["backend"]),
        s(&rec["adapter"]["driver_info"]),
    );
    let evals = common::example::evals(&rec);
    Some((
        adapter,
        Figures {
            checksum: s(&rec["model_checksum"]),
            evals,
            sample: s(&rec["sample"]),
        },
    ))
}

/// The run's figures against the pin of its adapter.
fn check(what: &str, adapter: &(String, String), got: &Figures, pins: &[Pin]) {
    println!("{what} on {} ({}): {got:#?}", adapter.0, adapter.1);
    let Some(pin) = pins
        .iter()
        .find(|p| p.backend == adapter.0 && p.driver_info == adapter.1)
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what}: no pinned figures for {adapter:?} under CI"
        );
        eprintln!("SKIP: {what}: no pinned figures for {adapter:?} (printed above)");
        return;
    };
    let want = Figures {
        checksum: pin.checksum.to_string(),
        evals: pin.evals.to_vec(),
        sample: pin.sample.to_string(),
    };
    assert_eq!(
        got, &want,
        "{what} moved on {adapter:?}: a change that moves it says why and updates the pins and \
         docs/training.md together"
    );
}

/// The default model and task (4 layers × 64 channels, 2-digit sums, 16 × 32 tokens per step),
/// 30 steps and its final evaluation (validation loss, exact match on 256 held-out problems).
const SHORT: &[&str] = &["--steps", "30", "--eval-every", "0"];

/// Measured 2026-12-04 (Mesa 22.3.6, LLVM 15.0.6, two cores).
const SHORT_PINS: &[Pin] = &[
    Pin {
        backend: "Vulkan",
        driver_info: "Mesa 22.3.6 (LLVM 15.0.6)",
        checksum: "sha256:f635af996a6969b402c3d4816144b675e17535bcad9023dcdcd8038bf14f2531",
        evals: &[(30, 1.4050679, 0.0234375)],
        sample: SHORT_SAMPLE,
    },
    Pin {
        backend: "Gl",
        driver_info: "4.5 (Core Profile) Mesa 22.3.6",
        checksum: "sha256:9c36e14bca8c99d1bbee30cbab4df99fdf8d62e401341b79dc249d009d29dc0f",
        evals: &[(30, 1.4050682, 0.0234375)],
        sample: SHORT_SAMPLE,
    },
];

/// Both adapters complete the same way after 30 steps: the format and the fixed width, not
/// yet the sums (the one right answer is 0 + 0).
const SHORT_SAMPLE: &str = "  70+02=500    ✗\n  51+21=900    ✗\n  23+73=500    ✗\n  01+49=000    ✗\n  59+07=500    ✗\n  32+04=500    ✗\n  00+70=000    ✗\n  00+00=000    ✓";

#[test]
fn a_short_run_of_the_default_model_is_pinned() {
    let Some((adapter, got)) = run("headline-short", SHORT) else {
        return;
    };
    check("the short run", &adapter, &got, SHORT_PINS);
}

/// Measured 2026-12-04 (Mesa 22.3.6, LLVM 15.0.6, two cores); docs/training.md
/// shows the same run. GL rounds differently in places (its own shader compiler), so its bits
/// differ; both pass 95 % exact match by step 750.
const DEFAULT_PINS: &[Pin] = &[
    Pin {
        backend: "Vulkan",
        driver_info: "Mesa 22.3.6 (LLVM 15.0.6)",
        checksum: "sha256:0b222b061ae5d05adf0bcbbdbb79349b70ad1f17bbe70c945bcef4223db53a53",
        evals: &[
            (250, 1.2824413, 0.0),
            (500, 0.98932016, 0.6171875),
            (750, 0.89534813, 0.9375),
            (1000, 0.8818558, 1.0),
            (1250, 0.87902796, 0.96875),
            (1500, 0.87560195, 1.0),
        ],
        sample: "  70+02=270    ✓\n  51+21=270    ✓\n  23+73=690    ✓\n  01+49=050    ✓\n  59+07=660    ✓\n  32+04=630    ✓\n  00+70=070    ✓\n  00+00=000    ✓",
    },
    Pin {
        backend: "Gl",
        driver_info: "4.5 (Core Profile) Mesa 22.3.6",
        checksum: "sha256:be3dfaa78cfd51ebb0cc48dfbe5123eb349a4978fc683d943b64ef7217e5b2db",
        evals: &[
            (250, 1.298695, 0.01171875),
            (500, 1.0136347, 0.51953125),
            (750, 0.8878719, 0.96484375),
            (1000, 0.887287, 0.97265625),
            (1250, 0.8804849, 1.0),
            (1500, 0.87621504, 1.0),
        ],
        sample: "  70+02=270    ✓\n  51+21=270    ✓\n  23+73=690    ✓\n  01+49=050    ✓\n  59+07=660    ✓\n  32+04=630    ✓\n  00+70=070    ✓\n  00+00=000    ✓",
    },
];

#[test]
#[ignore = "about two minutes in release: cargo test --release --test headline -- --ignored"]
fn the_default_run_is_pinned() {
    let Some((adapter, got)) = run("headline-default", &[]) else {
        return;
    };
    check("the default run", &adapter, &got, DEFAULT_PINS);
}
