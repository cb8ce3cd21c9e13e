//! Checkpoint integrity: the v2 checksum covers the metadata (an edited step, data cursor,
//! layout, training configuration or dataset version is refused), v1 files still load under
//! their tensor-only rule, and a crash between writing and renaming leaves the previous
//! checkpoint loadable with the complete new one beside it (the train example as a child
//! process; needs a GPU adapter, the software one will do).

mod common;

use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use sha2::{Digest, Sha256};
use triaxis::checkpoint::{Checkpoint, CRASH_ENV, FORMAT, FORMAT_V1, KINDS};
use triaxis::data::hex;
use triaxis::model::GptConfig;
use triaxis::rng::Rng;
use triaxis::Error;

/// A small model with dimensions off the 64-element alignment.
fn small() -> GptConfig {
    GptConfig {
        vocab: 11,
        ctx: 6,
        channels: 8,
        heads: 2,
        layers: 1,
    }
}

/// A random training state of `small()` with metadata values the header edits below expect.
fn state(seed: u64) -> Checkpoint {
    let cfg = small();
    let layout = cfg.layout(&cfg.blocks());
    let mut rng = Rng::new(seed);
    let mut fill = || {
        let mut flat = vec![0.0f32; layout.total];
        for t in &layout.tensors {
            flat[t.offset..t.offset + t.len].fill_with(|| rng.normal());
        }
        flat
    };
    let (params, m, v) = (fill(), fill(), fill().iter().map(|x| x.abs()).collect());
    Checkpoint {
        model: cfg,
        train: serde_json::json!({ "grad_accum": 4, "steps": 100, "seed": seed }),
        step: 20,
        params,
        m,
        v,
        data_cursor: 987_654_321,
        layout: "dp=2 tp=1 pp=2 zero=0 schedule=1f1b m=4 v=1".into(),
        dataset_version: format!("sha256:{:064x}", seed),
    }
}

/// Asserts `r` is an `Error::Checkpoint` whose message holds every `needle`; prints it.
fn expect_err<T: std::fmt::Debug>(what: &str, r: triaxis::Result<T>, needles: &[&str]) {
    let e = r.expect_err(what);
    let text = e.to_string();
    println!("{what}: {text}");
    assert!(
        matches!(e, Error::Checkpoint { .. }),
        "{what}: wrong variant {e:?}"
    );
    for n in needles {
        assert!(text.contains(n), "{what}: message lacks {n:?}");
    }
}

/// `bytes` with the one occurrence of `old` in the safetensors header replaced by `new` (of
/// the same length, so offsets and the header length stay valid).
fn edit_header(bytes: &[u8], old: &str, new: &str) -> Vec<u8> {
    assert_eq!(old.len(), new.len(), "{old:?} → {new:?} changes the length");
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = &bytes[8..8 + n];
    let hits: Vec<usize> = (0..=header.len() - old.len())
        .filter(|&i| &header[i..i + old.len()] == old.as_bytes())
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{old:?} occurs {} times in the header",
        hits.len()
    );
    let mut out = bytes.to_vec();
    out[8 + hits[0]..8 + hits[0] + new.len()].copy_from_slice(new.as_bytes());
    out
}

#[test]
fn edited_metadata_in_a_v2_header_is_refused() {
    let dir = common::example::scratch_dir("ckpt-edit");
    let path = dir.join("ck.safetensors");
    let ck = state(3);
    ck.save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let (_, header) = SafeTensors::read_metadata(&good).unwrap();
    assert_eq!(header.metadata().as_ref().unwrap()["format"], FORMAT);
    // same-length edits of one metadata value each: the file stays valid safetensors and every
    // value still parses, so only the checksum can tell
    let cases = [
        ("step", r#""step":"20""#, r#""step":"21""#),
        (
            "data_cursor",
            r#""data_cursor":"987654321""#,
            r#""data_cursor":"987654320""#,
        ),
        ("layout", r#""layout":"dp=2 "#, r#""layout":"dp=4 "#),
        ("train", r#"\"grad_accum\":4"#, r#"\"grad_accum\":8"#),
        (
            "dataset_version",
            r#""dataset_version":"sha256:0"#,
            r#""dataset_version":"sha256:f"#,
        ),
    ];
    let bad = dir.join("edited.safetensors");
    for (key, old, new) in cases {
        let edited = edit_header(&good, old, new);
        SafeTensors::deserialize(&edited).expect("the edited file is still safetensors");
        std::fs::write(&bad, &edited).unwrap();
        expect_err(
            &format!("edited {key}"),
            Checkpoint::load(&bad),
            &[
                &bad.display().to_string(),
                "checksum mismatch",
                "metadata and tensor bytes",
                "changed after writing",
                "use an earlier checkpoint",
            ],
        );
        assert_eq!(
            std::fs::read(&bad).unwrap(),
            edited,
            "a refused load changed the file"
        );
    }
    // the unedited bytes still load
    std::fs::write(&bad, &good).unwrap();
    assert_eq!(Checkpoint::load(&bad).unwrap(), ck);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rewrites the checkpoint at `src` into `dst` as a v1 file (or with `format` changed only):
/// tensors kept, `format` set to `format`, and with `v1_sha` the checksum recomputed by the v1
/// rule (each tensor in data order: name and bytes, each length-prefixed).
fn rewrite_as(src: &Path, dst: &Path, format: &str, v1_sha: bool) {
    let bytes = std::fs::read(src).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap();
    meta.insert("format".into(), format.into());
    if v1_sha {
        let cfg: GptConfig = serde_json::from_str(&meta["model"]).unwrap();
        let mut h = Sha256::new();
        for kind in KINDS {
            for t in &cfg.layout(&cfg.blocks()).tensors {
                let name = format!("{kind}/{}", t.name);
                let data = st.tensor(&name).unwrap().data();
                h.update((name.len() as u64).to_le_bytes());
                h.update(name.as_bytes());
                h.update((data.len() as u64).to_le_bytes());
                h.update(data);
            }
        }
        meta.insert("sha256".into(), format!("sha256:{}", hex(&h.finalize())));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let v = safetensors::tensor::TensorView::new(Dtype::F32, v.shape().to_vec(), v.data())
                .unwrap();
            (n, v)
        })
        .collect();
    std::fs::write(dst, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

#[test]
fn v1_files_still_load_under_the_tensor_only_rule() {
    let dir = common::example::scratch_dir("ckpt-v1");
    let path = dir.join("ck.safetensors");
    let ck = state(4);
    ck.save(&path).unwrap();
    let v1 = dir.join("v1.safetensors");
    rewrite_as(&path, &v1, FORMAT_V1, true);
    assert_eq!(
        Checkpoint::load(&v1).unwrap(),
        ck,
        "a v1 file does not load"
    );
    // the v1 rule covers the tensors: a flipped tensor byte is refused, naming the format
    let mut flipped = std::fs::read(&v1).unwrap();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    let bad = dir.join("bad.safetensors");
    std::fs::write(&bad, &flipped).unwrap();
    expect_err(
        "v1 flipped tensor byte",
        Checkpoint::load(&bad),
        &["checksum mismatch", FORMAT_V1, "covers the tensors only"],
    );
    // a v2 file relabelled v1 keeps its v2 checksum, which the v1 rule does not reproduce
    rewrite_as(&path, &bad, FORMAT_V1, false);
    expect_err(
        "v2 relabelled v1",
        Checkpoint::load(&bad),
        &["checksum mismatch", FORMAT_V1],
    );
    // and a v1 file relabelled v2 fails the v2 rule
    rewrite_as(&v1, &bad, FORMAT, false);
    expect_err(
        "v1 relabelled v2",
        Checkpoint::load(&bad),
        &["checksum mismatch", "changed after writing"],
    );
    // saving what a v1 file held writes the current format
    let again = dir.join("again.safetensors");
    Checkpoint::load(&v1).unwrap().save(&again).unwrap();
    assert_eq!(
        std::fs::read(&again).unwrap(),
        std::fs::read(&path).unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The train example's arguments for a tiny run writing into `dir`.
fn train_args(dir: &Path, extra: &[&str]) -> Vec<String> {
    let ck = dir.join("ck.safetensors").display().to_string();
    let record = dir.join("run.json").display().to_string();
    let mut args: Vec<String> = [
        "--checkpoint-every",
        "1",
        "--checkpoint",
        &ck,
        "--record",
        &record,
        "--channels",
        "16",
        "--heads",
        "2",
        "--layers",
        "1",
        "--batch",
        "8", // the example's closing sample decodes 8 prompts in one microbatch
        "--seq",
        "8",
        "--eval-every",
        "1000",
        "--eval-batches",
        "1",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

#[test]
fn a_crash_before_the_rename_leaves_the_previous_checkpoint() {
    let dir = common::example::scratch_dir("ckpt-crash");
    let path = dir.join("ck.safetensors");
    let run = |extra: &[&str]| {
        let args = train_args(&dir, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::example::example("train", &dir, &args)
    };
    // a good run: checkpoints after steps 1 and 2, and at the end
    let Some(mut first) = run(&["--steps", "2"]) else {
        return; // the example binary is missing outside CI (the helper says so)
    };
    let out = first.env_remove(CRASH_ENV).output().expect("train starts");
    assert!(
        out.status.success(),
        "the first run failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let before = std::fs::read(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap().step, 2);
    // resume, and crash in the first save (after step 3) between the write and the rename
    let resume = path.display().to_string();
    let mut second = run(&["--resume", &resume, "--steps", "4"]).expect("built above");
    let child = second
        .env(CRASH_ENV, "before-rename")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("train starts");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    println!("the crashed run: {}", out.status);
    assert!(
        !out.status.success(),
        "the run with {CRASH_ENV}=before-rename exited normally:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "not killed by SIGABRT ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // the previous checkpoint is untouched and loads
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the crash changed the checkpoint"
    );
    assert_eq!(Checkpoint::load(&path).unwrap().step, 2);
    // beside it, the complete new file the rename would have installed
    let tmp_name = format!("ck.safetensors.tmp-{pid}");
    let mut temps: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    temps.sort();
    assert_eq!(temps, vec![tmp_name.clone()]);
    let new = Checkpoint::load(&dir.join(&tmp_name)).unwrap();
    println!(
        "left beside the checkpoint: {tmp_name}, a complete checkpoint of step {}",
        new.step
    );
    assert_eq!(new.step, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
