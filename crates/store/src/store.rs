//! The embedded SQLite store: runs of records and calibrated device profiles in one file.
//!
//! Layout: a `runs` table (one row per run, with a JSON summary), a `records` table (the
//! whole record JSON in one column plus indexed `run_id`, `fingerprint`, `machine_id` and
//! `timestamp_unix_s` columns) and a `profiles` table. The schema version lives in
//! `PRAGMA user_version` and every applied migration in `schema_migrations`. The store runs
//! in WAL mode with a 10 s busy timeout, so several processes may record at once; every
//! write is one `BEGIN IMMEDIATE` transaction, so a killed process leaves no partial run.
//! A file that is not a TensorForge store is reported and never overwritten. The store
//! does not deduplicate identical measurements, garbage-collect old runs or merge stores;
//! records read back are parsed but not re-validated (they were validated on the way in).

use crate::error::StoreError;
use crate::location::StoreLocation;
use crate::record::Record;
use crate::time::now_unix_s;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Newest schema version this build writes and reads (`PRAGMA user_version`).
pub const STORE_SCHEMA_VERSION: i64 = 1;

/// `PRAGMA application_id` of a TensorForge store ("TFST").
const APPLICATION_ID: i64 = 0x5446_5354;

/// How long a writer waits for another process's lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Migrations in order; entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1
    "CREATE TABLE schema_migrations (
         version INTEGER PRIMARY KEY,
         applied_unix_s INTEGER NOT NULL
     );
     CREATE TABLE runs (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         run_id TEXT NOT NULL UNIQUE,
         created_unix_s INTEGER NOT NULL,
         inserted_unix_s INTEGER NOT NULL,
         machine_id TEXT NOT NULL,
         labels_json TEXT NOT NULL,
         record_count INTEGER NOT NULL,
         summary_json TEXT NOT NULL
     );
     CREATE INDEX runs_machine ON runs (machine_id, created_unix_s);
     CREATE TABLE records (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         run_pk INTEGER NOT NULL REFERENCES runs (id),
         run_id TEXT NOT NULL,
         fingerprint TEXT NOT NULL,
         machine_id TEXT NOT NULL,
         workload_name TEXT NOT NULL,
         timestamp_unix_s INTEGER NOT NULL,
         record_json TEXT NOT NULL
     );
     CREATE INDEX records_run ON records (run_id);
     CREATE INDEX records_fp ON records (fingerprint, machine_id, timestamp_unix_s);
     CREATE TABLE profiles (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         profile_id TEXT NOT NULL UNIQUE,
         machine_id TEXT NOT NULL,
         created_unix_s INTEGER NOT NULL,
         toml_text TEXT NOT NULL,
         provenance_json TEXT NOT NULL
     );
     CREATE INDEX profiles_machine ON profiles (machine_id, created_unix_s);",
];

/// The store path used when none is given: `$TENSORFORGE_STORE` if set and non-empty, else
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

/// The part of [`RunInfo`] kept as JSON in the `runs` table.
#[derive(Serialize, Deserialize)]
struct RunSummary {
    sample_count: usize,
    sources: Vec<String>,
    device_kinds: Vec<String>,
    workloads: Vec<RunWorkload>,
}

/// An open store (one SQLite connection). Open one per thread or process.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (creating if needed) the store at `path`: creates parent directories, applies
    /// pending migrations, switches to WAL. A file that is not a TensorForge store, or one
    /// written by a newer schema, is an error and is left untouched.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        // A URL is not a file name: refuse what this build cannot open rather than create a
        // local file named after it (credentials redacted in the message).
        if let Some(text) = path.to_str().filter(|t| t.contains("://")) {
            if let StoreLocation::Postgres(url) = StoreLocation::parse(text)? {
                return Err(StoreError::invalid(
                    url.to_string(),
                    "store",
                    "postgres",
                    "PostgreSQL stores are not available in this build yet; nothing was recorded (give a SQLite file path)",
                ));
            }
        }
        let shown = path.display().to_string();
        let db_err = |message: String| StoreError::Database {
            path: shown.clone(),
            message,
            source: None,
        };
        if path.is_dir() {
            return Err(db_err("is a directory, expected a store file".into()));
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Io {
                path: parent.display().to_string(),
                message: "cannot create store directory".into(),
                source: Some(e.into()),
            })?;
        }
        let conn = Connection::open(path).map_err(|e| StoreError::Database {
            path: shown.clone(),
            message: "cannot open".into(),
            source: Some(e.into()),
        })?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store
            .conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| store.err("set busy_timeout", e))?;
        // The first read of the header: fails on a non-SQLite file before anything is written.
        let (user_version, app_id, tables) = store.read_header()?;
        if app_id != 0 && app_id != APPLICATION_ID {
            return Err(db_err(format!(
                "not a TensorForge store (SQLite application_id {app_id:#x}); the file was left untouched"
            )));
        }
        if user_version == 0 && tables > 0 && app_id != APPLICATION_ID {
            return Err(db_err(format!(
                "not a TensorForge store (an SQLite database with {tables} unrelated table(s)); the file was left untouched"
            )));
        }
        if user_version > STORE_SCHEMA_VERSION {
            return Err(db_err(format!(
                "store schema version {user_version} is newer than this build reads ({STORE_SCHEMA_VERSION}); upgrade tensorforge"
            )));
        }
        store.enable_wal()?;
        store
            .conn
            .execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(|e| store.err("set pragmas", e))?;
        store.migrate()?;
        Ok(store)
    }

    /// The path this store was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open store (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err("read user_version", e))
    }

    fn err(&self, what: &str, e: rusqlite::Error) -> StoreError {
        let message = match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => {
                "not a TensorForge store (not an SQLite database, or corrupt; the file was left untouched)".to_string()
            }
            Some(ErrorCode::DatabaseCorrupt) => {
                format!("the store file is corrupt ({what})")
            }
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => format!(
                "{what}: store is locked by another process for more than {} s",
                BUSY_TIMEOUT.as_secs()
            ),
            _ => what.to_string(),
        };
        StoreError::Database {
            path: self.path.display().to_string(),
            message,
            source: Some(e.into()),
        }
    }

    /// Switch to WAL (persistent in the file). SQLite does not always call the busy handler
    /// for this pragma while another process is converting the same file, so retry on
    /// "locked" until [`BUSY_TIMEOUT`].
    fn enable_wal(&self) -> Result<(), StoreError> {
        let start = std::time::Instant::now();
        loop {
            let r = self
                .conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0));
            match r {
                Ok(_) => return Ok(()),
                Err(e)
                    if start.elapsed() < BUSY_TIMEOUT
                        && e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(self.err("set WAL journal mode", e)),
            }
        }
    }

    fn read_header(&self) -> Result<(i64, i64, i64), StoreError> {
        // One read transaction, so the three values come from one snapshot: another process
        // may be committing the first migration (tables, user_version and application_id
        // together) between the reads, and a torn view would look like a foreign database.
        self.conn
            .execute_batch("BEGIN DEFERRED")
            .map_err(|e| self.err("read store header", e))?;
        let read = || -> Result<(i64, i64, i64), StoreError> {
            let uv: i64 = self
                .conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| self.err("read schema version", e))?;
            let app: i64 = self
                .conn
                .query_row("PRAGMA application_id", [], |r| r.get(0))
                .map_err(|e| self.err("read application_id", e))?;
            let tables: i64 = self
                .conn
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| self.err("read table list", e))?;
            Ok((uv, app, tables))
        };
        let out = read();
        // A read-only transaction: ending it cannot lose anything.
        let _ = self.conn.execute_batch("COMMIT");
        out
    }

    /// Run `f` inside `BEGIN IMMEDIATE ... COMMIT`, rolling back on any error.
    fn write_tx<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.err(what, e))?;
        match f(&self.conn) {
            Ok(v) => match self.conn.execute_batch("COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    Err(self.err(what, e))
                }
            },
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn migrate(&self) -> Result<(), StoreError> {
        if self.schema_version()? == STORE_SCHEMA_VERSION {
            return Ok(());
        }
        self.write_tx("migrate schema", |c| {
            // Re-read under the write lock: another process may have migrated meanwhile.
            let mut v: i64 = c
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| self.err("read schema version", e))?;
            while v < STORE_SCHEMA_VERSION {
                c.execute_batch(MIGRATIONS[v as usize])
                    .map_err(|e| self.err(&format!("migration {v} -> {}", v + 1), e))?;
                v += 1;
                c.execute(
                    "INSERT INTO schema_migrations (version, applied_unix_s) VALUES (?1, ?2)",
                    params![v, now_unix_s()],
                )
                .map_err(|e| self.err("record migration", e))?;
                c.execute_batch(&format!(
                    "PRAGMA user_version = {v}; PRAGMA application_id = {APPLICATION_ID};"
                ))
                .map_err(|e| self.err("set schema version", e))?;
            }
            Ok(())
        })
    }

    /// Validate `records` and write them as one run in one transaction; returns the run id.
    /// All records must share one non-empty `run_id` and one `device.machine_id`, and the
    /// run id must not already be stored.
    pub fn insert_run(&self, records: &[Record]) -> Result<String, StoreError> {
        self.insert_run_with_hook(records, |_| {})
    }

    /// [`Store::insert_run`] calling `hook(i)` after record `i` is written, inside the
    /// transaction (used by tests that kill a writer mid-run).
    #[doc(hidden)]
    pub fn insert_run_with_hook(
        &self,
        records: &[Record],
        mut hook: impl FnMut(usize),
    ) -> Result<String, StoreError> {
        let prepared = prepare_run(records)?;
        self.write_tx("insert run", |c| {
            self.write_run(c, records, &prepared, &mut hook)
        })?;
        Ok(prepared.0.run_id)
    }

    /// Write several runs (e.g. an imported file) in ONE transaction: every run is
    /// validated first, and either all are stored or none. Returns the run ids in order.
    pub fn insert_runs(&self, runs: &[Vec<Record>]) -> Result<Vec<String>, StoreError> {
        let mut prepared = Vec::with_capacity(runs.len());
        let mut seen = std::collections::BTreeSet::new();
        for recs in runs {
            let p = prepare_run(recs)?;
            if !seen.insert(p.0.run_id.clone()) {
                return Err(StoreError::invalid(
                    "runs",
                    "run_id",
                    p.0.run_id.clone(),
                    "the same run id appears in two runs",
                ));
            }
            prepared.push(p);
        }
        self.write_tx("insert runs", |c| {
            for (recs, p) in runs.iter().zip(&prepared) {
                self.write_run(c, recs, p, &mut |_| {})?;
            }
            Ok(())
        })?;
        Ok(prepared.into_iter().map(|p| p.0.run_id).collect())
    }

    /// Insert one prepared run inside the caller's transaction.
    fn write_run(
        &self,
        c: &Connection,
        records: &[Record],
        (info, jsons): &(RunInfo, Vec<String>),
        hook: &mut dyn FnMut(usize),
    ) -> Result<(), StoreError> {
        let summary = RunSummary {
            sample_count: info.sample_count,
            sources: info.sources.clone(),
            device_kinds: info.device_kinds.clone(),
            workloads: info.workloads.clone(),
        };
        let summary_json = serde_json::to_string(&summary).unwrap_or_default();
        let labels_json = serde_json::to_string(&info.labels).unwrap_or_default();
        let exists: Option<i64> = c
            .query_row(
                "SELECT id FROM runs WHERE run_id = ?1",
                [&info.run_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err("look up run", e))?;
        if exists.is_some() {
            return Err(StoreError::invalid(
                self.path.display().to_string(),
                "run_id",
                info.run_id.clone(),
                "a run with this id is already stored",
            ));
        }
        c.execute(
            "INSERT INTO runs (run_id, created_unix_s, inserted_unix_s, machine_id, labels_json, record_count, summary_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                info.run_id,
                info.created_unix_s,
                info.inserted_unix_s,
                info.machine_id,
                labels_json,
                info.record_count as i64,
                summary_json
            ],
        )
        .map_err(|e| self.err("insert run", e))?;
        let run_pk = c.last_insert_rowid();
        let mut stmt = c
            .prepare_cached(
                "INSERT INTO records (run_pk, run_id, fingerprint, machine_id, workload_name, timestamp_unix_s, record_json)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .map_err(|e| self.err("prepare insert", e))?;
        for (i, (r, json)) in records.iter().zip(jsons).enumerate() {
            stmt.execute(params![
                run_pk,
                r.run_id,
                r.fingerprint,
                r.device.machine_id,
                r.workload.name,
                r.timestamp_unix_s,
                json
            ])
            .map_err(|e| self.err("insert record", e))?;
            hook(i);
        }
        Ok(())
    }

    fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(RunInfo, String, String)> {
        let info = RunInfo {
            run_id: r.get(0)?,
            created_unix_s: r.get(1)?,
            inserted_unix_s: r.get(2)?,
            machine_id: r.get(3)?,
            labels: BTreeMap::new(),
            record_count: r.get::<_, i64>(5)? as usize,
            sample_count: 0,
            sources: Vec::new(),
            device_kinds: Vec::new(),
            workloads: Vec::new(),
        };
        Ok((info, r.get(4)?, r.get(6)?))
    }

    fn query_runs(
        &self,
        where_sql: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<RunInfo>, StoreError> {
        let sql = format!(
            "SELECT run_id, created_unix_s, inserted_unix_s, machine_id, labels_json, record_count, summary_json
             FROM runs {where_sql} ORDER BY created_unix_s DESC, id DESC"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(|e| self.err("list runs", e))?;
        let rows = stmt
            .query_map(args, Self::run_from_row)
            .map_err(|e| self.err("list runs", e))?;
        let mut out = Vec::new();
        for row in rows {
            let (mut info, labels_json, summary_json) =
                row.map_err(|e| self.err("list runs", e))?;
            info.labels = serde_json::from_str(&labels_json).map_err(|e| {
                self.corrupt(&format!("runs.labels_json of run {}", info.run_id), e)
            })?;
            let s: RunSummary = serde_json::from_str(&summary_json).map_err(|e| {
                self.corrupt(&format!("runs.summary_json of run {}", info.run_id), e)
            })?;
            info.sample_count = s.sample_count;
            info.sources = s.sources;
            info.device_kinds = s.device_kinds;
            info.workloads = s.workloads;
            out.push(info);
        }
        Ok(out)
    }

    fn corrupt(&self, what: &str, e: serde_json::Error) -> StoreError {
        StoreError::Database {
            path: self.path.display().to_string(),
            message: format!("{what} does not parse"),
            source: Some(e.into()),
        }
    }

    /// All runs, newest first (by record time, then insertion order).
    pub fn list_runs(&self) -> Result<Vec<RunInfo>, StoreError> {
        self.query_runs("", &[])
    }

    /// The run with exactly this id, if stored.
    pub fn run_info(&self, run_id: &str) -> Result<Option<RunInfo>, StoreError> {
        Ok(self
            .query_runs("WHERE run_id = ?1", &[&run_id])?
            .into_iter()
            .next())
    }

    /// The records of one run in insertion order; `NotFound` if the run is not stored.
    pub fn run_records(&self, run_id: &str) -> Result<Vec<Record>, StoreError> {
        if self.run_info(run_id)?.is_none() {
            return Err(StoreError::NotFound(format!(
                "store {}: no run `{run_id}` (see `tensorforge records list`)",
                self.path.display()
            )));
        }
        self.query_records(
            "SELECT record_json FROM records WHERE run_id = ?1 ORDER BY id",
            &[&run_id],
        )
    }

    fn query_records(
        &self,
        sql: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Record>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(sql)
            .map_err(|e| self.err("read records", e))?;
        let rows = stmt
            .query_map(args, |r| r.get::<_, String>(0))
            .map_err(|e| self.err("read records", e))?;
        let mut out = Vec::new();
        for row in rows {
            let json = row.map_err(|e| self.err("read records", e))?;
            let rec: Record =
                serde_json::from_str(&json).map_err(|e| self.corrupt("records.record_json", e))?;
            out.push(rec);
        }
        Ok(out)
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
                self.path.display(),
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
        Ok(self
            .query_runs("WHERE machine_id = ?1", &[&machine_id])?
            .into_iter()
            .filter(|r| r.labels.get(key).map(String::as_str) == Some(value))
            .take(limit)
            .collect())
    }

    /// The newest run recorded on `machine_id`, skipping `exclude_run` (e.g. the run just
    /// written, to gate it against the previous one). `None` when there is none.
    pub fn latest_run(
        &self,
        machine_id: &str,
        exclude_run: Option<&str>,
    ) -> Result<Option<RunInfo>, StoreError> {
        let exclude = exclude_run.unwrap_or("");
        Ok(self
            .query_runs(
                "WHERE machine_id = ?1 AND run_id <> ?2",
                &[&machine_id, &exclude],
            )?
            .into_iter()
            .next())
    }

    /// Every stored record of one workload fingerprint (optionally on one machine), oldest
    /// first (by record timestamp, then insertion order).
    pub fn records_for_fingerprint(
        &self,
        fingerprint: &str,
        machine_id: Option<&str>,
    ) -> Result<Vec<Record>, StoreError> {
        match machine_id {
            Some(m) => self.query_records(
                "SELECT record_json FROM records WHERE fingerprint = ?1 AND machine_id = ?2
                 ORDER BY timestamp_unix_s, id",
                &[&fingerprint, &m],
            ),
            None => self.query_records(
                "SELECT record_json FROM records WHERE fingerprint = ?1 ORDER BY timestamp_unix_s, id",
                &[&fingerprint],
            ),
        }
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
        let all = self.records_for_fingerprint(fingerprint, Some(machine_id))?;
        let mut keep: Vec<String> = Vec::new();
        for r in all.iter().rev() {
            if r.harness.threads != threads || exclude.contains(&r.run_id) {
                continue;
            }
            if !keep.contains(&r.run_id) {
                if keep.len() == runs {
                    break;
                }
                keep.push(r.run_id.clone());
            }
        }
        Ok(all
            .into_iter()
            .filter(|r| keep.contains(&r.run_id) && r.harness.threads == threads)
            .collect())
    }

    /// Store a device profile (TOML text plus provenance JSON) for `machine_id`.
    /// `profile_id` must be new and `provenance_json` must parse as JSON.
    pub fn insert_profile(
        &self,
        profile_id: &str,
        machine_id: &str,
        toml_text: &str,
        provenance_json: &str,
    ) -> Result<(), StoreError> {
        if profile_id.trim().is_empty() {
            return Err(StoreError::invalid(
                "profile",
                "profile_id",
                profile_id,
                "must not be empty",
            ));
        }
        if let Err(e) = serde_json::from_str::<serde_json::Value>(provenance_json) {
            return Err(StoreError::invalid(
                format!("profile {profile_id}"),
                "provenance_json",
                provenance_json.chars().take(60).collect::<String>(),
                format!("not JSON: {e}"),
            ));
        }
        self.write_tx("insert profile", |c| {
            let n = c
                .execute(
                    "INSERT OR IGNORE INTO profiles (profile_id, machine_id, created_unix_s, toml_text, provenance_json)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![profile_id, machine_id, now_unix_s(), toml_text, provenance_json],
                )
                .map_err(|e| self.err("insert profile", e))?;
            if n == 0 {
                return Err(StoreError::invalid(
                    self.path.display().to_string(),
                    "profile_id",
                    profile_id,
                    "a profile with this id is already stored",
                ));
            }
            Ok(())
        })
    }

    /// The newest profile stored for `machine_id` as `(profile_id, toml_text)`.
    pub fn latest_profile(&self, machine_id: &str) -> Result<Option<(String, String)>, StoreError> {
        self.conn
            .query_row(
                "SELECT profile_id, toml_text FROM profiles WHERE machine_id = ?1
                 ORDER BY created_unix_s DESC, id DESC LIMIT 1",
                [machine_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err("read profile", e))
    }

    /// One profile by id as `(machine_id, toml_text, provenance_json)`.
    pub fn profile(
        &self,
        profile_id: &str,
    ) -> Result<Option<(String, String, String)>, StoreError> {
        self.conn
            .query_row(
                "SELECT machine_id, toml_text, provenance_json FROM profiles WHERE profile_id = ?1",
                [profile_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| self.err("read profile", e))
    }
}

/// Validate a run's records and build its summary and the JSON of each record.
fn prepare_run(records: &[Record]) -> Result<(RunInfo, Vec<String>), StoreError> {
    let Some(first) = records.first() else {
        return Err(StoreError::invalid(
            "run",
            "records",
            "[]",
            "a run needs at least one record",
        ));
    };
    let run_id = first.run_id.clone();
    if run_id.trim().is_empty() {
        return Err(StoreError::invalid(
            &first.workload.name,
            "run_id",
            &run_id,
            "must not be empty",
        ));
    }
    let machine_id = first.device.machine_id.clone();
    let mut labels = first.labels.clone();
    let mut sources: Vec<String> = Vec::new();
    let mut device_kinds: Vec<String> = Vec::new();
    let mut workloads = Vec::with_capacity(records.len());
    let mut jsons = Vec::with_capacity(records.len());
    let mut sample_count = 0;
    let mut created = i64::MIN;
    for (i, r) in records.iter().enumerate() {
        let at = format!("record {i} (workload `{}`)", r.workload.name);
        r.validate().map_err(|e| match e {
            StoreError::InvalidField {
                field,
                value,
                reason,
                ..
            } => StoreError::invalid(&at, field, value, reason),
            other => other,
        })?;
        if r.run_id != run_id {
            return Err(StoreError::invalid(
                at,
                "run_id",
                &r.run_id,
                format!("all records of a run must share one run_id (record 0 has `{run_id}`)"),
            ));
        }
        if r.device.machine_id != machine_id {
            return Err(StoreError::invalid(
                at,
                "device.machine_id",
                &r.device.machine_id,
                format!(
                    "all records of a run must come from one machine (record 0 has `{machine_id}`)"
                ),
            ));
        }
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
            StoreError::invalid(at, "record", "…", format!("cannot serialize: {e}"))
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
    Ok((info, jsons))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::{DeviceContext, HarnessSettings, SoftwareContext, WorkloadIdentity};

    pub(crate) fn rec(run: &str, m: u64, machine: &str, ts: i64, label: Option<&str>) -> Record {
        let mut params = BTreeMap::new();
        params.insert("m".into(), serde_json::json!(m));
        let mut labels = BTreeMap::new();
        if let Some(l) = label {
            labels.insert("label".to_string(), l.to_string());
        }
        Record::new(crate::record::RecordParts {
            run_id: run.into(),
            workload: WorkloadIdentity {
                kind: "gemm".into(),
                name: format!("g{m}"),
                params,
                dtype: "f32".into(),
            },
            device: DeviceContext {
                kind: "cpu".into(),
                machine_id: machine.into(),
                ..Default::default()
            },
            software: SoftwareContext::default(),
            harness: HarnessSettings::default(),
            samples_ns: vec![10.0 + m as f64, 20.0, 30.0],
            flops: None,
            bytes: None,
            peak_alloc_bytes: None,
            timestamp_unix_s: ts,
            labels,
            source: "harness".into(),
        })
        .unwrap()
    }

    fn tmp_store(name: &str) -> (PathBuf, Store) {
        let dir = std::env::temp_dir().join(format!("tf-store-unit-{}-{name}", new_run_id()));
        let path = dir.join("s.sqlite");
        let s = Store::open(&path).unwrap();
        (path, s)
    }

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

    #[test]
    fn round_trip_and_selectors() {
        let (_p, s) = tmp_store("rt");
        assert_eq!(s.schema_version().unwrap(), STORE_SCHEMA_VERSION);
        let r1 = vec![
            rec("run-a", 1, "mach1", 100, Some("base")),
            rec("run-a", 2, "mach1", 101, Some("base")),
        ];
        let r2 = vec![rec("run-b", 1, "mach1", 200, Some("cand"))];
        let r3 = vec![rec("run-c", 1, "mach2", 300, None)];
        assert_eq!(s.insert_run(&r1).unwrap(), "run-a");
        s.insert_run(&r2).unwrap();
        s.insert_run(&r3).unwrap();
        assert_eq!(s.run_records("run-a").unwrap(), r1);
        let runs = s.list_runs().unwrap();
        let ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["run-c", "run-b", "run-a"]);
        assert_eq!(runs[2].record_count, 2);
        assert_eq!(runs[2].sample_count, 6);
        assert_eq!(runs[2].created_unix_s, 101);
        assert_eq!(runs[2].labels.get("label").unwrap(), "base");
        assert_eq!(runs[2].workloads[1].name, "g2");
        assert_eq!(s.find_run("latest", None).unwrap().run_id, "run-c");
        assert_eq!(s.find_run("latest", Some("mach1")).unwrap().run_id, "run-b");
        assert_eq!(s.find_run("base", None).unwrap().run_id, "run-a");
        assert_eq!(
            s.find_run("label:label=cand", None).unwrap().run_id,
            "run-b"
        );
        assert_eq!(s.find_run("run-b", None).unwrap().run_id, "run-b");
        assert!(s
            .find_run("run-", None)
            .unwrap_err()
            .to_string()
            .contains("ambiguous"));
        assert!(matches!(
            s.find_run("nope", None),
            Err(StoreError::NotFound(_))
        ));
        assert!(s.find_run("latest", Some("mach9")).is_err());
        assert_eq!(
            s.latest_run("mach1", Some("run-b"))
                .unwrap()
                .unwrap()
                .run_id,
            "run-a"
        );
        assert!(s.latest_run("mach9", None).unwrap().is_none());
        let fp = r1[0].fingerprint.clone();
        let hist = s.records_for_fingerprint(&fp, None).unwrap();
        assert_eq!(
            hist.iter().map(|r| r.timestamp_unix_s).collect::<Vec<_>>(),
            [100, 200, 300]
        );
        assert_eq!(
            s.records_for_fingerprint(&fp, Some("mach2")).unwrap().len(),
            1
        );
        assert!(matches!(
            s.run_records("nope"),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn bad_runs_write_nothing() {
        let (_p, s) = tmp_store("bad");
        assert!(s.insert_run(&[]).is_err());
        let mixed = vec![rec("a", 1, "m", 1, None), rec("b", 2, "m", 1, None)];
        let e = s.insert_run(&mixed).unwrap_err().to_string();
        assert!(e.contains("run_id") && e.contains("`b`"), "{e}");
        let machines = vec![rec("a", 1, "m", 1, None), rec("a", 2, "n", 1, None)];
        assert!(s
            .insert_run(&machines)
            .unwrap_err()
            .to_string()
            .contains("machine_id"));
        let mut tampered = vec![rec("a", 1, "m", 1, None), rec("a", 2, "m", 1, None)];
        tampered[1].fingerprint = "00".into();
        let e = s.insert_run(&tampered).unwrap_err().to_string();
        assert!(e.contains("record 1") && e.contains("fingerprint"), "{e}");
        assert!(s.list_runs().unwrap().is_empty());
        s.insert_run(&[rec("a", 1, "m", 1, None)]).unwrap();
        let e = s
            .insert_run(&[rec("a", 1, "m", 1, None)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("already stored"), "{e}");
        assert_eq!(s.list_runs().unwrap().len(), 1);
    }

    #[test]
    fn insert_runs_is_all_or_nothing() {
        let (_p, s) = tmp_store("many");
        s.insert_run(&[rec("old", 1, "m", 1, None)]).unwrap();
        let ok = vec![
            vec![rec("x", 1, "m", 2, None)],
            vec![rec("y", 1, "m", 3, None)],
        ];
        let clash = vec![
            vec![rec("z", 1, "m", 2, None)],
            vec![rec("old", 1, "m", 3, None)],
        ];
        let e = s.insert_runs(&clash).unwrap_err().to_string();
        assert!(e.contains("old") && e.contains("already stored"), "{e}");
        assert_eq!(
            s.list_runs().unwrap().len(),
            1,
            "the first run of a failed batch leaked"
        );
        assert_eq!(s.insert_runs(&ok).unwrap(), ["x", "y"]);
        assert_eq!(s.list_runs().unwrap().len(), 3);
        let dup = vec![
            vec![rec("w", 1, "m", 2, None)],
            vec![rec("w", 2, "m", 3, None)],
        ];
        assert!(s.insert_runs(&dup).is_err());
    }

    #[test]
    fn profiles() {
        let (_p, s) = tmp_store("prof");
        assert!(s.latest_profile("m").unwrap().is_none());
        s.insert_profile("p1", "m", "a = 1", "{}").unwrap();
        s.insert_profile("p2", "m", "a = 2", "{\"x\":1}").unwrap();
        s.insert_profile("p3", "other", "a = 3", "{}").unwrap();
        assert_eq!(
            s.latest_profile("m").unwrap().unwrap(),
            ("p2".to_string(), "a = 2".to_string())
        );
        assert!(s
            .insert_profile("p1", "m", "", "{}")
            .unwrap_err()
            .to_string()
            .contains("already"));
        assert!(s
            .insert_profile("p4", "m", "", "not json")
            .unwrap_err()
            .to_string()
            .contains("provenance_json"));
        assert_eq!(s.profile("p3").unwrap().unwrap().0, "other");
    }

    #[test]
    fn reopen_keeps_data_and_foreign_files_are_refused() {
        let (p, s) = tmp_store("reopen");
        s.insert_run(&[rec("a", 1, "m", 1, None)]).unwrap();
        drop(s);
        let s = Store::open(&p).unwrap();
        assert_eq!(s.list_runs().unwrap().len(), 1);
        // An SQLite database of another application.
        let other = p.with_file_name("other.sqlite");
        {
            let c = Connection::open(&other).unwrap();
            c.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
                .unwrap();
        }
        let before = std::fs::read(&other).unwrap();
        let e = Store::open(&other).unwrap_err().to_string();
        assert!(
            e.contains("not a TensorForge store") && e.contains("other.sqlite"),
            "{e}"
        );
        assert_eq!(std::fs::read(&other).unwrap(), before);
    }
}
