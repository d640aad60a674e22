//! External tensor data (`data_location = EXTERNAL`, as `onnx.save_model(...,
//! save_as_external_data=True)` and models over 2 GiB write it): the `location` is read
//! relative to the model's folder, and refused when it is absolute, has a `..` component, or
//! resolves (through symlinks) outside that folder. `offset` and `length` are checked against
//! the file's real size and against the tensor's dims before anything is allocated; the
//! bytes become the tensor's `raw_data`, so the rest of the import treats it as inline.
//! Left out: the optional `checksum` key (SHA-1) is not verified, and memory-mapping (the
//! data is read into memory).

use super::proto::{dt, TensorProto};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

/// The tensor with its external data read into `raw_data`; `base` is the model's folder.
pub(super) fn load(t: &TensorProto, base: &Path) -> Result<TensorProto, String> {
    let key = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == k)
            .map(|e| &e.value)
    };
    let name = &t.name;
    let loc = key("location")
        .ok_or_else(|| format!("tensor `{name}`: external data without a `location` entry"))?;
    let rel = Path::new(loc);
    if loc.is_empty()
        || rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "tensor `{name}`: external data location `{loc}` is refused: it must be a relative \
             path inside the model's folder (no `..`, no absolute path)"
        ));
    }
    let num = |k: &str| -> Result<Option<u64>, String> {
        key(k)
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    format!("tensor `{name}`: external data `{k}` = `{v}` is not a byte count")
                })
            })
            .transpose()
    };
    let offset = num("offset")?.unwrap_or(0);
    let length = num("length")?;
    let root = base
        .canonicalize()
        .map_err(|e| format!("model folder `{}`: {e}", base.display()))?;
    let path = root.join(rel);
    let real = path.canonicalize().map_err(|e| {
        format!(
            "tensor `{name}`: external data file `{}`: {e}",
            path.display()
        )
    })?;
    if !real.starts_with(&root) {
        return Err(format!(
            "tensor `{name}`: external data location `{loc}` resolves to `{}`, outside the model's folder `{}` (a symlink out is refused)",
            real.display(),
            root.display()
        ));
    }
    let mut f = std::fs::File::open(&real)
        .map_err(|e| format!("tensor `{name}`: cannot open `{}`: {e}", real.display()))?;
    let size = f
        .metadata()
        .map_err(|e| format!("tensor `{name}`: `{}`: {e}", real.display()))?
        .len();
    let elem = match t.data_type {
        dt::FLOAT | dt::INT32 => 4,
        dt::DOUBLE | dt::INT64 => 8,
        dt::INT8 | dt::UINT8 | dt::BOOL => 1,
        dt::INT16 | dt::UINT16 | dt::FLOAT16 | dt::BFLOAT16 => 2,
        d => {
            return Err(format!(
                "tensor `{name}`: external data of type {} is not read",
                dt::name(d)
            ))
        }
    };
    let numel = t
        .dims
        .iter()
        .try_fold(1u64, |a, &d| {
            u64::try_from(d).ok().and_then(|d| a.checked_mul(d))
        })
        .ok_or_else(|| format!("tensor `{name}`: dims {:?} are invalid", t.dims))?;
    let need = numel
        .checked_mul(elem)
        .ok_or_else(|| format!("tensor `{name}`: dims {:?} overflow", t.dims))?;
    let length = length.unwrap_or(need);
    if length != need {
        return Err(format!(
            "tensor `{name}`: external data `length` = {length} bytes, but its dims {:?} of {} need {need}",
            t.dims,
            dt::name(t.data_type)
        ));
    }
    match offset.checked_add(length) {
        Some(end) if end <= size => {}
        _ => {
            return Err(format!(
                "tensor `{name}`: external data `offset` = {offset} + `length` = {length} runs past the end of `{loc}` ({size} bytes)"
            ))
        }
    }
    let n = usize::try_from(length).map_err(|_| format!("tensor `{name}`: too large"))?;
    let mut raw = Vec::new();
    raw.try_reserve_exact(n)
        .map_err(|_| format!("tensor `{name}`: cannot allocate {n} bytes"))?;
    f.seek(SeekFrom::Start(offset))
        .and_then(|_| f.take(length).read_to_end(&mut raw))
        .map_err(|e| format!("tensor `{name}`: cannot read `{loc}`: {e}"))?;
    if raw.len() != n {
        return Err(format!(
            "tensor `{name}`: `{loc}` ended after {} of {n} bytes",
            raw.len()
        ));
    }
    Ok(TensorProto {
        dims: t.dims.clone(),
        data_type: t.data_type,
        name: t.name.clone(),
        raw_data: raw,
        ..Default::default()
    })
}
