//! Checkpoints (no GPU needed): bit-exact round trips, a file any safetensors reader opens,
//! a clear `Error::Checkpoint` for every damaged or foreign file, atomic saves that leave the
//! previous checkpoint untouched when they fail, and data cursors that resume the same batches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use triaxis::checkpoint::{Checkpoint, FORMAT, KINDS};
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::model::{GptConfig, Micro};
use triaxis::rng::Rng;
use triaxis::Error;

/// A fresh, empty scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("triaxis-checkpoint-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Awkward small dimensions: nothing a multiple of the 64-element alignment.
fn small() -> GptConfig {
    GptConfig {
        vocab: 13,
        ctx: 9,
        channels: 12,
        heads: 3,
        layers: 2,
    }
}

/// A random, finite training state of `cfg` (padding zero, as in a real flat buffer).
fn state(cfg: GptConfig, seed: u64) -> Checkpoint {
    let layout = cfg.layout(&cfg.blocks());
    let mut rng = Rng::new(seed);
    let mut fill = |scale: f32, positive: bool| {
        let mut flat = vec![0.0f32; layout.total];
        for t in &layout.tensors {
            for x in &mut flat[t.offset..t.offset + t.len] {
                let r = rng.normal() * scale;
                *x = if positive { r.abs() } else { r };
            }
        }
        flat
    };
    let (params, m, v) = (fill(0.5, false), fill(1e-3, false), fill(1e-6, true));
    let mut batcher = Batcher::new(seed);
    for _ in 0..seed % 5 + 1 {
        batcher
            .next(&[1, 2, 3, 4, 5, 6, 7, 8], Micro { b: 2, t: 3 })
            .unwrap();
    }
    Checkpoint {
        model: cfg,
        train: serde_json::json!({ "grad_accum": 4, "steps": 100, "seed": seed, "micro": { "b": 2, "t": 8 } }),
        step: 17 + seed as usize,
        params,
        m,
        v,
        data_cursor: batcher.state(),
        layout: "dp=2 tp=1 pp=2 zero=0 schedule=1f1b m=4 v=1".into(),
        dataset_version: format!("sha256:{:064x}", seed),
    }
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Asserts `r` is an `Error::Checkpoint` naming `path` whose message holds every `needle`.
fn expect_err<T: std::fmt::Debug>(what: &str, r: triaxis::Result<T>, path: &str, needles: &[&str]) {
    let e = r.expect_err(what);
    let text = e.to_string();
    println!("{what}: {text}");
    assert!(
        matches!(e, Error::Checkpoint { .. }),
        "{what}: wrong variant {e:?}"
    );
    assert!(text.contains(path), "{what}: message does not name {path}");
    for n in needles {
        assert!(text.contains(n), "{what}: message lacks {n:?}");
    }
}

/// Leftover temporary files in `dir`.
fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

#[test]
fn round_trip_is_bit_exact_and_deterministic() {
    let dir = scratch("roundtrip");
    let path = dir.join("run/ck.safetensors"); // the parent is created
    let ck = state(small(), 3);
    ck.save(&path).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    assert_eq!(bits(&back.params), bits(&ck.params));
    assert_eq!(bits(&back.m), bits(&ck.m));
    assert_eq!(bits(&back.v), bits(&ck.v));
    assert_eq!(back, ck);
    assert_eq!(back.data_cursor, ck.data_cursor);
    // the same state gives the same bytes; saving over a checkpoint replaces it
    let first = std::fs::read(&path).unwrap();
    ck.save(&path).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        first,
        "a save is not deterministic"
    );
    let other = state(small(), 4);
    other.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap(), other);
    assert!(temps(path.parent().unwrap()).is_empty());
    let layout = small().layout(&small().blocks());
    let payload = 3 * 4 * layout.count();
    println!(
        "{} bytes for {} parameters (×3: params, m, v = {payload} bytes of tensors)",
        first.len(),
        layout.count()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn opens_with_the_safetensors_reader() {
    let dir = scratch("reader");
    let path = dir.join("ck.safetensors");
    let (cfg, ck) = (small(), state(small(), 1));
    ck.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let layout = cfg.layout(&cfg.blocks());
    assert_eq!(st.len(), 3 * layout.tensors.len());
    let wte = st.tensor("param/wte").unwrap();
    assert_eq!(wte.dtype(), Dtype::F32);
    assert_eq!(wte.shape(), &[cfg.vocab, cfg.channels]);
    let want = layout.slice(&ck.params, "wte").unwrap();
    let got: Vec<f32> = wte
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(bits(&got), bits(want));
    for kind in KINDS {
        let t = st.tensor(&format!("{kind}/headw")).unwrap();
        assert_eq!(t.shape(), &[cfg.vocab, cfg.channels]);
    }
    assert_eq!(
        st.tensor("adam_v/h1.fcw").unwrap().shape(),
        &[4 * cfg.channels, cfg.channels]
    );
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().as_ref().unwrap();
    assert_eq!(meta["format"], FORMAT);
    assert_eq!(meta["step"], ck.step.to_string());
    let model: GptConfig = serde_json::from_str(&meta["model"]).unwrap();
    assert_eq!(model, cfg);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn damaged_files_give_clear_errors() {
    let dir = scratch("damaged");
    let path = dir.join("ck.safetensors");
    state(small(), 2).save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let bad = dir.join("bad.safetensors");
    let name = bad.display().to_string();
    let try_bytes = |what: &str, bytes: &[u8], needles: &[&str]| {
        std::fs::write(&bad, bytes).unwrap();
        expect_err(what, Checkpoint::load(&bad), &name, needles);
    };
    try_bytes("empty", &[], &["empty"]);
    try_bytes("four bytes", &good[..4], &["truncated"]);
    try_bytes("cut in the header", &good[..8 + n / 2], &["truncated"]);
    try_bytes("cut in the data", &good[..good.len() - 100], &["truncated"]);
    for at in [8 + n, 8 + n + (good.len() - 8 - n) / 2, good.len() - 1] {
        let mut flipped = good.clone();
        flipped[at] ^= 0x10;
        try_bytes(
            "flipped data byte",
            &flipped,
            &["checksum mismatch", "corrupted"],
        );
    }
    let mut rng = Rng::new(9);
    let garbage: Vec<u8> = (0..5000).map(|_| rng.below(256) as u8).collect();
    try_bytes("garbage", &garbage, &["not a safetensors file"]);
    try_bytes(
        "text",
        b"this is not a checkpoint, just some text\n",
        &["not a safetensors file"],
    );
    let mut junk_header = 16u64.to_le_bytes().to_vec();
    junk_header.extend_from_slice(b"{\"a\": [1, 2, 3, ");
    try_bytes("unparsable header", &junk_header, &["does not parse"]);
    let missing = dir.join("missing.safetensors");
    expect_err(
        "missing",
        Checkpoint::load(&missing),
        &missing.display().to_string(),
        &["does not exist"],
    );
    expect_err(
        "a directory",
        Checkpoint::load(&dir),
        &dir.display().to_string(),
        &["cannot be read"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file's metadata map as the safetensors crate reads it.
type Meta = HashMap<String, String>;
/// (stored name, shape, little-endian bytes) of every tensor.
type Tensors = Vec<(String, Vec<usize>, Vec<u8>)>;
/// One way of damaging a file's contents.
type Edit = Box<dyn FnOnce(&mut Meta, &mut Tensors)>;

/// Rewrites the checkpoint at `src` into `dst` through the safetensors crate after `edit`
/// changes its metadata and tensor list (tensor bytes are kept, so the checksum still holds).
fn rewrite(src: &Path, dst: &Path, edit: impl FnOnce(&mut Meta, &mut Tensors)) {
    let bytes = std::fs::read(src).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap();
    let mut tensors: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec()))
        .collect();
    edit(&mut meta, &mut tensors);
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, d)| {
            let v = safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), d).unwrap();
            (n.clone(), v)
        })
        .collect();
    std::fs::write(dst, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

#[test]
fn inconsistent_contents_give_clear_errors() {
    let dir = scratch("inconsistent");
    let path = dir.join("ck.safetensors");
    let ck = state(small(), 5);
    ck.save(&path).unwrap();
    let bad = dir.join("bad.safetensors");
    let name = bad.display().to_string();
    // the rewrite itself keeps a loadable checkpoint
    rewrite(&path, &bad, |_, _| {});
    assert_eq!(Checkpoint::load(&bad).unwrap(), ck);
    let cases: Vec<(&str, &[&str], Edit)> = vec![
        (
            "missing metadata key",
            &["`step` is missing"],
            Box::new(|m, _| {
                m.remove("step");
            }),
        ),
        (
            "no metadata",
            &["format is missing"],
            Box::new(|m, _| m.clear()),
        ),
        (
            "wrong format",
            &["format is \"other-v9\""],
            Box::new(|m, _| {
                m.insert("format".into(), "other-v9".into());
            }),
        ),
        (
            "non-numeric step",
            &["`step` = \"twelve\"", "not a non-negative integer"],
            Box::new(|m, _| {
                m.insert("step".into(), "twelve".into());
            }),
        ),
        (
            "negative cursor",
            &["`data_cursor` = \"-1\""],
            Box::new(|m, _| {
                m.insert("data_cursor".into(), "-1".into());
            }),
        ),
        (
            "bad model JSON",
            &["`model` is not a GPT configuration"],
            Box::new(|m, _| {
                m.insert("model".into(), "{\"vocab\": 13}".into());
            }),
        ),
        (
            "missing tensor",
            &["`adam_v/lnfb` is missing"],
            Box::new(|_, t| t.retain(|(n, _, _)| n != "adam_v/lnfb")),
        ),
        (
            "reshaped tensor",
            &["`param/wte` has shape [156]", "needs [13, 12]"],
            Box::new(|_, t| {
                t.iter_mut()
                    .filter(|(n, _, _)| n == "param/wte")
                    .for_each(|(_, s, _)| *s = vec![13 * 12]);
            }),
        ),
        (
            "extra tensor",
            &["unexpected tensors", "param/h7.fcw"],
            Box::new(|_, t| t.push(("param/h7.fcw".into(), vec![2], vec![0; 8]))),
        ),
        (
            "checksum",
            &["checksum mismatch"],
            Box::new(|m, _| {
                m.insert("sha256".into(), format!("sha256:{:064x}", 0));
            }),
        ),
    ];
    for (what, needles, edit) in cases {
        rewrite(&path, &bad, edit);
        expect_err(what, Checkpoint::load(&bad), &name, needles);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn another_model_or_dataset_is_refused_by_name() {
    let dir = scratch("mismatch");
    let path = dir.join("ck.safetensors");
    let ck = state(small(), 6);
    ck.save(&path).unwrap();
    let other = GptConfig {
        channels: 16,
        layers: 3,
        ..small()
    };
    let r = Checkpoint::load_for(&path, &other);
    expect_err(
        "other model",
        r,
        &path.display().to_string(),
        &[
            "different model",
            "channels: checkpoint 12, this run 16",
            "layers: checkpoint 2, this run 3",
        ],
    );
    let loaded = Checkpoint::load_for(&path, &small()).unwrap();
    loaded.check_dataset(&ck.dataset_version).unwrap();
    let e = loaded
        .check_dataset("sha256:other")
        .unwrap_err()
        .to_string();
    println!("other dataset: {e}");
    assert!(e.contains("sha256:other") && e.contains(&ck.dataset_version));
    let mut train = ck.train.clone();
    assert!(loaded.train_differences(&train).is_empty());
    train["grad_accum"] = serde_json::json!(8);
    assert_eq!(
        loaded.train_differences(&train),
        vec!["grad_accum: checkpoint 4, this run 8".to_string()]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_save_leaves_the_previous_checkpoint_untouched() {
    let dir = scratch("atomic");
    let path = dir.join("ck.safetensors");
    let name = path.display().to_string();
    state(small(), 7).save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let next = state(small(), 8);
    // the temporary file cannot be created (a directory is in its place)
    let blocker = dir.join(format!("ck.safetensors.tmp-{}", std::process::id()));
    std::fs::create_dir(&blocker).unwrap();
    expect_err("blocked temp", next.save(&path), &name, &["temporary file"]);
    std::fs::remove_dir(&blocker).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // buffers that do not fit the model
    let mut short = next.clone();
    short.m.pop();
    expect_err("short buffer", short.save(&path), &name, &["adam_m holds"]);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // a parent that is a file
    let under_file = path.join("inner.safetensors");
    expect_err(
        "parent is a file",
        next.save(&under_file),
        &under_file.display().to_string(),
        &["cannot create the directory"],
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // a target that is a directory: written, then the rename fails and the temp goes away
    let target_dir = dir.join("adir");
    std::fs::create_dir(&target_dir).unwrap();
    expect_err(
        "target is a directory",
        next.save(&target_dir),
        &target_dir.display().to_string(),
        &["cannot replace the target"],
    );
    assert!(target_dir.is_dir());
    assert!(temps(&dir).is_empty(), "left behind: {:?}", temps(&dir));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // and a good save still replaces it
    next.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap(), next);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn data_cursor_resumes_the_same_batches() {
    let corpus = Corpus::addition(AdditionSpec {
        digits: 3,
        train_problems: 300,
        val_problems: 20,
        seed: 11,
        reverse: true,
        pad: false,
    })
    .unwrap();
    let micro = Micro { b: 3, t: 7 };
    let mut a = Batcher::new(42);
    for _ in 0..5 {
        corpus.train_batch(&mut a, micro).unwrap();
    }
    let cursor = a.state();
    let mut b = Batcher::from_state(cursor);
    for i in 0..6 {
        let (xa, ya) = corpus.train_batch(&mut a, micro).unwrap();
        let (xb, yb) = corpus.train_batch(&mut b, micro).unwrap();
        assert_eq!((xa, ya), (xb, yb), "batch {i} after the cursor differs");
    }
    // through a checkpoint file too
    let dir = scratch("cursor");
    let path = dir.join("ck.safetensors");
    let ck = Checkpoint {
        data_cursor: b.state(),
        ..state(small(), 0)
    };
    ck.save(&path).unwrap();
    let mut c = Batcher::from_state(Checkpoint::load(&path).unwrap().data_cursor);
    assert_eq!(
        corpus.train_batch(&mut b, micro).unwrap(),
        corpus.train_batch(&mut c, micro).unwrap()
    );
    // a seed is not a state, and `Rng::new` keeps its stream
    let mut r = Rng::new(7);
    let mut s = Rng::from_state(Rng::new(7).state());
    assert!((0..10).all(|_| r.next_u64() == s.next_u64()));
    assert_ne!(Rng::new(7).state(), 7);
    std::fs::remove_dir_all(&dir).unwrap();
}
