//! The PostgreSQL engine: a team's shared store on a database server, written by many CI
//! machines at once, through the synchronous `postgres` client and plain SQL.
//!
//! Layout, all in the schema `tensorforge`: `store_meta` (one row: application name and
//! schema version), `schema_migrations`, `runs` (one row per run; labels as `jsonb`, the
//! summary as JSON text), `records` (each record's JSON without its samples, plus the samples
//! as a `bytea` of little-endian f64s and indexed `fingerprint`, `machine_id`, `threads`,
//! `timestamp_unix_s` and `workload_name` columns) and `profiles`. Migrations run in one
//! transaction under an advisory lock, so concurrent first opens create the schema once. A
//! database holding tables of another application is refused and left untouched, as is a
//! store written by a newer schema.
//!
//! Concurrency: every write is one transaction at READ COMMITTED. A run id is unique;
//! inserting it again does nothing (`ON CONFLICT DO NOTHING`) and is reported as already
//! stored when the records are identical, an error when they differ. Runs of one batch are
//! inserted in run-id order, so two batches never wait on each other in a cycle; a deadlock
//! or serialization failure reported by the server is retried. A connection lost mid-write
//! leaves nothing of the transaction (the server rolls it back); lost during the commit
//! itself, the outcome is unknown and the error says to record the run again (its id makes
//! that safe).
//!
//! Nothing waits without a limit: the connection (TCP, TLS, log-in) must be made within
//! `connect_timeout`; the server cancels a statement past `statement_timeout`, a lock wait
//! past `lock_timeout` and a session idle in a transaction past
//! `idle_in_transaction_session_timeout`; and the client itself gives up on a statement
//! whose answer has not come `statement_timeout + 2 s` after it was sent (a frozen server or
//! backend cannot cancel anything), dropping the connection so the server rolls the
//! transaction back. TCP keepalive probes an idle connection. A connection the server
//! refuses while it starts up or shuts down, or a refused TCP connection, is retried with
//! backoff (`connect_retries`), never an authentication failure, and a note says it was
//! (`crate::notices`). Settings: [`crate::settings`]; TLS: [`crate::tls`]. The client is
//! tokio-postgres driven by a current-thread runtime that each call blocks on. Left out:
//! connection pooling, reconnecting after a lost connection, and server-side retention.

use crate::credentials::{self, PasswordSource};
use crate::engine::{
    conflict, same_content, InsertOutcome, InsertStatus, PreparedRun, RunQuery, RunSummary,
    StoreEngine, StoredProfile,
};
use crate::error::StoreError;
use crate::location::PostgresUrl;
use crate::notices::note;
use crate::record::Record;
use crate::settings::{human, ConnectionSettings, SslMode, CLIENT_GRACE};
use crate::store::RunInfo;
use crate::time::now_unix_s;
use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row};

/// Newest schema version this build writes and reads (`tensorforge.store_meta`).
pub const POSTGRES_SCHEMA_VERSION: i32 = 1;

/// The application name in `tensorforge.store_meta`.
const APPLICATION: &str = "tensorforge";

/// Advisory lock key held while migrating ("TFST" as an integer).
const MIGRATION_LOCK: i64 = 0x5446_5354;

/// The step name of a commit in messages (a connection lost there leaves the outcome unknown).
const COMMIT: &str = "commit";

/// How many times a transaction the server aborted as a deadlock or serialization failure
/// is tried in all.
const TRIES: usize = 5;

/// Migrations in order; entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1
    "CREATE SCHEMA IF NOT EXISTS tensorforge;
     CREATE TABLE tensorforge.store_meta (
         singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
         application TEXT NOT NULL,
         schema_version INTEGER NOT NULL
     );
     CREATE TABLE tensorforge.schema_migrations (
         version INTEGER PRIMARY KEY,
         applied_unix_s BIGINT NOT NULL
     );
     CREATE TABLE tensorforge.runs (
         id BIGSERIAL PRIMARY KEY,
         run_id TEXT NOT NULL UNIQUE,
         created_unix_s BIGINT NOT NULL,
         inserted_unix_s BIGINT NOT NULL,
         machine_id TEXT NOT NULL,
         labels JSONB NOT NULL,
         record_count INTEGER NOT NULL,
         summary_json TEXT NOT NULL
     );
     CREATE INDEX runs_created ON tensorforge.runs (created_unix_s DESC, id DESC);
     CREATE INDEX runs_machine ON tensorforge.runs (machine_id, created_unix_s DESC, id DESC);
     CREATE TABLE tensorforge.records (
         id BIGSERIAL PRIMARY KEY,
         run_pk BIGINT NOT NULL REFERENCES tensorforge.runs (id),
         run_id TEXT NOT NULL,
         fingerprint TEXT NOT NULL,
         machine_id TEXT NOT NULL,
         threads BIGINT NOT NULL,
         workload_name TEXT NOT NULL,
         timestamp_unix_s BIGINT NOT NULL,
         record_json TEXT NOT NULL,
         samples_ns BYTEA NOT NULL
     );
     CREATE INDEX records_run ON tensorforge.records (run_pk, id);
     CREATE INDEX records_history
         ON tensorforge.records (fingerprint, machine_id, threads, timestamp_unix_s, id);
     CREATE INDEX records_name ON tensorforge.records (workload_name);
     CREATE TABLE tensorforge.profiles (
         id BIGSERIAL PRIMARY KEY,
         profile_id TEXT NOT NULL UNIQUE,
         machine_id TEXT NOT NULL,
         created_unix_s BIGINT NOT NULL,
         toml_text TEXT NOT NULL,
         provenance_json TEXT NOT NULL
     );
     CREATE INDEX profiles_machine ON tensorforge.profiles (machine_id, created_unix_s);",
];

/// The columns a record is read back from.
const RECORD_COLUMNS: &str = "record_json, samples_ns";

/// An open PostgreSQL store (one connection). Open one per thread or process.
pub struct PostgresStore {
    /// The runtime every call blocks on; it also drives the connection task.
    rt: Runtime,
    client: Client,
    /// The task that drives the connection (aborted when the client gives up on it).
    connection: JoinHandle<()>,
    url: PostgresUrl,
    /// How long to wait for one answer (`statement_timeout + CLIENT_GRACE`).
    deadline: Option<Duration>,
    /// The SQLSTATE of the last server error, to tell a retryable abort from the rest.
    last_code: RefCell<Option<SqlState>>,
    /// Why the connection was given up on (a statement's answer did not come in time).
    broken: RefCell<Option<String>>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgresStore({})", self.url)
    }
}

/// `samples` as little-endian f64 bytes (8 per sample).
pub fn encode_samples(samples: &[f64]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// The samples of [`encode_samples`]' bytes; `None` when the length is not a multiple of 8.
pub fn decode_samples(bytes: &[u8]) -> Option<Vec<f64>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("chunks of 8")))
            .collect(),
    )
}

/// One line describing a client error: the server's message (without its multi-line
/// detail) or the connection error.
fn one_line(e: &tokio_postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => match std::error::Error::source(e) {
            Some(inner) => format!("{e}: {inner}"),
            None => e.to_string(),
        },
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a failed connection may succeed if tried again soon: the server is starting up
/// or shutting down (SQLSTATE 57P03), or nothing listens on the port yet. Never an
/// authentication failure.
fn retryable_connect(e: &tokio_postgres::Error) -> bool {
    if e.code() == Some(&SqlState::CANNOT_CONNECT_NOW) {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = s.source();
    }
    false
}

/// Connect once (TLS per `tls`), spawning the task that drives the connection.
async fn connect_once(
    config: &tokio_postgres::Config,
    tls: Option<rustls::ClientConfig>,
) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
    Ok(match tls {
        None => {
            let (client, connection) = config.connect(NoTls).await?;
            (
                client,
                tokio::spawn(async move {
                    let _ = connection.await;
                }),
            )
        }
        Some(cfg) => {
            let (client, connection) = config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(cfg))
                .await?;
            (
                client,
                tokio::spawn(async move {
                    let _ = connection.await;
                }),
            )
        }
    })
}

impl PostgresStore {
    /// Connect to `url` and bring its schema up to date (see the module notes). The
    /// password comes from the URL, `PGPASSWORD` or the password file, and is never shown.
    pub fn open(url: &PostgresUrl) -> Result<PostgresStore, StoreError> {
        let s: &ConnectionSettings = &url.settings;
        let database = |message: String| StoreError::Database {
            store: url.to_string(),
            message,
            source: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| database(format!("cannot start the client runtime: {e}")))?;
        let tls = crate::tls::client_config(s).map_err(|e| {
            StoreError::invalid(
                url.to_string(),
                e.field,
                e.path.display().to_string(),
                e.reason,
            )
        })?;
        let (user, password, source) = credentials::resolve(url);
        let mut config = tokio_postgres::Config::new();
        config
            .host(&url.host)
            .port(url.port)
            .user(&user)
            .dbname(&url.dbname)
            .application_name("tensorforge")
            .options(s.server_options())
            .connect_timeout(s.connect)
            .keepalives(s.keepalives)
            .keepalives_idle(s.keepalives_idle)
            .keepalives_interval(s.keepalives_interval)
            .keepalives_retries(s.keepalives_count)
            .ssl_mode(match s.ssl_mode {
                SslMode::Disable | SslMode::Allow => tokio_postgres::config::SslMode::Disable,
                SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
                _ => tokio_postgres::config::SslMode::Require,
            });
        if !s.tcp_user_timeout.is_zero() {
            config.tcp_user_timeout(s.tcp_user_timeout);
        }
        if let Some(p) = &password {
            config.password(p);
        }
        let started = Instant::now();
        let mut retries = 0;
        let (client, connection) = loop {
            let attempt = rt.block_on(async {
                tokio::time::timeout(s.connect, connect_once(&config, tls.clone())).await
            });
            match attempt {
                Ok(Ok(c)) => break c,
                Ok(Err(e)) if retryable_connect(&e) && retries < s.connect_retries => {
                    std::thread::sleep(ConnectionSettings::retry_pause(retries));
                    retries += 1;
                }
                Ok(Err(e)) => return Err(connect_error(url, &user, &source, &e, retries)),
                Err(_) => {
                    return Err(database(format!(
                        "cannot connect: no answer within connect_timeout {} (TCP, TLS and log-in){}; nothing was recorded",
                        human(s.connect),
                        tried_again(retries)
                    )))
                }
            }
        };
        if retries > 0 {
            note(&format!(
                "{url}: connected after retrying {retries} time(s) over {} while the server was starting or refusing connections",
                human(started.elapsed())
            ));
        }
        let store = PostgresStore {
            rt,
            client,
            connection,
            url: url.clone(),
            deadline: s.client_deadline(),
            last_code: RefCell::new(None),
            broken: RefCell::new(None),
        };
        if s.ssl_mode == SslMode::Prefer && s.ssl_mode_given {
            let encrypted = store
                .wait(
                    "read TLS state",
                    store.client.query_opt(
                        "SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_backend_pid()",
                        &[],
                    ),
                )
                .ok()
                .flatten()
                .is_some_and(|r| r.get::<_, bool>(0));
            if !encrypted {
                note(&format!(
                    "{url}: connected WITHOUT TLS: the server does not offer it (sslmode=prefer); give sslmode=require to refuse an unencrypted connection"
                ));
            }
        }
        store.migrate()?;
        Ok(store)
    }

    /// Wait for one request to the server, at most the client deadline. Past it the
    /// connection is given up (the server rolls back what it had of the transaction) and
    /// every later call fails at once.
    fn wait<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StoreError> {
        if let Some(why) = self.broken.borrow().as_ref() {
            return Err(StoreError::Database {
                store: self.url.to_string(),
                message: format!("{what}: not tried: the connection was given up earlier ({why})"),
                source: None,
            });
        }
        let deadline = self.deadline;
        let out = self.rt.block_on(async {
            match deadline {
                Some(d) => tokio::time::timeout(d, fut).await.ok(),
                None => Some(fut.await),
            }
        });
        match out {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(self.err(what, e)),
            None => {
                let d = deadline.expect("only a deadline times out");
                *self.broken.borrow_mut() = Some(format!("no answer within {}", human(d)));
                self.connection.abort();
                let tail = if what == COMMIT {
                    "whether the run was stored is unknown: record it again, its run id makes the retry store it once"
                } else {
                    "the connection was dropped, so the server rolls the transaction back and nothing of it is stored"
                };
                Err(StoreError::Database {
                    store: self.url.to_string(),
                    message: format!(
                        "{what}: timed out: the server did not answer within {} (statement_timeout {} + {}); {tail}",
                        human(d),
                        human(self.url.settings.statement),
                        human(CLIENT_GRACE)
                    ),
                    source: None,
                })
            }
        }
    }

    fn err(&self, what: &str, e: tokio_postgres::Error) -> StoreError {
        *self.last_code.borrow_mut() = e.code().cloned();
        let s = &self.url.settings;
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        let rolled_back = "the transaction was rolled back and nothing of it was stored";
        let message = if e.code() == Some(&SqlState::QUERY_CANCELED) {
            format!(
                "{what}: timed out on the server (statement_timeout {}: {}); {rolled_back}",
                human(s.statement),
                one_line(&e)
            )
        } else if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            format!(
                "{what}: timed out waiting for a lock another session holds (lock_timeout {}); {rolled_back}",
                human(s.lock)
            )
        } else if e.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) {
            format!(
                "{what}: the server ended the session, idle inside a transaction past idle_in_transaction_session_timeout {}; {rolled_back}",
                human(s.idle_in_transaction)
            )
        } else if e.is_closed()
            || io
            || e.code() == Some(&SqlState::ADMIN_SHUTDOWN)
            || e.code() == Some(&SqlState::CRASH_SHUTDOWN)
            || e.code() == Some(&SqlState::CONNECTION_FAILURE)
        {
            if what == COMMIT {
                // Lost while committing: the server may or may not have committed. The run id
                // makes a retry safe either way.
                format!(
                    "{what}: the connection to the server was lost ({}); whether the run was stored is unknown: record it again, its run id makes the retry store it once",
                    one_line(&e)
                )
            } else {
                format!(
                    "{what}: the connection to the server was lost ({}); {rolled_back}",
                    one_line(&e)
                )
            }
        } else {
            format!("{what}: {}", one_line(&e))
        };
        StoreError::Database {
            store: self.url.to_string(),
            message,
            source: None,
        }
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Database {
            store: self.url.to_string(),
            message: format!("{what} does not parse"),
            source: None,
        }
    }

    /// Run `f` inside one transaction: BEGIN, `f`, COMMIT; on an error, ROLLBACK (when the
    /// connection still answers) and the error.
    fn transaction<T>(
        &self,
        f: impl FnOnce(&Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.wait("begin", self.client.batch_execute("BEGIN"))?;
        let out = f(self).and_then(|v| {
            self.wait(COMMIT, self.client.batch_execute("COMMIT"))?;
            Ok(v)
        });
        if out.is_err() && self.broken.borrow().is_none() && !self.client.is_closed() {
            let code = self.last_code.borrow().clone();
            let _ = self.wait("rollback", self.client.batch_execute("ROLLBACK"));
            *self.last_code.borrow_mut() = code;
        }
        out
    }

    fn query(
        &self,
        what: &str,
        sql: &str,
        args: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.wait(what, self.client.query(sql, args))
    }

    /// `(application, schema_version)` of the store in this database, or `None` when it has
    /// none yet.
    fn meta(&self) -> Result<Option<(String, i32)>, StoreError> {
        let has: bool = self
            .wait(
                "read store version",
                self.client.query_one(
                    // The catalog through SQL (an MVCC snapshot), not to_regclass: the
                    // session's catalog cache can miss a table another session created since.
                    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
                                    WHERE schemaname = 'tensorforge' AND tablename = 'store_meta')",
                    &[],
                ),
            )?
            .get(0);
        if !has {
            return Ok(None);
        }
        let row = self.wait(
            "read store version",
            self.client.query_opt(
                "SELECT application, schema_version FROM tensorforge.store_meta",
                &[],
            ),
        )?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// Refuse a database that is not ours, or is newer than this build.
    fn check(&self, meta: &Option<(String, i32)>) -> Result<(), StoreError> {
        let refuse = |message: String| StoreError::Database {
            store: self.url.to_string(),
            message,
            source: None,
        };
        match meta {
            Some((app, _)) if app != APPLICATION => Err(refuse(format!(
                "not a TensorForge store (tensorforge.store_meta names application `{app}`); the database was left untouched"
            ))),
            Some((_, v)) if *v > POSTGRES_SCHEMA_VERSION => Err(refuse(format!(
                "store schema version {v} is newer than this build reads ({POSTGRES_SCHEMA_VERSION}); upgrade tensorforge"
            ))),
            Some(_) => Ok(()),
            None => {
                let tables: i64 = self
                    .wait(
                        "read table list",
                        self.client.query_one(
                            "SELECT count(*) FROM pg_catalog.pg_tables
                             WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
                            &[],
                        ),
                    )?
                    .get(0);
                if tables > 0 {
                    Err(refuse(format!(
                        "not a TensorForge store (database `{}` holds {tables} table(s) of another application); the database was left untouched (give a database of its own)",
                        self.url.dbname
                    )))
                } else {
                    Ok(())
                }
            }
        }
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let meta = self.meta()?;
        self.check(&meta)?;
        if matches!(meta, Some((_, v)) if v == POSTGRES_SCHEMA_VERSION) {
            return Ok(());
        }
        self.transaction(|st| {
            st.wait(
                "lock for migration",
                st.client
                    .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]),
            )?;
            // Re-read under the lock: another process may have migrated meanwhile.
            let meta = st.meta()?;
            st.check(&meta)?;
            let mut v = meta.map(|m| m.1).unwrap_or(0);
            while v < POSTGRES_SCHEMA_VERSION {
                st.wait(
                    &format!("migration {v} -> {}", v + 1),
                    st.client.batch_execute(MIGRATIONS[v as usize]),
                )?;
                v += 1;
                st.wait(
                    "record migration",
                    st.client.execute(
                        "INSERT INTO tensorforge.schema_migrations (version, applied_unix_s) VALUES ($1, $2)",
                        &[&v, &now_unix_s()],
                    ),
                )?;
                st.wait(
                    "set schema version",
                    st.client.execute(
                        "INSERT INTO tensorforge.store_meta (application, schema_version) VALUES ($1, $2)
                         ON CONFLICT (singleton) DO UPDATE SET schema_version = EXCLUDED.schema_version",
                        &[&APPLICATION, &v],
                    ),
                )?;
            }
            Ok(())
        })
    }

    fn record_from_row(&self, row: &Row) -> Result<Record, StoreError> {
        let json: &str = row.get(0);
        let bytes: &[u8] = row.get(1);
        let mut rec: Record = serde_json::from_str(json)
            .map_err(|e| self.corrupt(format!("records.record_json ({e})")))?;
        rec.samples_ns = decode_samples(bytes).ok_or_else(|| {
            self.corrupt(format!(
                "records.samples_ns of run {} ({} bytes, not a multiple of 8)",
                rec.run_id,
                bytes.len()
            ))
        })?;
        Ok(rec)
    }

    fn query_records(
        &self,
        sql: &str,
        args: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Record>, StoreError> {
        let rows = self.query("read records", sql, args)?;
        rows.iter().map(|r| self.record_from_row(r)).collect()
    }

    /// Write one run inside the open transaction; `AlreadyStored` when its id is taken by
    /// identical records.
    fn write_run(
        &self,
        run: &PreparedRun<'_>,
        hook: &mut dyn FnMut(usize),
    ) -> Result<InsertStatus, StoreError> {
        let info = &run.info;
        let labels = serde_json::to_string(&info.labels).unwrap_or_default();
        let summary = serde_json::to_string(&RunSummary::of(info)).unwrap_or_default();
        let record_count = i32::try_from(info.record_count).map_err(|_| {
            StoreError::invalid(
                &info.run_id,
                "records",
                info.record_count.to_string(),
                "more records than one run can hold (2^31 - 1)",
            )
        })?;
        let row = self.wait(
            "insert run",
            self.client.query_opt(
                "INSERT INTO tensorforge.runs
                     (run_id, created_unix_s, inserted_unix_s, machine_id, labels, record_count, summary_json)
                 VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7)
                 ON CONFLICT (run_id) DO NOTHING RETURNING id",
                &[
                    &info.run_id,
                    &info.created_unix_s,
                    &info.inserted_unix_s,
                    &info.machine_id,
                    &labels,
                    &record_count,
                    &summary,
                ],
            ),
        )?;
        let Some(row) = row else {
            let stored = self.query_records(
                &format!(
                    "SELECT {RECORD_COLUMNS} FROM tensorforge.records WHERE run_id = $1 ORDER BY id"
                ),
                &[&info.run_id],
            )?;
            return if same_content(&stored, &run.jsons) {
                Ok(InsertStatus::AlreadyStored)
            } else {
                Err(conflict(&self.url.to_string(), &info.run_id))
            };
        };
        let run_pk: i64 = row.get(0);
        let stmt = self.wait(
            "prepare insert",
            self.client.prepare(
                "INSERT INTO tensorforge.records
                     (run_pk, run_id, fingerprint, machine_id, threads, workload_name, timestamp_unix_s, record_json, samples_ns)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            ),
        )?;
        for (i, r) in run.records.iter().enumerate() {
            let slim = Record {
                samples_ns: Vec::new(),
                ..r.clone()
            };
            let json = serde_json::to_string(&slim).map_err(|e| {
                StoreError::invalid(
                    &r.workload.name,
                    "record",
                    "…",
                    format!("cannot serialize: {e}"),
                )
            })?;
            self.wait(
                "insert record",
                self.client.execute(
                    &stmt,
                    &[
                        &run_pk,
                        &r.run_id,
                        &r.fingerprint,
                        &r.device.machine_id,
                        &i64::from(r.harness.threads),
                        &r.workload.name,
                        &r.timestamp_unix_s,
                        &json,
                        &encode_samples(&r.samples_ns),
                    ],
                ),
            )?;
            hook(i);
        }
        Ok(InsertStatus::Inserted)
    }

    fn profiles_where(
        &self,
        tail: &str,
        args: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<StoredProfile>, StoreError> {
        let sql = format!(
            "SELECT profile_id, machine_id, created_unix_s, toml_text, provenance_json
             FROM tensorforge.profiles {tail}"
        );
        let rows = self.query("read profiles", &sql, args)?;
        Ok(rows
            .iter()
            .map(|r| StoredProfile {
                profile_id: r.get(0),
                machine_id: r.get(1),
                created_unix_s: r.get(2),
                toml_text: r.get(3),
                provenance_json: r.get(4),
            })
            .collect())
    }
}

/// `; tried N more time(s)` for a message, or nothing.
fn tried_again(retries: u32) -> String {
    if retries == 0 {
        String::new()
    } else {
        format!(" (after {retries} retries while the server refused connections)")
    }
}

/// The one-line error for a failed connection, naming the store (password redacted) and,
/// for an authentication failure, where the password came from.
fn connect_error(
    url: &PostgresUrl,
    user: &str,
    source: &PasswordSource,
    e: &tokio_postgres::Error,
    retries: u32,
) -> StoreError {
    let code = e.code();
    // The client stops before sending anything when the server asks for a password and
    // none was found ("password missing"): the same failure for the user.
    let no_password =
        *source == PasswordSource::None || matches!(source, PasswordSource::IgnoredPasswordFile(_));
    let message = if code == Some(&SqlState::INVALID_PASSWORD)
        || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
        || (no_password && one_line(e).contains("password missing"))
    {
        // 28000 is also the server refusing by pg_hba.conf (no entry, TLS required): its
        // words say which.
        let server = if code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION) {
            format!(": {}", one_line(e))
        } else {
            String::new()
        };
        format!("authentication failed for role `{user}` ({source}){server}; nothing was recorded")
    } else if code == Some(&SqlState::INVALID_CATALOG_NAME) {
        format!(
            "database `{}` does not exist (create it, e.g. `createdb {}`); nothing was recorded",
            url.dbname, url.dbname
        )
    } else {
        format!(
            "cannot connect ({}){}; nothing was recorded",
            one_line(e),
            tried_again(retries)
        )
    };
    StoreError::Database {
        store: url.to_string(),
        message,
        source: None,
    }
}

impl StoreEngine for PostgresStore {
    fn describe(&self) -> String {
        self.url.to_string()
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self.meta()?.map(|m| i64::from(m.1)).unwrap_or(0))
    }

    fn write_runs(
        &self,
        runs: &[PreparedRun<'_>],
        hook: &mut dyn FnMut(usize),
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        // Insert in run-id order (one lock order for every writer); report in input order.
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| runs[a].info.run_id.cmp(&runs[b].info.run_id));
        let mut tries = 0;
        loop {
            tries += 1;
            *self.last_code.borrow_mut() = None;
            let result = self.transaction(|st| {
                let mut status = vec![InsertStatus::Inserted; runs.len()];
                for &i in &order {
                    status[i] = st.write_run(&runs[i], hook)?;
                }
                Ok(status)
            });
            match result {
                Ok(status) => {
                    if tries > 1 {
                        note(&format!(
                            "{}: the write was aborted by the server as a deadlock or serialization failure and retried; stored on try {tries}",
                            self.url
                        ));
                    }
                    return Ok(runs
                        .iter()
                        .zip(status)
                        .map(|(r, status)| InsertOutcome {
                            run_id: r.info.run_id.clone(),
                            status,
                        })
                        .collect());
                }
                Err(e) => {
                    let code = self.last_code.borrow().clone();
                    let retry = matches!(
                        code,
                        Some(SqlState::T_R_DEADLOCK_DETECTED)
                            | Some(SqlState::T_R_SERIALIZATION_FAILURE)
                    );
                    if !retry || tries >= TRIES {
                        return Err(e);
                    }
                    std::thread::sleep(ConnectionSettings::retry_pause(tries as u32 - 1));
                }
            }
        }
    }

    fn runs(&self, q: &RunQuery<'_>) -> Result<Vec<RunInfo>, StoreError> {
        let limit = q.limit.map(|n| n.min(i64::MAX as usize) as i64);
        let mut conds: Vec<String> = Vec::new();
        let mut args: Vec<&(dyn ToSql + Sync)> = Vec::new();
        if let Some(id) = &q.run_id {
            args.push(id);
            conds.push(format!("run_id = ${}", args.len()));
        }
        if let Some(m) = &q.machine_id {
            args.push(m);
            conds.push(format!("machine_id = ${}", args.len()));
        }
        if let Some(x) = &q.exclude_run {
            args.push(x);
            conds.push(format!("run_id <> ${}", args.len()));
        }
        if let Some((k, v)) = &q.label {
            args.push(k);
            args.push(v);
            let n = args.len();
            conds.push(format!("labels ->> (${}::text) = ${n}::text", n - 1));
        }
        let mut tail = String::new();
        if let Some(n) = &limit {
            args.push(n);
            tail = format!(" LIMIT ${}", args.len());
        }
        let sql = format!(
            "SELECT run_id, created_unix_s, inserted_unix_s, machine_id, labels::text, record_count, summary_json
             FROM tensorforge.runs {}{} ORDER BY created_unix_s DESC, id DESC{tail}",
            if conds.is_empty() { "" } else { "WHERE " },
            conds.join(" AND "),
        );
        let rows = self.query("list runs", &sql, &args)?;
        rows.iter()
            .map(|r| {
                let run_id: String = r.get(0);
                let labels: &str = r.get(4);
                let summary: &str = r.get(6);
                let mut info = RunInfo {
                    run_id: run_id.clone(),
                    created_unix_s: r.get(1),
                    inserted_unix_s: r.get(2),
                    machine_id: r.get(3),
                    labels: serde_json::from_str(labels)
                        .map_err(|_| self.corrupt(format!("runs.labels of run {run_id}")))?,
                    record_count: r.get::<_, i32>(5).max(0) as usize,
                    sample_count: 0,
                    sources: Vec::new(),
                    device_kinds: Vec::new(),
                    workloads: Vec::new(),
                };
                let s: RunSummary = serde_json::from_str(summary)
                    .map_err(|_| self.corrupt(format!("runs.summary_json of run {run_id}")))?;
                s.fill(&mut info);
                Ok(info)
            })
            .collect()
    }

    fn run_records(&self, run_id: &str) -> Result<Vec<Record>, StoreError> {
        self.query_records(
            &format!(
                "SELECT {RECORD_COLUMNS} FROM tensorforge.records WHERE run_id = $1 ORDER BY id"
            ),
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
                &format!(
                    "SELECT {RECORD_COLUMNS} FROM tensorforge.records
                     WHERE fingerprint = $1 AND machine_id = $2 ORDER BY timestamp_unix_s, id"
                ),
                &[&fingerprint, &m],
            ),
            None => self.query_records(
                &format!(
                    "SELECT {RECORD_COLUMNS} FROM tensorforge.records
                     WHERE fingerprint = $1 ORDER BY timestamp_unix_s, id"
                ),
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
        // history index; only their records are read and parsed.
        let threads = i64::from(threads);
        let limit = runs.min(i64::MAX as usize) as i64;
        self.query_records(
            &format!(
                "WITH newest AS (
                     SELECT DISTINCT ON (run_pk) run_pk, timestamp_unix_s AS ts, id
                     FROM tensorforge.records
                     WHERE fingerprint = $1 AND machine_id = $2 AND threads = $3
                       AND run_id <> ALL($4)
                     ORDER BY run_pk, timestamp_unix_s DESC, id DESC
                 ), chosen AS (
                     SELECT run_pk FROM newest ORDER BY ts DESC, id DESC LIMIT $5
                 )
                 SELECT {RECORD_COLUMNS} FROM tensorforge.records
                 WHERE fingerprint = $1 AND machine_id = $2 AND threads = $3
                   AND run_pk IN (SELECT run_pk FROM chosen)
                 ORDER BY timestamp_unix_s, id"
            ),
            &[&fingerprint, &machine_id, &threads, &exclude, &limit],
        )
    }

    fn fingerprints_named(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let rows = self.query(
            "read fingerprints",
            "SELECT fingerprint FROM tensorforge.records
             WHERE workload_name = $1 OR fingerprint = $1
             GROUP BY fingerprint ORDER BY min(id)",
            &[&name],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn insert_profile(&self, p: &StoredProfile) -> Result<bool, StoreError> {
        let n = self.wait(
            "insert profile",
            self.client.execute(
                "INSERT INTO tensorforge.profiles
                     (profile_id, machine_id, created_unix_s, toml_text, provenance_json)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (profile_id) DO NOTHING",
                &[
                    &p.profile_id,
                    &p.machine_id,
                    &p.created_unix_s,
                    &p.toml_text,
                    &p.provenance_json,
                ],
            ),
        )?;
        Ok(n == 1)
    }

    fn latest_profile(&self, machine_id: &str) -> Result<Option<StoredProfile>, StoreError> {
        Ok(self
            .profiles_where(
                "WHERE machine_id = $1 ORDER BY created_unix_s DESC, id DESC LIMIT 1",
                &[&machine_id],
            )?
            .pop())
    }

    fn profile(&self, profile_id: &str) -> Result<Option<StoredProfile>, StoreError> {
        Ok(self
            .profiles_where("WHERE profile_id = $1", &[&profile_id])?
            .pop())
    }

    fn profiles(&self) -> Result<Vec<StoredProfile>, StoreError> {
        self.profiles_where("ORDER BY created_unix_s, id", &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_bit_exactly() {
        let s = [0.1, 1e-300, f64::MAX, 123_456.789, -0.0];
        let b = encode_samples(&s);
        assert_eq!(b.len(), 40); // 5 samples x 8 bytes
        let back = decode_samples(&b).unwrap();
        assert!(s.iter().zip(&back).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(decode_samples(&b[..7]), None);
    }
}
