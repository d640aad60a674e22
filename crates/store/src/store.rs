//! The store: one interface over two engines, the embedded SQLite file and a PostgreSQL
//! server, chosen by location ([`crate::location::StoreLocation`]: a path or a
//! `postgres://` URL). [`Store`] holds one open engine ([`StoreEngine`]) and implements, once
//! for both, what callers build on the engine's primitives: recording runs idempotently, run
//! selectors (`latest`, `label:NAME=VALUE`, ids and prefixes), baselines and gate history,
//! profiles, and copying every run and profile from one store to another ([`Store::sync_to`]).
//! Left out: deleting runs, merging conflicting runs (an id stored with different records is
//! an error), and any cache between the caller and the database.

use crate::engine::{
    check_profile, prepare_run, prepare_run_unchecked, InsertOutcome, InsertStatus, PreparedRun,
    RunQuery, StoreEngine, StoredProfile,
};
use crate::error::StoreError;
use crate::location::StoreLocation;
use crate::postgres::PostgresStore;
use crate::record::Record;
use crate::sqlite::SqliteStore;
use crate::time::now_unix_s;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tensorforge_core::text::{shorten, SHORT_VALUE_CHARS};

pub use crate::sqlite::BUSY_TIMEOUT;

/// The store used when none is given, as a path (a `postgres://` URL in
/// `$TENSORFORGE_STORE` is kept as text; [`Store::open`] tells the two apart):
/// `$TENSORFORGE_STORE` if set and non-empty, else
/// `$XDG_DATA_HOME/tensorforge/tensorforge.sqlite`, else
/// `$HOME/.local/share/tensorforge/tensorforge.sqlite` (else `./tensorforge.sqlite`).
pub fn default_store_path() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = var("TENSORFORGE_STORE") {
        return PathBuf::from(p);
    }
    if let Some(d) = var("XDG_DATA_HOME") {
        return PathBuf::from(d)
            .join("tensorforge")
            .join("tensorforge.sqlite");
    }
    if let Some(h) = var("HOME") {
        return PathBuf::from(h)
            .join(".local")
            .join("share")
            .join("tensorforge")
            .join("tensorforge.sqlite");
    }
    PathBuf::from("tensorforge.sqlite")
}

/// A new run id: a UUID version 7 in its lowercase hyphenated form
/// (`01938a6e-5f2c-7d41-8b3e-2c9a4f10e7d5`), 48 bits of Unix milliseconds followed by
/// random bits. Ids sort by creation time as strings (strictly within one process, to the
/// millisecond across processes) and do not collide across processes or machines. The
/// store treats run ids as opaque text: ids of the older form
/// `YYYYMMDDTHHMMSSZ-<pid hex>-<counter>-<8 hex>`, and any id a user gives, stay valid.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

/// One workload of a run, as listed in [`RunInfo::workloads`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunWorkload {
    /// Display name.
    pub name: String,
    /// Workload kind.
    pub kind: String,
    /// Element type.
    pub dtype: String,
    /// Identity fingerprint.
    pub fingerprint: String,
    /// Number of latency samples.
    pub samples: usize,
    /// Median latency in ns.
    pub p50_ns: f64,
}

/// Summary of one stored run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunInfo {
    /// The run id shared by its records.
    pub run_id: String,
    /// Newest `timestamp_unix_s` among the run's records.
    pub created_unix_s: i64,
    /// When the run was written to this store (Unix seconds).
    pub inserted_unix_s: i64,
    /// The machine all records of the run came from.
    pub machine_id: String,
    /// Labels every record of the run carries with the same value.
    pub labels: BTreeMap<String, String>,
    /// Number of records.
    pub record_count: usize,
    /// Total latency samples over all records.
    pub sample_count: usize,
    /// Distinct record sources (`harness`, `ingest:criterion`, ...).
    pub sources: Vec<String>,
    /// Device kind of the records (`cpu`, `gpu`), distinct values.
    pub device_kinds: Vec<String>,
    /// The run's workloads in record order.
    pub workloads: Vec<RunWorkload>,
}

/// Version of the [`SyncReport`] JSON. Version 2 added `runs_refused` and
/// `profiles_refused`.
pub const SYNC_SCHEMA_VERSION: u32 = 2;

/// Runs copied per destination transaction by [`Store::sync_to`]: an interrupted sync keeps
/// every finished batch, and a rerun continues where it stopped.
const SYNC_BATCH_RUNS: usize = 100;

/// What [`Store::sync_to`] did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SyncReport {
    /// Always [`SYNC_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The source store (credentials redacted).
    pub from: String,
    /// The destination store (credentials redacted).
    pub to: String,
    /// Runs written to the destination now.
    pub runs_copied: usize,
    /// Runs the destination already held with the same content.
    pub runs_already_present: usize,
    /// Records in the runs copied now.
    pub records_copied: usize,
    /// Profiles written to the destination now.
    pub profiles_copied: usize,
    /// Profiles the destination already held.
    pub profiles_already_present: usize,
    /// Runs not copied, oldest first, each with why: it fails the store's checks (a NUL
    /// character, a string over its limit, ...) or the destination holds a different run
    /// under its id. Every other run was copied; a rerun tries these again.
    #[serde(default)]
    pub runs_refused: Vec<RefusedRun>,
    /// Profiles not copied, each with why (the same checks; a different profile under the
    /// same id).
    #[serde(default)]
    pub profiles_refused: Vec<RefusedProfile>,
}

impl SyncReport {
    /// Whether anything was refused (the CLI then exits 2).
    pub fn refused_any(&self) -> bool {
        !self.runs_refused.is_empty() || !self.profiles_refused.is_empty()
    }
}

/// A run [`Store::sync_to`] did not copy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RefusedRun {
    /// The run's id as stored in the source (may hold any character: escape it to show it).
    pub run_id: String,
    /// Why, one line naming the field, the limit and the value (the store's error message).
    pub reason: String,
}

/// A profile [`Store::sync_to`] did not copy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RefusedProfile {
    /// The profile's id as stored in the source.
    pub profile_id: String,
    /// Why (the store's error message).
    pub reason: String,
}

/// An open store: SQLite or PostgreSQL behind one interface. Open one per thread or process.
pub struct Store {
    engine: Box<dyn StoreEngine>,
    location: StoreLocation,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.location)
            .finish()
    }
}

impl Store {
    /// Open the store a user named: `path` is a SQLite file path, or (as text) a
    /// `postgres://` URL. See [`Store::open_location`].
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let location = match path.to_str() {
            Some(text) => StoreLocation::parse(text)?,
            None => StoreLocation::Sqlite(path.to_path_buf()),
        };
        Store::open_location(&location)
    }

    /// Open (creating if needed) a store. SQLite: creates parent directories, applies pending
    /// migrations, switches to WAL. PostgreSQL: connects (credentials from the URL,
    /// `PGPASSWORD` or the password file) and applies pending migrations in one
    /// transaction. A file or database that is not a TensorForge store, or one written by a
    /// newer schema, is an error and is left untouched.
    pub fn open_location(location: &StoreLocation) -> Result<Store, StoreError> {
        let engine: Box<dyn StoreEngine> = match location {
            StoreLocation::Sqlite(p) => Box::new(SqliteStore::open(p)?),
            StoreLocation::Postgres(url) => Box::new(PostgresStore::open(url)?),
        };
        Ok(Store {
            engine,
            location: location.clone(),
        })
    }

    /// Where this store is; its `Display` redacts any password.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// The store as shown in messages: a path, or a URL with its password as `***`.
    pub fn describe(&self) -> String {
        self.engine.describe()
    }

    /// The schema version of the open store.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.engine.schema_version()
    }

    /// Validate `records` and write them as one run in one transaction. All records must
    /// share one non-empty `run_id` and one `device.machine_id`. Recording a run that is
    /// already stored with identical records (a retry) writes nothing and says so in the
    /// outcome; the same id with different records is an error.
    pub fn insert_run(&self, records: &[Record]) -> Result<InsertOutcome, StoreError> {
        self.insert_run_with_hook(records, |_| {})
    }

    /// [`Store::insert_run`] calling `hook(i)` after record `i` is written, inside the
    /// transaction (used by tests that kill a writer mid-run).
    #[doc(hidden)]
    pub fn insert_run_with_hook(
        &self,
        records: &[Record],
        mut hook: impl FnMut(usize),
    ) -> Result<InsertOutcome, StoreError> {
        let prepared = prepare_run(records)?;
        let mut out = self.engine.write_runs(&[prepared], &mut hook)?;
        Ok(out.remove(0))
    }

    /// Write several runs (e.g. an imported file) in ONE transaction: every run is
    /// validated first, and either all are stored or none. Runs already stored with
    /// identical records are reported as such, not written twice.
    pub fn insert_runs(&self, runs: &[Vec<Record>]) -> Result<Vec<InsertOutcome>, StoreError> {
        let mut prepared = Vec::with_capacity(runs.len());
        let mut seen = BTreeSet::new();
        for recs in runs {
            let p = prepare_run(recs)?;
            if !seen.insert(p.info.run_id.clone()) {
                return Err(StoreError::invalid(
                    "runs",
                    "run_id",
                    p.info.run_id.clone(),
                    "the same run id appears in two runs",
                ));
            }
            prepared.push(p);
        }
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        self.engine.write_runs(&prepared, &mut |_| {})
    }

    /// Write runs WITHOUT the store's checks, in one transaction: only for tests that need a
    /// store holding what the checks now refuse (as a store written by an older build may).
    /// Never call it outside tests.
    #[doc(hidden)]
    pub fn insert_runs_unchecked(
        &self,
        runs: &[Vec<Record>],
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        let prepared = runs
            .iter()
            .map(|r| prepare_run_unchecked(r))
            .collect::<Result<Vec<_>, _>>()?;
        self.engine.write_runs(&prepared, &mut |_| {})
    }

    /// Write a profile WITHOUT the store's checks (tests only, as
    /// [`Store::insert_runs_unchecked`]); `Ok(false)` when the id is taken.
    #[doc(hidden)]
    pub fn insert_profile_unchecked(&self, p: &StoredProfile) -> Result<bool, StoreError> {
        self.engine.insert_profile(p)
    }

    /// All runs, newest first (by record time, then insertion order).
    pub fn list_runs(&self) -> Result<Vec<RunInfo>, StoreError> {
        self.engine.runs(&RunQuery::default())
    }

    /// The run with exactly this id, if stored.
    pub fn run_info(&self, run_id: &str) -> Result<Option<RunInfo>, StoreError> {
        Ok(self
            .engine
            .runs(&RunQuery {
                run_id: Some(run_id),
                ..RunQuery::default()
            })?
            .pop())
    }

    /// The records of one run in insertion order; `NotFound` if the run is not stored.
    pub fn run_records(&self, run_id: &str) -> Result<Vec<Record>, StoreError> {
        let records = self.engine.run_records(run_id)?;
        if records.is_empty() {
            return Err(StoreError::NotFound(format!(
                "store {}: no run `{run_id}` (see `tensorforge records list`)",
                self.describe()
            )));
        }
        Ok(records)
    }

    /// Resolve a run selector to a run. Selectors, tried in order:
    /// `latest` (newest run); `label:NAME=VALUE` (newest run whose label NAME is VALUE);
    /// an exact run id; a bare VALUE matching label `label` (newest such run); a unique
    /// run-id prefix. `machine_id` restricts `latest` and label selectors to that machine.
    pub fn find_run(
        &self,
        selector: &str,
        machine_id: Option<&str>,
    ) -> Result<RunInfo, StoreError> {
        let selector = selector.trim();
        let not_found = |what: String| {
            StoreError::NotFound(format!(
                "store {}: {what}{} (see `tensorforge records list`)",
                self.engine.describe(),
                machine_id
                    .map(|m| format!(" on machine {m}"))
                    .unwrap_or_default()
            ))
        };
        if selector.is_empty() {
            return Err(StoreError::invalid(
                "run selector",
                "run",
                "",
                "expected a run id, `latest`, `label:NAME=VALUE` or a label value",
            ));
        }
        let on_machine = |r: &RunInfo| machine_id.is_none_or(|m| r.machine_id == m);
        if selector == "latest" {
            return match machine_id {
                Some(m) => self.latest_run(m, None)?,
                None => self.list_runs()?.into_iter().next(),
            }
            .ok_or_else(|| not_found("no runs stored".into()));
        }
        if let Some(spec) = selector.strip_prefix("label:") {
            let Some((k, v)) = spec.split_once('=') else {
                return Err(StoreError::invalid(
                    "run selector",
                    "label",
                    selector,
                    "expected `label:NAME=VALUE`",
                ));
            };
            return self
                .list_runs()?
                .into_iter()
                .find(|r| on_machine(r) && r.labels.get(k).map(String::as_str) == Some(v))
                .ok_or_else(|| not_found(format!("no run with label {k}={v}")));
        }
        if let Some(r) = self.run_info(selector)? {
            return Ok(r);
        }
        let runs = self.list_runs()?;
        if let Some(r) = runs
            .iter()
            .find(|r| on_machine(r) && r.labels.get("label").map(String::as_str) == Some(selector))
        {
            return Ok(r.clone());
        }
        let prefixed: Vec<&RunInfo> = runs
            .iter()
            .filter(|r| r.run_id.starts_with(selector))
            .collect();
        match prefixed.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(not_found(format!(
                "no run matches `{selector}` (not a run id, run-id prefix or label value)"
            ))),
            many => Err(StoreError::invalid(
                "run selector",
                "run",
                selector,
                format!(
                    "ambiguous run-id prefix: matches {}",
                    many.iter()
                        .map(|r| r.run_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The newest `limit` runs on `machine_id` whose label `key` is `value`, newest first:
    /// the comparable history a run is gated against.
    pub fn recent_runs_with_label(
        &self,
        machine_id: &str,
        key: &str,
        value: &str,
        limit: usize,
    ) -> Result<Vec<RunInfo>, StoreError> {
        self.engine.runs(&RunQuery {
            machine_id: Some(machine_id),
            label: Some((key, value)),
            limit: Some(limit),
            ..RunQuery::default()
        })
    }

    /// The newest run recorded on `machine_id`, skipping `exclude_run` (e.g. the run just
    /// written, to gate it against the previous one). `None` when there is none.
    pub fn latest_run(
        &self,
        machine_id: &str,
        exclude_run: Option<&str>,
    ) -> Result<Option<RunInfo>, StoreError> {
        Ok(self
            .engine
            .runs(&RunQuery {
                machine_id: Some(machine_id),
                exclude_run,
                limit: Some(1),
                ..RunQuery::default()
            })?
            .pop())
    }

    /// Every stored record of one workload fingerprint (optionally on one machine), oldest
    /// first (by record timestamp, then insertion order).
    pub fn records_for_fingerprint(
        &self,
        fingerprint: &str,
        machine_id: Option<&str>,
    ) -> Result<Vec<Record>, StoreError> {
        self.engine.records_for_fingerprint(fingerprint, machine_id)
    }

    /// The history a run of one workload is gated against: the records of the newest
    /// `runs` distinct runs with this `fingerprint` on `machine_id` measured at `threads`
    /// threads, leaving out the runs in `exclude` (the candidate's own), oldest first.
    pub fn history_records(
        &self,
        fingerprint: &str,
        machine_id: &str,
        threads: u32,
        exclude: &[String],
        runs: usize,
    ) -> Result<Vec<Record>, StoreError> {
        self.engine
            .history_records(fingerprint, machine_id, threads, exclude, runs)
    }

    /// The stored fingerprints of workloads named `name` (or `name` itself when it is a
    /// stored fingerprint), in the order they were first stored.
    pub fn fingerprints_named(&self, name: &str) -> Result<Vec<String>, StoreError> {
        self.engine.fingerprints_named(name)
    }

    /// Store a device profile (TOML text plus provenance JSON) for `machine_id`.
    /// `profile_id` must be new, and the profile must pass [`check_profile`] (provenance
    /// that parses as JSON, no NUL character, the limits of
    /// [`tensorforge_record::limits`]).
    pub fn insert_profile(
        &self,
        profile_id: &str,
        machine_id: &str,
        toml_text: &str,
        provenance_json: &str,
    ) -> Result<(), StoreError> {
        let p = StoredProfile {
            profile_id: profile_id.to_string(),
            machine_id: machine_id.to_string(),
            created_unix_s: now_unix_s(),
            toml_text: toml_text.to_string(),
            provenance_json: provenance_json.to_string(),
        };
        check_profile(&p)?;
        if !self.engine.insert_profile(&p)? {
            return Err(StoreError::invalid(
                self.describe(),
                "profile_id",
                profile_id,
                "a profile with this id is already stored",
            ));
        }
        Ok(())
    }

    /// The newest profile stored for `machine_id` as `(profile_id, toml_text)`.
    pub fn latest_profile(&self, machine_id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .engine
            .latest_profile(machine_id)?
            .map(|p| (p.profile_id, p.toml_text)))
    }

    /// One profile by id as `(machine_id, toml_text, provenance_json)`.
    pub fn profile(
        &self,
        profile_id: &str,
    ) -> Result<Option<(String, String, String)>, StoreError> {
        Ok(self
            .engine
            .profile(profile_id)?
            .map(|p| (p.machine_id, p.toml_text, p.provenance_json)))
    }

    /// Every stored profile, oldest first.
    pub fn profiles(&self) -> Result<Vec<StoredProfile>, StoreError> {
        self.engine.profiles()
    }

    /// Copy every run and profile of this store into `dest` that `dest` does not hold yet,
    /// oldest first, 100 runs per destination transaction, and list what was refused.
    ///
    /// Each run is checked first as [`Store::insert_run`] checks it ([`check_run`]: the
    /// same limits for both engines); a run that fails is refused and listed in
    /// [`SyncReport::runs_refused`] with the reason, and the others are copied. A run id
    /// present on both sides with the same summary is skipped; with another summary it is
    /// compared record by record, and a different run under the same id is refused (the
    /// rest of its batch is then written run by run, so only that run is left out).
    /// Profiles likewise ([`check_profile`]; a different profile under the same id is
    /// refused). Idempotent and resumable: a second sync copies nothing and lists the same
    /// refusals, and one interrupted by an operational error (connection lost, store
    /// locked: returned as the error, since no run is to blame) keeps every finished batch,
    /// so a rerun copies only what is missing.
    ///
    /// [`check_run`]: crate::engine::check_run
    ///
    /// ```
    /// use std::path::Path;
    /// use tensorforge_store::Store;
    /// let dir = std::env::temp_dir().join(format!("tf-doc-{}", tensorforge_store::new_run_id()));
    /// let a = Store::open(&dir.join("a.sqlite")).unwrap();
    /// let b = Store::open(&dir.join("b.sqlite")).unwrap();
    /// let r = a.sync_to(&b).unwrap();
    /// assert_eq!((r.runs_copied, r.runs_already_present), (0, 0));
    /// assert!(r.runs_refused.is_empty());
    /// // A postgres:// URL selects the server engine; another scheme is an error naming it.
    /// let e = Store::open(Path::new("mysql://ci:pw@db/x")).unwrap_err().to_string();
    /// assert!(e.contains("mysql") && !e.contains(":pw@"));
    /// ```
    pub fn sync_to(&self, dest: &Store) -> Result<SyncReport, StoreError> {
        let mut report = SyncReport {
            schema_version: SYNC_SCHEMA_VERSION,
            from: self.describe(),
            to: dest.describe(),
            runs_copied: 0,
            runs_already_present: 0,
            records_copied: 0,
            profiles_copied: 0,
            profiles_already_present: 0,
            runs_refused: Vec::new(),
            profiles_refused: Vec::new(),
        };
        let there: BTreeMap<String, RunInfo> = dest
            .list_runs()?
            .into_iter()
            .map(|r| (r.run_id.clone(), r))
            .collect();
        let mut todo: Vec<RunInfo> = Vec::new();
        for r in self.list_runs()?.into_iter().rev() {
            match there.get(&r.run_id) {
                Some(d) if same_summary(d, &r) => report.runs_already_present += 1,
                _ => todo.push(r),
            }
        }
        let mut refusals: Vec<(usize, RefusedRun)> = Vec::new();
        for (b, batch) in todo.chunks(SYNC_BATCH_RUNS).enumerate() {
            let runs: Vec<Vec<Record>> = batch
                .iter()
                .map(|r| self.engine.run_records(&r.run_id))
                .collect::<Result<_, _>>()?;
            let mut valid: Vec<PreparedRun<'_>> = Vec::with_capacity(runs.len());
            for (i, (info, recs)) in batch.iter().zip(&runs).enumerate() {
                match prepare_run(recs) {
                    Ok(p) => valid.push(p),
                    Err(e) => refusals.push((b * SYNC_BATCH_RUNS + i, refused(&info.run_id, &e))),
                }
            }
            if valid.is_empty() {
                continue;
            }
            match dest.engine.write_runs(&valid, &mut |_| {}) {
                Ok(outcomes) => tally(&mut report, &outcomes, &valid),
                Err(e) if !is_per_run(&e) => return Err(e),
                // A run of the batch is to blame (a different run under its id): write the
                // batch run by run, so only that run is refused.
                Err(_) => {
                    for p in &valid {
                        match dest.engine.write_runs(std::slice::from_ref(p), &mut |_| {}) {
                            Ok(outcomes) => tally(&mut report, &outcomes, std::slice::from_ref(p)),
                            Err(e) if is_per_run(&e) => {
                                let at = todo
                                    .iter()
                                    .position(|r| r.run_id == p.info.run_id)
                                    .unwrap_or(usize::MAX);
                                refusals.push((at, refused(&p.info.run_id, &e)))
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
        refusals.sort_by_key(|(at, _)| *at);
        report.runs_refused = refusals.into_iter().map(|(_, r)| r).collect();
        for p in self.profiles()? {
            let refuse = |reason: String| RefusedProfile {
                profile_id: p.profile_id.clone(),
                reason,
            };
            if let Err(e) = check_profile(&p) {
                report.profiles_refused.push(refuse(e.to_string()));
                continue;
            }
            if dest.engine.insert_profile(&p)? {
                report.profiles_copied += 1;
                continue;
            }
            match dest.engine.profile(&p.profile_id)? {
                Some(d) if d.toml_text == p.toml_text && d.provenance_json == p.provenance_json => {
                    report.profiles_already_present += 1
                }
                _ => report.profiles_refused.push(refuse(
                    StoreError::invalid(
                        dest.describe(),
                        "profile_id",
                        shorten(&p.profile_id, SHORT_VALUE_CHARS),
                        "a different profile with this id is already stored; not copied",
                    )
                    .to_string(),
                )),
            }
        }
        Ok(report)
    }
}

/// A run refused by sync, with the error's one-line message as the reason.
fn refused(run_id: &str, e: &StoreError) -> RefusedRun {
    RefusedRun {
        run_id: run_id.to_string(),
        reason: e.to_string(),
    }
}

/// Whether an error writing runs is the fault of a run (invalid, or a different run under
/// its id) rather than operational (the database failed, the connection was lost, the
/// store is locked): only the first kind is refused per run; the second stops a sync.
fn is_per_run(e: &StoreError) -> bool {
    matches!(e, StoreError::InvalidField { .. } | StoreError::Record(_))
}

/// Count written runs into a sync report.
fn tally(report: &mut SyncReport, outcomes: &[InsertOutcome], runs: &[PreparedRun<'_>]) {
    for (o, p) in outcomes.iter().zip(runs) {
        match o.status {
            InsertStatus::Inserted => {
                report.runs_copied += 1;
                report.records_copied += p.records.len();
            }
            InsertStatus::AlreadyStored => report.runs_already_present += 1,
        }
    }
}

/// Whether two stores' summaries of one run agree on everything but when each store
/// received it.
fn same_summary(a: &RunInfo, b: &RunInfo) -> bool {
    RunInfo {
        inserted_unix_s: 0,
        ..a.clone()
    } == RunInfo {
        inserted_unix_s: 0,
        ..b.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_unique_and_sortable() {
        let ids: Vec<String> = (0..1000).map(|_| new_run_id()).collect();
        // Unique and, within a process, in creation order as plain strings.
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        let a = uuid::Uuid::parse_str(&ids[0]).unwrap();
        assert_eq!(a.get_version_num(), 7);
        assert_eq!(ids[0], a.hyphenated().to_string(), "lowercase, hyphenated");
        // The time prefix is now, to the millisecond (within a minute of the clock).
        let (secs, _) = a.get_timestamp().unwrap().to_unix();
        assert!((secs as i64 - crate::time::now_unix_s()).abs() < 60);
        // Safe in file names (temporary files are named after run ids).
        assert!(ids[0].bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'));
    }

    #[test]
    fn default_path_ends_in_sqlite_file() {
        let p = default_store_path();
        assert!(
            std::env::var_os("TENSORFORGE_STORE").is_some()
                || p.ends_with("tensorforge/tensorforge.sqlite"),
            "{}",
            p.display()
        );
    }
}
