//! The one interface both store engines implement (embedded SQLite, PostgreSQL server), and
//! what they share: validating a run or profile before it is written (one check for both
//! engines, so they accept exactly the same values; the limits are
//! [`tensorforge_record::limits`]), the per-run summary, and the content comparison that
//! makes recording a run idempotent.
//!
//! An engine stores runs (each written in one transaction), lists them with filters pushed
//! into SQL, reads a run's records, selects records by workload fingerprint (the history a
//! gate compares against) and keeps calibrated device profiles. Run selection by user-typed
//! selectors, syncing between stores and everything else above these primitives lives in
//! [`crate::store::Store`], once for both engines. Left out: deleting or editing runs, and
//! garbage collection (a store only grows).

use crate::error::StoreError;
use crate::record::Record;
use crate::store::{RunInfo, RunWorkload};
use crate::time::now_unix_s;
use serde::{Deserialize, Serialize};
use tensorforge_core::text::{shorten, SHORT_VALUE_CHARS};
use tensorforge_record::limits::{
    check_text, MACHINE_ID_MAX_BYTES, PROFILE_ID_MAX_BYTES, PROFILE_TEXT_MAX_BYTES,
};
use tensorforge_record::RecordError;

/// Which runs [`StoreEngine::runs`] returns; every filter given must hold. Results are newest
/// first (by `created_unix_s`, then insertion order).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunQuery<'a> {
    /// Exactly this run id.
    pub run_id: Option<&'a str>,
    /// Runs recorded on this machine.
    pub machine_id: Option<&'a str>,
    /// Leave out this run id.
    pub exclude_run: Option<&'a str>,
    /// Runs whose label `.0` has value `.1`.
    pub label: Option<(&'a str, &'a str)>,
    /// At most this many runs.
    pub limit: Option<usize>,
}

/// What happened to one run handed to the store.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InsertStatus {
    /// Written now.
    Inserted,
    /// A run with this id and identical records was already stored (a retry); nothing was
    /// written.
    AlreadyStored,
}

/// The outcome of recording one run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    /// The run's id.
    pub run_id: String,
    /// Whether it was written now or was already there.
    pub status: InsertStatus,
}

/// A calibrated device profile as stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct StoredProfile {
    /// Unique profile id.
    pub profile_id: String,
    /// Machine the profile was calibrated on.
    pub machine_id: String,
    /// When it was first stored (Unix seconds); kept when a profile is synced.
    pub created_unix_s: i64,
    /// The profile (hardware spec TOML).
    pub toml_text: String,
    /// How it was measured (JSON).
    pub provenance_json: String,
}

/// A run validated and serialized once, ready for any engine.
#[derive(Debug)]
pub struct PreparedRun<'a> {
    /// The records in order.
    pub records: &'a [Record],
    /// The summary every engine stores beside them.
    pub info: RunInfo,
    /// Each record's JSON (the form the run's content is compared in).
    pub jsons: Vec<String>,
}

/// The part of [`RunInfo`] an engine keeps as one JSON value per run.
#[derive(Serialize, Deserialize)]
pub(crate) struct RunSummary {
    pub(crate) sample_count: usize,
    pub(crate) sources: Vec<String>,
    pub(crate) device_kinds: Vec<String>,
    pub(crate) workloads: Vec<RunWorkload>,
}

impl RunSummary {
    pub(crate) fn of(info: &RunInfo) -> RunSummary {
        RunSummary {
            sample_count: info.sample_count,
            sources: info.sources.clone(),
            device_kinds: info.device_kinds.clone(),
            workloads: info.workloads.clone(),
        }
    }

    pub(crate) fn fill(self, info: &mut RunInfo) {
        info.sample_count = self.sample_count;
        info.sources = self.sources;
        info.device_kinds = self.device_kinds;
        info.workloads = self.workloads;
    }
}

/// What a store engine does; [`crate::store::Store`] builds everything else on it.
///
/// Every method that writes runs in ONE transaction: on any error nothing of the call is
/// stored. Recording a run whose id is already stored is not an error when the stored
/// records are identical (a client retry): the outcome is [`InsertStatus::AlreadyStored`].
/// The same id with different records is an error and writes nothing.
pub trait StoreEngine {
    /// The store as shown in messages (a path, or a URL with its password redacted).
    fn describe(&self) -> String;

    /// The schema version of the open store.
    fn schema_version(&self) -> Result<i64, StoreError>;

    /// Write `runs` in one transaction, calling `hook(i)` after record `i` of each run is
    /// written (tests kill a writer there). Returns one outcome per run, in order.
    fn write_runs(
        &self,
        runs: &[PreparedRun<'_>],
        hook: &mut dyn FnMut(usize),
    ) -> Result<Vec<InsertOutcome>, StoreError>;

    /// Runs matching `q`, newest first.
    fn runs(&self, q: &RunQuery<'_>) -> Result<Vec<RunInfo>, StoreError>;

    /// One run's records in insertion order (empty when the run is not stored).
    fn run_records(&self, run_id: &str) -> Result<Vec<Record>, StoreError>;

    /// Every record of one fingerprint (optionally on one machine), oldest first (by record
    /// timestamp, then insertion order).
    fn records_for_fingerprint(
        &self,
        fingerprint: &str,
        machine_id: Option<&str>,
    ) -> Result<Vec<Record>, StoreError>;

    /// The records of the newest `runs` distinct runs with `fingerprint` on `machine_id` at
    /// `threads` threads, leaving out the runs in `exclude`, oldest first. A run's age is
    /// that of its newest such record (timestamp, then insertion order). Chosen in SQL by
    /// each engine; the conformance suite checks that both answer alike.
    fn history_records(
        &self,
        fingerprint: &str,
        machine_id: &str,
        threads: u32,
        exclude: &[String],
        runs: usize,
    ) -> Result<Vec<Record>, StoreError>;

    /// Distinct fingerprints whose workload name is `name`, or `name` itself when it is a
    /// stored fingerprint.
    fn fingerprints_named(&self, name: &str) -> Result<Vec<String>, StoreError>;

    /// Store a profile; `Ok(false)` when a profile with this id is already stored (nothing
    /// written).
    fn insert_profile(&self, p: &StoredProfile) -> Result<bool, StoreError>;

    /// The newest profile of `machine_id`.
    fn latest_profile(&self, machine_id: &str) -> Result<Option<StoredProfile>, StoreError>;

    /// One profile by id.
    fn profile(&self, profile_id: &str) -> Result<Option<StoredProfile>, StoreError>;

    /// Every profile, oldest first.
    fn profiles(&self) -> Result<Vec<StoredProfile>, StoreError>;
}

/// Whether `stored` (read back from a store) are the records whose JSON is `incoming`. Both
/// sides are compared as this build serializes them, so a run stored by an older build with
/// the same values still matches.
pub(crate) fn same_content(stored: &[Record], incoming: &[String]) -> bool {
    stored.len() == incoming.len()
        && stored
            .iter()
            .zip(incoming)
            .all(|(r, j)| serde_json::to_string(r).is_ok_and(|s| &s == j))
}

/// The error for a run id already stored with different records.
pub(crate) fn conflict(store: &str, run_id: &str) -> StoreError {
    StoreError::invalid(
        store,
        "run_id",
        run_id,
        "a different run with this id is already stored; nothing was written",
    )
}

/// How a run is named in messages: `run <id>`, the id shortened and escaped (it may be the
/// offending value itself).
pub(crate) fn run_label(run_id: &str) -> String {
    format!("run {}", shorten(run_id, SHORT_VALUE_CHARS))
}

/// Check a run before any engine sees it: at least one record; every record valid
/// ([`Record::validate`], which applies the string limits of
/// [`tensorforge_record::limits`] to every string of the record, keys included: no NUL
/// character, at most `RUN_ID_MAX_BYTES` for the run id, `MACHINE_ID_MAX_BYTES` for the
/// machine, ...); one non-empty `run_id` and one `device.machine_id` shared by all records.
/// The same check for both engines, so SQLite and PostgreSQL accept exactly the same runs.
/// An error is one line naming the run, the record, the field, the limit and the value
/// (shortened, NUL shown as `\0`).
pub fn check_run(records: &[Record]) -> Result<(), StoreError> {
    let Some(first) = records.first() else {
        return Err(StoreError::invalid(
            "run",
            "records",
            "[]",
            "a run needs at least one record",
        ));
    };
    let run_id = &first.run_id;
    let run = run_label(run_id);
    if run_id.trim().is_empty() {
        return Err(StoreError::invalid(
            format!(
                "{run} (workload `{}`)",
                shorten(&first.workload.name, SHORT_VALUE_CHARS)
            ),
            "run_id",
            shorten(run_id, SHORT_VALUE_CHARS),
            "must not be empty",
        ));
    }
    let machine_id = &first.device.machine_id;
    for (i, r) in records.iter().enumerate() {
        let at = format!(
            "{run} record {i} (workload `{}`)",
            shorten(&r.workload.name, SHORT_VALUE_CHARS)
        );
        r.validate().map_err(|e| match e {
            RecordError::InvalidField {
                field,
                value,
                reason,
                ..
            } => StoreError::invalid(&at, field, value, reason),
            other => StoreError::Record(other),
        })?;
        if &r.run_id != run_id {
            return Err(StoreError::invalid(
                at,
                "run_id",
                shorten(&r.run_id, SHORT_VALUE_CHARS),
                format!(
                    "all records of a run must share one run_id (record 0 has `{}`)",
                    shorten(run_id, SHORT_VALUE_CHARS)
                ),
            ));
        }
        if &r.device.machine_id != machine_id {
            return Err(StoreError::invalid(
                at,
                "device.machine_id",
                shorten(&r.device.machine_id, SHORT_VALUE_CHARS),
                format!(
                    "all records of a run must come from one machine (record 0 has `{}`)",
                    shorten(machine_id, SHORT_VALUE_CHARS)
                ),
            ));
        }
    }
    Ok(())
}

/// Validate a run's records ([`check_run`]) and build its summary and the JSON of each
/// record.
pub fn prepare_run(records: &[Record]) -> Result<PreparedRun<'_>, StoreError> {
    check_run(records)?;
    prepare_run_unchecked(records)
}

/// [`prepare_run`] without [`check_run`]: only for tests that must store what the checks
/// refuse (a store written before the checks existed). Errors only on an empty run.
#[doc(hidden)]
pub fn prepare_run_unchecked(records: &[Record]) -> Result<PreparedRun<'_>, StoreError> {
    let Some(first) = records.first() else {
        return Err(StoreError::invalid(
            "run",
            "records",
            "[]",
            "a run needs at least one record",
        ));
    };
    let run_id = first.run_id.clone();
    let machine_id = first.device.machine_id.clone();
    let mut labels = first.labels.clone();
    let mut sources: Vec<String> = Vec::new();
    let mut device_kinds: Vec<String> = Vec::new();
    let mut workloads = Vec::with_capacity(records.len());
    let mut jsons = Vec::with_capacity(records.len());
    let mut sample_count = 0;
    let mut created = i64::MIN;
    for (i, r) in records.iter().enumerate() {
        labels.retain(|k, v| r.labels.get(k) == Some(v));
        if !sources.contains(&r.source) {
            sources.push(r.source.clone());
        }
        if !device_kinds.contains(&r.device.kind) {
            device_kinds.push(r.device.kind.clone());
        }
        sample_count += r.samples_ns.len();
        created = created.max(r.timestamp_unix_s);
        workloads.push(RunWorkload {
            name: r.workload.name.clone(),
            kind: r.workload.kind.clone(),
            dtype: r.workload.dtype.clone(),
            fingerprint: r.fingerprint.clone(),
            samples: r.samples_ns.len(),
            p50_ns: r.stats.p50_ns,
        });
        jsons.push(serde_json::to_string(r).map_err(|e| {
            StoreError::invalid(
                format!("{} record {i}", run_label(&run_id)),
                "record",
                "…",
                format!("cannot serialize: {e}"),
            )
        })?);
    }
    let info = RunInfo {
        run_id,
        created_unix_s: created,
        inserted_unix_s: now_unix_s(),
        machine_id,
        labels,
        record_count: records.len(),
        sample_count,
        sources,
        device_kinds,
        workloads,
    };
    Ok(PreparedRun {
        records,
        info,
        jsons,
    })
}

/// Check a profile before any engine sees it: a non-empty id of at most
/// `PROFILE_ID_MAX_BYTES`, a machine id of at most `MACHINE_ID_MAX_BYTES`, TOML and
/// provenance of at most `PROFILE_TEXT_MAX_BYTES` each, no NUL character in any of them,
/// and provenance that parses as JSON.
pub fn check_profile(p: &StoredProfile) -> Result<(), StoreError> {
    let at = format!("profile {}", shorten(&p.profile_id, SHORT_VALUE_CHARS));
    if p.profile_id.trim().is_empty() {
        return Err(StoreError::invalid(
            at,
            "profile_id",
            shorten(&p.profile_id, SHORT_VALUE_CHARS),
            "must not be empty",
        ));
    }
    for (field, value, max, name) in [
        (
            "profile_id",
            &p.profile_id,
            PROFILE_ID_MAX_BYTES,
            "PROFILE_ID_MAX_BYTES",
        ),
        (
            "machine_id",
            &p.machine_id,
            MACHINE_ID_MAX_BYTES,
            "MACHINE_ID_MAX_BYTES",
        ),
        (
            "toml_text",
            &p.toml_text,
            PROFILE_TEXT_MAX_BYTES,
            "PROFILE_TEXT_MAX_BYTES",
        ),
        (
            "provenance_json",
            &p.provenance_json,
            PROFILE_TEXT_MAX_BYTES,
            "PROFILE_TEXT_MAX_BYTES",
        ),
    ] {
        check_text(field, value, max, name)
            .map_err(|v| StoreError::invalid(&at, v.field, v.value, v.reason))?;
    }
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&p.provenance_json) {
        return Err(StoreError::invalid(
            at,
            "provenance_json",
            shorten(&p.provenance_json, 60),
            format!("not JSON: {e}"),
        ));
    }
    Ok(())
}
