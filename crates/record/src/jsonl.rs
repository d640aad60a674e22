//! Records files: JSON lines (one record per line, blank lines ignored) or a single JSON
//! array of records. Reading validates every record and names the file and line (or array
//! index) of the first bad one; writing goes to a temporary file in the same directory that
//! is renamed over the target, so a failed write leaves nothing half-written. No streaming
//! reader: files are read whole.

use crate::error::RecordError;
use crate::record::Record;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Read and validate every record of a JSON-lines file (or a file holding one JSON array).
pub fn read_records_jsonl(path: &Path) -> Result<Vec<Record>, RecordError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| RecordError::Io {
        path: name.clone(),
        message: "cannot read records file".into(),
        source: Some(e.into()),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| RecordError::Parse {
        source_name: name.clone(),
        message: format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
    })?;
    parse_records_text(&text, &name)
}

/// Parse records from JSON-lines or JSON-array text; `name` names the source in errors.
pub fn parse_records_text(text: &str, name: &str) -> Result<Vec<Record>, RecordError> {
    if text.trim_start().starts_with('[') {
        let values: Vec<serde_json::Value> =
            serde_json::from_str(text).map_err(|e| RecordError::Parse {
                source_name: name.to_string(),
                message: format!("JSON array of records: {e}"),
            })?;
        tensorforge_core::json::reject_duplicate_keys(text).map_err(|message| {
            RecordError::Parse {
                source_name: name.to_string(),
                message,
            }
        })?;
        return values
            .into_iter()
            .enumerate()
            .map(|(i, v)| record_from_value(v, &format!("{name}[{i}]")))
            .collect();
    }
    // The envelope `bench --json` prints: {"schema_version": 1, "run_id": ..., "records": [...]},
    // so that `tensorforge bench ... --json > base.json` is a valid `--baseline`.
    if text.trim_start().starts_with('{') {
        if let Ok(serde_json::Value::Object(mut m)) = serde_json::from_str(text) {
            if !m.contains_key("fingerprint") {
                if let Some(serde_json::Value::Array(values)) = m.remove("records") {
                    tensorforge_core::json::reject_duplicate_keys(text).map_err(|message| {
                        RecordError::Parse {
                            source_name: name.to_string(),
                            message,
                        }
                    })?;
                    if values.is_empty() {
                        return Err(RecordError::Parse {
                            source_name: name.to_string(),
                            message: "`records` is empty".into(),
                        });
                    }
                    return values
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| record_from_value(v, &format!("{name}: records[{i}]")))
                        .collect();
                }
            }
        }
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{name}:{}", i + 1);
        tensorforge_core::json::reject_duplicate_keys(line).map_err(|message| {
            RecordError::Parse {
                source_name: at.clone(),
                message,
            }
        })?;
        out.push(Record::from_json_str(line, &at)?);
    }
    if out.is_empty() {
        return Err(RecordError::Parse {
            source_name: name.to_string(),
            message: "no records (expected JSON lines, a JSON array of records, or the object `bench --json` prints)".into(),
        });
    }
    Ok(out)
}

fn record_from_value(v: serde_json::Value, at: &str) -> Result<Record, RecordError> {
    let r: Record = serde_json::from_value(v).map_err(|e| RecordError::Parse {
        source_name: at.to_string(),
        message: e.to_string(),
    })?;
    r.validate().map_err(|e| e.with_source(at))?;
    Ok(r)
}

/// Write records as JSON lines: to a temporary sibling file, flushed and synced, then
/// renamed over `path`; on any error the temporary file is removed and `path` is untouched.
pub fn write_records_jsonl(path: &Path, records: &[Record]) -> Result<(), RecordError> {
    write_atomic(path, records_jsonl_text(path, records)?.as_bytes())
}

/// Records as JSON lines (one record per line); `path` names the destination in errors.
pub fn records_jsonl_text(path: &Path, records: &[Record]) -> Result<String, RecordError> {
    let mut text = String::new();
    for r in records {
        let line = serde_json::to_string(r).map_err(|e| RecordError::Io {
            path: path.display().to_string(),
            message: format!("cannot serialize record `{}`", r.workload.name),
            source: Some(e.into()),
        })?;
        text.push_str(&line);
        text.push('\n');
    }
    Ok(text)
}

/// Write `bytes` to `path` via a temporary sibling file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let mut s = StagedWrite::new();
    s.stage(path, bytes)?;
    s.publish()
}

/// Write several files as one output: all or nothing.
pub fn write_all_atomic<P: AsRef<Path>, B: AsRef<[u8]>>(
    files: &[(P, B)],
) -> Result<(), RecordError> {
    let mut s = StagedWrite::new();
    for (p, b) in files {
        s.stage(p.as_ref(), b.as_ref())?;
    }
    s.publish()
}

/// Files published together. [`StagedWrite::stage`] writes and syncs each under a temporary
/// name beside its destination (checking the folder exists and the destination is not a
/// folder); [`StagedWrite::publish`] renames them all into place only after every one is
/// staged. A failure while staging, or dropping the value unpublished, removes every
/// temporary file and leaves every destination untouched. (A rename on one file system does
/// not fail in practice; if one did, the files already renamed would stay.)
#[derive(Debug, Default)]
pub struct StagedWrite {
    /// (temporary, destination), in staging order.
    staged: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

impl StagedWrite {
    /// Nothing staged yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Write `bytes` for `path` under a temporary sibling name, flushed and synced.
    pub fn stage(&mut self, path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
        let io = |message: String| RecordError::Io {
            path: path.display().to_string(),
            message,
            source: None,
        };
        let file_name = path
            .file_name()
            .ok_or_else(|| io("not a file path".into()))?
            .to_string_lossy()
            .into_owned();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(io(format!("directory {} does not exist", dir.display())));
        }
        if path.is_dir() {
            return Err(io("is a directory".into()));
        }
        let tmp = dir.join(format!(".{file_name}.tmp-{}", unique_suffix()));
        let result = (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(RecordError::Io {
                path: path.display().to_string(),
                message: "cannot write".into(),
                source: Some(e.into()),
            });
        }
        self.staged.push((tmp, path.to_path_buf()));
        Ok(())
    }

    /// Rename every staged file into place.
    pub fn publish(mut self) -> Result<(), RecordError> {
        let staged = std::mem::take(&mut self.staged);
        for (i, (tmp, dest)) in staged.iter().enumerate() {
            if let Err(e) = std::fs::rename(tmp, dest) {
                for (t, _) in &staged[i..] {
                    let _ = std::fs::remove_file(t);
                }
                return Err(RecordError::Io {
                    path: dest.display().to_string(),
                    message: "cannot write".into(),
                    source: Some(e.into()),
                });
            }
        }
        Ok(())
    }
}

/// A suffix no other temporary file on this host has at the same time: the process id, the
/// clock in nanoseconds and a per-process counter. The file is created with `create_new`, so
/// a clash would be an error, never a write into another writer's file.
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}-{n}", std::process::id())
}

impl Drop for StagedWrite {
    fn drop(&mut self) {
        for (tmp, _) in &self.staged {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new, empty folder under the system's temporary directory.
    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tf-{tag}-{}", unique_suffix()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_bench_json_envelope_is_a_records_file() {
        let a = sample("r1", 64);
        let b = sample("r1", 128);
        let text = serde_json::json!({
            "schema_version": 1,
            "run_id": "r1",
            "stored_in": null,
            "records": [a, b],
        })
        .to_string();
        let got = parse_records_text(&text, "base.json").unwrap();
        assert_eq!(got, vec![a, b]);
        // One record on one line is still JSON lines, not an envelope.
        let one = serde_json::to_string(&got[0]).unwrap();
        assert_eq!(parse_records_text(&one, "x.jsonl").unwrap().len(), 1);
        let e = parse_records_text(r#"{"schema_version":1,"records":[]}"#, "e.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("e.json") && e.contains("empty"), "{e}");
    }

    #[test]
    fn staged_writes_publish_all_or_nothing() {
        let d = temp_dir("staged");
        std::fs::create_dir_all(d.join("blocked")).unwrap();
        let listing = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        // The second destination is a folder: staging fails, the first temp file is gone.
        let e = write_all_atomic(&[(d.join("a.txt"), "a"), (d.join("blocked"), "b")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("blocked") && e.contains("directory"), "{e}");
        assert_eq!(listing(&d), vec!["blocked"]);
        // Dropped unpublished: nothing appears.
        let mut s = StagedWrite::new();
        s.stage(&d.join("c.txt"), b"c").unwrap();
        drop(s);
        assert_eq!(listing(&d), vec!["blocked"]);
        // Published: both files, with their contents.
        write_all_atomic(&[(d.join("a.txt"), "a"), (d.join("b.txt"), "bb")]).unwrap();
        assert_eq!(listing(&d), vec!["a.txt", "b.txt", "blocked"]);
        assert_eq!(std::fs::read_to_string(d.join("b.txt")).unwrap(), "bb");
        let _ = std::fs::remove_dir_all(&d);
    }

    fn sample(run: &str, m: u64) -> Record {
        let mut params = std::collections::BTreeMap::new();
        params.insert("m".into(), serde_json::json!(m));
        Record::new(crate::record::RecordParts {
            run_id: run.into(),
            workload: crate::record::WorkloadIdentity {
                kind: "gemm".into(),
                name: format!("g{m}"),
                params,
                dtype: "f32".into(),
            },
            device: Default::default(),
            software: Default::default(),
            harness: Default::default(),
            samples_ns: vec![1.0, 2.0],
            flops: None,
            bytes: None,
            peak_alloc_bytes: None,
            timestamp_unix_s: 5,
            labels: Default::default(),
            source: "harness".into(),
        })
        .unwrap()
    }

    #[test]
    fn write_read_round_trip_and_array_form() {
        let dir = temp_dir("jsonl");
        let p = dir.join("r.jsonl");
        let recs = vec![sample("r", 1), sample("r", 2)];
        write_records_jsonl(&p, &recs).unwrap();
        assert_eq!(read_records_jsonl(&p).unwrap(), recs);
        // Only the target remains: no temporary files left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let arr = serde_json::to_string(&recs).unwrap();
        assert_eq!(parse_records_text(&arr, "a.json").unwrap(), recs);
    }

    #[test]
    fn errors_name_file_and_line() {
        let good = serde_json::to_string(&sample("r", 1)).unwrap();
        let text = format!("{good}\n\n{{\"schema_version\": 1}}\n");
        let e = parse_records_text(&text, "x.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.jsonl:3"), "{e}");
        let bad_fp = good.replace("\"m\":1", "\"m\":7");
        let e = parse_records_text(&format!("{good}\n{bad_fp}"), "x.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.jsonl:2") && e.contains("fingerprint"), "{e}");
        let e = parse_records_text("[1]", "y.json").unwrap_err().to_string();
        assert!(e.contains("y.json[0]"), "{e}");
        assert!(parse_records_text("\n\n", "z.jsonl").is_err());
        let e = read_records_jsonl(Path::new("/nonexistent/q.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/q.jsonl"), "{e}");
    }

    #[test]
    fn failed_write_leaves_target_untouched() {
        let e = write_records_jsonl(Path::new("/nonexistent-dir/r.jsonl"), &[sample("r", 1)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
