//! The embedded SQLite engine: runs of records and calibrated device profiles in one file.
//!
//! Layout: a `runs` table (one row per run, with a JSON summary), a `records` table (the
//! whole record JSON in one column plus indexed `run_id`, `fingerprint`, `machine_id`,
//! `threads` and `timestamp_unix_s` columns) and a `profiles` table. The schema version lives in
//! `PRAGMA user_version` and every applied migration in `schema_migrations`. The store runs
//! in WAL mode with a 10 s busy timeout, so several processes may record at once; every
//! write is one `BEGIN IMMEDIATE` transaction, so a killed process leaves no partial run.
//! A file that is not a TensorForge store is reported and never overwritten. Left out:
//! deduplicating identical measurements under different run ids, garbage collection; records
//! read back are parsed but not re-validated (they were validated on the way in).

use crate::engine::{
    conflict, same_content, InsertOutcome, InsertStatus, PreparedRun, RunQuery, RunSummary,
    StoreEngine, StoredProfile,
};
use crate::error::StoreError;
use crate::record::Record;
use crate::store::RunInfo;
use crate::time::now_unix_s;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, ToSql};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Newest schema version this build writes and reads (`PRAGMA user_version`).
pub const SQLITE_SCHEMA_VERSION: i64 = 2;

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
    // 1 -> 2: the thread count as a column, so the gate's history is chosen on an index
    // instead of parsing every record of the workload.
    "ALTER TABLE records ADD COLUMN threads INTEGER;
     UPDATE records SET threads = json_extract(record_json, '$.harness.threads');
     CREATE INDEX records_history ON records (fingerprint, machine_id, threads, timestamp_unix_s);",
];

/// An open SQLite store (one connection). Open one per thread or process.
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteStore {
    /// Open (creating if needed) the store at `path`: creates parent directories, applies
    /// pending migrations, switches to WAL. A file that is not a TensorForge store, or one
    /// written by a newer schema, is an error and is left untouched.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let shown = path.display().to_string();
        let db_err = |message: String| StoreError::Database {
            store: shown.clone(),
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
            store: shown.clone(),
            message: "cannot open".into(),
            source: Some(e.into()),
        })?;
        let store = SqliteStore {
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
        if user_version > SQLITE_SCHEMA_VERSION {
            return Err(db_err(format!(
                "store schema version {user_version} is newer than this build reads ({SQLITE_SCHEMA_VERSION}); upgrade tensorforge"
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
            store: self.path.display().to_string(),
            message,
            source: Some(e.into()),
        }
    }

    fn corrupt(&self, what: &str, e: serde_json::Error) -> StoreError {
        StoreError::Database {
            store: self.path.display().to_string(),
            message: format!("{what} does not parse"),
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
        if self.schema_version()? == SQLITE_SCHEMA_VERSION {
            return Ok(());
        }
        self.write_tx("migrate schema", |c| {
            // Re-read under the write lock: another process may have migrated meanwhile.
            let mut v: i64 = c
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| self.err("read schema version", e))?;
            while v < SQLITE_SCHEMA_VERSION {
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

    /// Insert one prepared run inside the caller's transaction.
    fn write_run(
        &self,
        c: &Connection,
        run: &PreparedRun<'_>,
        hook: &mut dyn FnMut(usize),
    ) -> Result<InsertStatus, StoreError> {
        let info = &run.info;
        let exists: Option<i64> = c
            .query_row(
                "SELECT id FROM runs WHERE run_id = ?1",
                [&info.run_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err("look up run", e))?;
        if exists.is_some() {
            let stored = self.run_records(&info.run_id)?;
            return if same_content(&stored, &run.jsons) {
                Ok(InsertStatus::AlreadyStored)
            } else {
                Err(conflict(&self.describe(), &info.run_id))
            };
        }
        let summary_json = serde_json::to_string(&RunSummary::of(info)).unwrap_or_default();
        let labels_json = serde_json::to_string(&info.labels).unwrap_or_default();
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
                "INSERT INTO records (run_pk, run_id, fingerprint, machine_id, workload_name, timestamp_unix_s, record_json, threads)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(|e| self.err("prepare insert", e))?;
        for (i, (r, json)) in run.records.iter().zip(&run.jsons).enumerate() {
            stmt.execute(params![
                run_pk,
                r.run_id,
                r.fingerprint,
                r.device.machine_id,
                r.workload.name,
                r.timestamp_unix_s,
                json,
                i64::from(r.harness.threads)
            ])
            .map_err(|e| self.err("insert record", e))?;
            hook(i);
        }
        Ok(InsertStatus::Inserted)
    }

    fn query_records(&self, sql: &str, args: &[&dyn ToSql]) -> Result<Vec<Record>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(sql)
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

    fn profile_where(
        &self,
        where_sql: &str,
        args: &[&dyn ToSql],
    ) -> Result<Vec<StoredProfile>, StoreError> {
        let sql = format!(
            "SELECT profile_id, machine_id, created_unix_s, toml_text, provenance_json
             FROM profiles {where_sql}"
        );
        let mut stmt = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.err("read profiles", e))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok(StoredProfile {
                    profile_id: r.get(0)?,
                    machine_id: r.get(1)?,
                    created_unix_s: r.get(2)?,
                    toml_text: r.get(3)?,
                    provenance_json: r.get(4)?,
                })
            })
            .map_err(|e| self.err("read profiles", e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err("read profiles", e))
    }
}

impl StoreEngine for SqliteStore {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err("read user_version", e))
    }

    fn write_runs(
        &self,
        runs: &[PreparedRun<'_>],
        hook: &mut dyn FnMut(usize),
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        self.write_tx("insert runs", |c| {
            runs.iter()
                .map(|run| {
                    Ok(InsertOutcome {
                        run_id: run.info.run_id.clone(),
                        status: self.write_run(c, run, hook)?,
                    })
                })
                .collect()
        })
    }

    fn runs(&self, q: &RunQuery<'_>) -> Result<Vec<RunInfo>, StoreError> {
        let mut conds: Vec<&str> = Vec::new();
        let mut args: Vec<&dyn ToSql> = Vec::new();
        if let Some(id) = &q.run_id {
            conds.push("run_id = ?");
            args.push(id);
        }
        if let Some(m) = &q.machine_id {
            conds.push("machine_id = ?");
            args.push(m);
        }
        if let Some(x) = &q.exclude_run {
            conds.push("run_id <> ?");
            args.push(x);
        }
        if let Some((k, v)) = &q.label {
            conds.push(
                "EXISTS (SELECT 1 FROM json_each(runs.labels_json) AS l WHERE l.key = ? AND l.value = ?)",
            );
            args.push(k);
            args.push(v);
        }
        let limit = q.limit.map(|n| n.min(i64::MAX as usize) as i64);
        if let Some(n) = &limit {
            args.push(n);
        }
        let sql = format!(
            "SELECT run_id, created_unix_s, inserted_unix_s, machine_id, labels_json, record_count, summary_json
             FROM runs {}{} ORDER BY created_unix_s DESC, id DESC{}",
            if conds.is_empty() { "" } else { "WHERE " },
            conds.join(" AND "),
            if limit.is_some() { " LIMIT ?" } else { "" }
        );
        let mut stmt = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.err("list runs", e))?;
        let rows = stmt
            .query_map(args.as_slice(), |r| {
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
                Ok((info, r.get::<_, String>(4)?, r.get::<_, String>(6)?))
            })
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
            s.fill(&mut info);
            out.push(info);
        }
        Ok(out)
    }

    fn run_records(&self, run_id: &str) -> Result<Vec<Record>, StoreError> {
        self.query_records(
            "SELECT record_json FROM records WHERE run_id = ?1 ORDER BY id",
            &[&run_id],
        )
    }

    fn records_for_fingerprint(
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

    fn history_records(
        &self,
        fingerprint: &str,
        machine_id: &str,
        threads: u32,
        exclude: &[String],
        runs: usize,
    ) -> Result<Vec<Record>, StoreError> {
        // The newest `runs` runs by their newest matching record, chosen in SQL on the
        // history index (the exclusions as a JSON array); only their records are parsed.
        let exclude_json = serde_json::to_string(exclude).unwrap_or_else(|_| "[]".into());
        let limit = runs.min(i64::MAX as usize) as i64;
        self.query_records(
            "WITH matching AS (
                 SELECT id, run_id, timestamp_unix_s FROM records
                 WHERE fingerprint = ?1 AND machine_id = ?2
                   AND threads = ?3
                   AND run_id NOT IN (SELECT value FROM json_each(?4))
             ), newest AS (
                 SELECT run_id, timestamp_unix_s AS ts, id,
                        ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY timestamp_unix_s DESC, id DESC) AS rn
                 FROM matching
             ), chosen AS (
                 SELECT run_id FROM newest WHERE rn = 1 ORDER BY ts DESC, id DESC LIMIT ?5
             )
             SELECT record_json FROM records
             WHERE id IN (SELECT id FROM matching WHERE run_id IN (SELECT run_id FROM chosen))
             ORDER BY timestamp_unix_s, id",
            &[&fingerprint, &machine_id, &i64::from(threads), &exclude_json, &limit],
        )
    }

    fn fingerprints_named(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT fingerprint FROM records WHERE workload_name = ?1 OR fingerprint = ?1
                 GROUP BY fingerprint ORDER BY min(id)",
            )
            .map_err(|e| self.err("read fingerprints", e))?;
        let rows = stmt
            .query_map([name], |r| r.get::<_, String>(0))
            .map_err(|e| self.err("read fingerprints", e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err("read fingerprints", e))
    }

    fn insert_profile(&self, p: &StoredProfile) -> Result<bool, StoreError> {
        self.write_tx("insert profile", |c| {
            let n = c
                .execute(
                    "INSERT OR IGNORE INTO profiles (profile_id, machine_id, created_unix_s, toml_text, provenance_json)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![p.profile_id, p.machine_id, p.created_unix_s, p.toml_text, p.provenance_json],
                )
                .map_err(|e| self.err("insert profile", e))?;
            Ok(n == 1)
        })
    }

    fn latest_profile(&self, machine_id: &str) -> Result<Option<StoredProfile>, StoreError> {
        Ok(self
            .profile_where(
                "WHERE machine_id = ?1 ORDER BY created_unix_s DESC, id DESC LIMIT 1",
                &[&machine_id],
            )?
            .pop())
    }

    fn profile(&self, profile_id: &str) -> Result<Option<StoredProfile>, StoreError> {
        Ok(self
            .profile_where("WHERE profile_id = ?1", &[&profile_id])?
            .pop())
    }

    fn profiles(&self) -> Result<Vec<StoredProfile>, StoreError> {
        self.profile_where("ORDER BY created_unix_s, id", &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::new_run_id;

    #[test]
    fn a_version_1_store_migrates_and_keeps_its_history() {
        let dir = std::env::temp_dir().join(format!("tf-sqlite-v1-{}", new_run_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v1.sqlite");
        let rec = crate::testing::record("old-run", 64, "m", 5, 1, None);
        {
            // A store as the version-1 build wrote it: no threads column.
            let c = Connection::open(&path).unwrap();
            c.execute_batch(MIGRATIONS[0]).unwrap();
            c.execute_batch(&format!(
                "INSERT INTO schema_migrations VALUES (1, 5);
                 PRAGMA user_version = 1; PRAGMA application_id = {APPLICATION_ID};"
            ))
            .unwrap();
            c.execute(
                "INSERT INTO runs (run_id, created_unix_s, inserted_unix_s, machine_id, labels_json, record_count, summary_json)
                 VALUES ('old-run', 5, 5, 'm', '{}', 1, '{\"sample_count\":3,\"sources\":[],\"device_kinds\":[],\"workloads\":[]}')",
                [],
            )
            .unwrap();
            c.execute(
                "INSERT INTO records (run_pk, run_id, fingerprint, machine_id, workload_name, timestamp_unix_s, record_json)
                 VALUES (1, 'old-run', ?1, 'm', 'g64', 5, ?2)",
                params![rec.fingerprint, serde_json::to_string(&rec).unwrap()],
            )
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), 2);
        // The backfilled column selects the old record by its thread count.
        let t = rec.harness.threads;
        let h = s.history_records(&rec.fingerprint, "m", t, &[], 5).unwrap();
        assert_eq!(h, vec![rec.clone()]);
        assert!(s
            .history_records(&rec.fingerprint, "m", t + 1, &[], 5)
            .unwrap()
            .is_empty());
        let applied: i64 = s
            .conn
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(applied, 2);
    }

    #[test]
    fn foreign_sqlite_databases_are_refused_and_untouched() {
        let dir = std::env::temp_dir().join(format!("tf-sqlite-unit-{}", new_run_id()));
        std::fs::create_dir_all(&dir).unwrap();
        // An SQLite database of another application.
        let other = dir.join("other.sqlite");
        {
            let c = Connection::open(&other).unwrap();
            c.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
                .unwrap();
        }
        let before = std::fs::read(&other).unwrap();
        let e = SqliteStore::open(&other).unwrap_err().to_string();
        assert!(
            e.contains("not a TensorForge store") && e.contains("other.sqlite"),
            "{e}"
        );
        assert_eq!(std::fs::read(&other).unwrap(), before);
    }
}
