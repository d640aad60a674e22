//! Throw-away PostgreSQL databases for tests: the conformance suite runs every store test
//! against SQLite and against a fresh database on the server named by
//! `TENSORFORGE_TEST_POSTGRES` (an admin URL, e.g.
//! `postgres://postgres:secret@127.0.0.1:55432/postgres`). Without it the PostgreSQL half
//! of each test prints a visible `SKIPPED` line and returns; with
//! `TENSORFORGE_TEST_POSTGRES_REQUIRED=1` (CI sets it) a missing server fails the test
//! instead. Each database is dropped when its [`TestDatabase`] is. Also the one synthetic
//! record the store's tests build runs from ([`record`]).

use crate::location::{PostgresUrl, StoreLocation};
use crate::record::WorkloadIdentity;
use crate::record::{DeviceContext, HarnessSettings, Record, RecordParts, SoftwareContext};
use crate::store::new_run_id;
use std::collections::BTreeMap;

/// A valid record of run `run`: workload `g<i>` (a `gemm` with `m = i`, f32) on `machine`,
/// measured at `threads` threads at Unix time `ts`, with label `label=<label>` when given and
/// 50 full-precision samples (`100 + k/3 + i` ns, as a harness writes them, not short
/// decimals).
pub fn record(
    run: &str,
    i: u64,
    machine: &str,
    ts: i64,
    threads: u32,
    label: Option<&str>,
) -> Record {
    let mut params = BTreeMap::new();
    params.insert("m".into(), serde_json::json!(i));
    let mut labels = BTreeMap::new();
    if let Some(l) = label {
        labels.insert("label".to_string(), l.to_string());
    }
    Record::new(RecordParts {
        run_id: run.into(),
        workload: WorkloadIdentity {
            kind: "gemm".into(),
            name: format!("g{i}"),
            params,
            dtype: "f32".into(),
        },
        device: DeviceContext {
            kind: "cpu".into(),
            machine_id: machine.into(),
            ..Default::default()
        },
        software: SoftwareContext::default(),
        harness: HarnessSettings {
            threads,
            ..HarnessSettings::default()
        },
        samples_ns: (0..50).map(|k| 100.0 + k as f64 / 3.0 + i as f64).collect(),
        flops: None,
        bytes: None,
        peak_alloc_bytes: None,
        timestamp_unix_s: ts,
        labels,
        source: "harness".into(),
    })
    .expect("the synthetic record is valid")
}

/// The environment variable naming the test server's admin URL.
pub const ADMIN_URL_VAR: &str = "TENSORFORGE_TEST_POSTGRES";

/// Set to `1` to make a missing test server a failure rather than a skip.
pub const REQUIRED_VAR: &str = "TENSORFORGE_TEST_POSTGRES_REQUIRED";

/// A database created for one test on the test server, dropped on drop.
pub struct TestDatabase {
    admin: PostgresUrl,
    /// The new database's location (password redacted when displayed).
    pub url: PostgresUrl,
}

/// The admin URL from the environment: `None` (after printing `SKIPPED ... test`) when it is
/// not set, a panic when it is required but missing or not a PostgreSQL URL.
pub fn admin_url(test: &str) -> Option<PostgresUrl> {
    let required = std::env::var(REQUIRED_VAR).is_ok_and(|v| v == "1");
    match std::env::var(ADMIN_URL_VAR).ok().filter(|v| !v.is_empty()) {
        None => {
            assert!(
                !required,
                "{REQUIRED_VAR}=1 but {ADMIN_URL_VAR} is not set: no PostgreSQL server to test `{test}` against"
            );
            // Written to the process's stderr directly, not through `eprintln!`, which the test
            // harness captures and hides for a passing test: a skip must be seen.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (PostgreSQL) {test}: set {ADMIN_URL_VAR}=postgres://user:password@host:port/db to run it"
            );
            None
        }
        Some(text) => match StoreLocation::parse(&text) {
            Ok(StoreLocation::Postgres(u)) => Some(u),
            other => panic!("{ADMIN_URL_VAR} is not a postgres:// URL: {other:?}"),
        },
    }
}

/// A connection to the server's admin database.
pub fn admin_client(admin: &PostgresUrl) -> postgres::Client {
    let mut c = postgres::Config::new();
    c.host(&admin.host)
        .port(admin.port)
        .user(&admin.user)
        .dbname(&admin.dbname);
    if let Some(p) = admin.password() {
        c.password(p);
    }
    c.connect(postgres::NoTls)
        .unwrap_or_else(|e| panic!("test server {admin}: {e}"))
}

impl TestDatabase {
    /// A new empty database for `test`, or `None` when no server is configured.
    pub fn create(test: &str) -> Option<TestDatabase> {
        let admin = admin_url(test)?;
        let name = format!("tf_test_{}", new_run_id().replace('-', ""));
        admin_client(&admin)
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("create test database on {admin}: {e}"));
        let url = admin.with_dbname(&name);
        Some(TestDatabase { admin, url })
    }

    /// The URL with its password, to hand to a child process or a CLI under test (never
    /// print it).
    pub fn url_with_password(&self) -> String {
        let u = &self.url;
        let pw = u.password().map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "postgres://{}{pw}@{}:{}/{}",
            u.user, u.host, u.port, u.dbname
        )
    }

    /// Run `sql` on the test database as the admin role (to tamper with it in tests).
    pub fn execute(&self, sql: &str) {
        admin_client(&self.url)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{}: {sql}: {e}", self.url));
    }

    /// A client on the test database itself.
    pub fn client(&self) -> postgres::Client {
        admin_client(&self.url)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.url.dbname);
        if let Err(e) = admin_client(&self.admin).batch_execute(&sql) {
            eprintln!("could not drop test database {}: {e}", self.url);
        }
    }
}
