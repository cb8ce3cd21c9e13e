//! Reading a checkpoint file back: the safetensors container checked piece by piece, every
//! damage answered with an error that names the file and the problem.

use std::path::Path;

use safetensors::{Dtype, SafeTensorError, SafeTensors};
use sha2::{Digest, Sha256};

use super::{fail, hash_metadata, hash_tensor, Checkpoint, FORMAT, FORMAT_V1, KINDS, MAX_HEADER};
use crate::data::hex;
use crate::error::Result;
use crate::model::GptConfig;
use crate::params::Layout;

/// The length of tensor data a header describes (the largest end offset), if it parses.
fn described_data_len(header: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(header).ok()?;
    v.as_object()?
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
}

/// Parses and verifies a whole checkpoint file.
pub(super) fn decode(path: &Path, bytes: &[u8]) -> Result<Checkpoint> {
    let f = |msg: String| fail(path, msg);
    const EARLIER: &str = "use an earlier checkpoint";
    if bytes.is_empty() {
        return Err(f(format!(
            "the file is empty (0 bytes): an interrupted copy or a full disk? {EARLIER}"
        )));
    }
    let Some(n) = bytes.get(..8) else {
        return Err(f(format!(
            "the file is truncated: {} bytes, shorter than the 8-byte safetensors header length; {EARLIER}",
            bytes.len()
        )));
    };
    let n = u64::from_le_bytes([n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]]);
    if n > MAX_HEADER {
        return Err(f(format!(
            "not a safetensors file: its first 8 bytes give a header of {n} bytes; is this a checkpoint written by triaxis?"
        )));
    }
    let have = bytes.len() as u64 - 8;
    if n > have {
        return Err(f(format!(
            "the file is truncated: its header needs {n} bytes but only {have} follow the length; {EARLIER}"
        )));
    }
    let st = SafeTensors::deserialize(bytes).map_err(|e| match e {
        SafeTensorError::MetadataIncompleteBuffer => {
            let want = described_data_len(&bytes[8..8 + n as usize])
                .map_or("a different number of".into(), |d| d.to_string());
            f(format!(
                "the file is truncated or extended: its header describes {want} bytes of tensor data but {} follow it; {EARLIER}",
                have - n
            ))
        }
        SafeTensorError::InvalidHeader(_)
        | SafeTensorError::InvalidHeaderDeserialization(_)
        | SafeTensorError::HeaderTooSmall
        | SafeTensorError::InvalidHeaderLength => f(format!(
            "the header does not parse as safetensors ({e:?}): the file is damaged or not a checkpoint; {EARLIER}"
        )),
        e => f(format!(
            "not a valid safetensors file ({e:?}): the file is damaged or not a checkpoint; {EARLIER}"
        )),
    })?;
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| f(format!("the header cannot be read ({e:?})")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let get = |key: &str| {
        meta.get(key).map(String::as_str).ok_or_else(|| {
            f(format!(
                "the metadata key `{key}` is missing: the file was not written by triaxis or is damaged; {EARLIER}"
            ))
        })
    };
    let format = meta.get("format").map(String::as_str);
    let v1 = format == Some(FORMAT_V1);
    if format != Some(FORMAT) && !v1 {
        return Err(f(format!(
            "format is {}, expected {FORMAT:?} (or the older {FORMAT_V1:?}): a plain safetensors file, or one from another program or version",
            format.map_or("missing".into(), |s| format!("{s:?}"))
        )));
    }
    let model: GptConfig = serde_json::from_str(get("model")?).map_err(|e| {
        f(format!(
            "the metadata `model` is not a GPT configuration ({e}); {EARLIER}"
        ))
    })?;
    model
        .validate()
        .map_err(|e| f(format!("the metadata `model` is unusable: {e}")))?;
    // the layout below is as large as the model: bound it by the file first (no overflow, no
    // huge allocation from a damaged header)
    let fits = [
        model.vocab.checked_mul(model.channels),
        model.ctx.checked_mul(model.channels),
        model.channels.checked_mul(model.channels),
    ]
    .iter()
    .all(|x| x.is_some_and(|x| x <= bytes.len()))
        && model.layers <= st.len() / 3;
    if !fits {
        return Err(f(format!(
            "the metadata model {model:?} is far larger than the file's {} bytes: the header is damaged; {EARLIER}",
            bytes.len()
        )));
    }
    let number = |key: &str| -> Result<u64> {
        let s = get(key)?;
        s.parse::<u64>().map_err(|_| {
            f(format!(
                "the metadata `{key}` = {s:?} is not a non-negative integer: the file is damaged; {EARLIER}"
            ))
        })
    };
    let step = usize::try_from(number("step")?)
        .map_err(|_| f("the metadata `step` does not fit this platform's usize".into()))?;
    let data_cursor = number("data_cursor")?;
    let train: serde_json::Value = serde_json::from_str(get("train")?)
        .map_err(|e| f(format!("the metadata `train` is not JSON ({e}); {EARLIER}")))?;
    let (layout_name, dataset_version) = (get("layout")?.to_string(), get("dataset_version")?);
    let stored_sha = get("sha256")?;

    let layout: Layout = model.layout(&model.blocks());
    let expected: std::collections::HashSet<String> = KINDS
        .iter()
        .flat_map(|k| {
            layout
                .tensors
                .iter()
                .map(move |t| format!("{k}/{}", t.name))
        })
        .collect();
    let mut extra: Vec<&str> = st
        .names()
        .into_iter()
        .filter(|n| !expected.contains(*n))
        .collect();
    if !extra.is_empty() {
        extra.sort_unstable();
        extra.truncate(5);
        return Err(f(format!(
            "unexpected tensors for the model {model:?}: {}: the file is not a triaxis checkpoint of this format",
            extra.join(", ")
        )));
    }
    // every tensor present, F32 and of the layout's shape before anything is allocated: the
    // safetensors reader checked the shapes against the file's length, so this bounds memory
    let mut views = Vec::with_capacity(3 * layout.tensors.len());
    for kind in KINDS {
        for t in &layout.tensors {
            let name = format!("{kind}/{}", t.name);
            let view = st.tensor(&name).map_err(|_| {
                f(format!(
                    "the tensor `{name}` is missing: the file is incomplete or damaged; {EARLIER}"
                ))
            })?;
            if view.dtype() != Dtype::F32 {
                return Err(f(format!(
                    "the tensor `{name}` is {:?}, expected F32: not a triaxis checkpoint",
                    view.dtype()
                )));
            }
            if view.shape() != t.shape.as_slice() {
                return Err(f(format!(
                    "the tensor `{name}` has shape {:?} but the model {model:?} in the metadata needs {:?}: the file is inconsistent; {EARLIER}",
                    view.shape(),
                    t.shape
                )));
            }
            views.push((name, t, view));
        }
    }
    // the checksum: v1 covers the tensors only, v2 the metadata first (see the module doc)
    let mut h = if v1 {
        Sha256::new()
    } else {
        hash_metadata(meta.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    };
    let mut flats = [
        vec![0.0f32; layout.total],
        vec![0.0f32; layout.total],
        vec![0.0f32; layout.total],
    ];
    let per_kind = layout.tensors.len();
    for (i, (name, t, view)) in views.iter().enumerate() {
        let data = view.data();
        hash_tensor(&mut h, name, data);
        let dst = &mut flats[i / per_kind][t.offset..t.offset + t.len];
        for (d, b) in dst.iter_mut().zip(data.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    let sha = format!("sha256:{}", hex(&h.finalize()));
    if sha != stored_sha {
        return Err(f(if v1 {
            format!(
                "checksum mismatch: the metadata says {stored_sha} but the tensor bytes hash to {sha} (a {FORMAT_V1} file: its checksum covers the tensors only): the file is corrupted; {EARLIER}"
            )
        } else {
            format!(
                "checksum mismatch: the metadata says {stored_sha} but the metadata and tensor bytes hash to {sha}: the header or the tensors were changed after writing, or the file is corrupted; {EARLIER}"
            )
        }));
    }
    let [params, m, v] = flats;
    Ok(Checkpoint {
        model,
        train,
        step,
        params,
        m,
        v,
        data_cursor,
        layout: layout_name,
        dataset_version: dataset_version.to_string(),
    })
}
