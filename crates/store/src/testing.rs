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
            Ok(StoreLocation::Postgres(u)) => Some(*u),
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

/// A PostgreSQL server of a test's own, in a temporary folder (from the distribution's
/// binaries: `$TENSORFORGE_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`), for
/// tests that stop, freeze or reconfigure a server and so cannot share one. As root, the
/// server runs as the `postgres` user (`runuser`). The role `postgres` logs in with the
/// password [`PrivateServer::PASSWORD`] over TCP and without one over the Unix socket in
/// the folder. Stopped (immediately) and removed on drop.
pub struct PrivateServer {
    /// The folder holding the cluster (`data/`), its log and any certificates.
    pub dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    /// The loopback TCP port it listens on.
    pub port: u16,
    as_postgres: bool,
    options: String,
}

/// The server binaries' folder, when installed.
fn pg_bin() -> Option<std::path::PathBuf> {
    if let Some(b) = std::env::var_os("TENSORFORGE_TEST_PG_BIN") {
        return Some(b.into());
    }
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("pg_ctl").is_file())
        .collect();
    dirs.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

/// A free loopback TCP port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl PrivateServer {
    /// The `postgres` role's password over TCP.
    pub const PASSWORD: &'static str = "private-pw";

    /// Create and start a server for `test`; `configure(dir)` runs after `initdb` and before
    /// the start (to write certificates or `pg_hba.conf` lines into `dir/data`), and
    /// `options` are added to the server's command line (`-c ssl=on ...`). `None` (after
    /// printing `SKIPPED`) when the binaries are missing and [`REQUIRED_VAR`] is not `1`.
    pub fn start(
        test: &str,
        options: &str,
        configure: impl FnOnce(&std::path::Path),
    ) -> Option<PrivateServer> {
        let required = std::env::var(REQUIRED_VAR).is_ok_and(|v| v == "1");
        let Some(bin) = pg_bin() else {
            assert!(
                !required,
                "{REQUIRED_VAR}=1 but no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) for `{test}`"
            );
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (PostgreSQL) {test}: no server binaries; install postgresql or set TENSORFORGE_TEST_PG_BIN"
            );
            return None;
        };
        // The effective user, as `id -u` prints it.
        let as_postgres = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = std::env::temp_dir().join(format!("tf-pg-{}", new_run_id()));
        std::fs::create_dir_all(&dir).expect("create the server folder");
        let s = PrivateServer {
            dir,
            bin,
            port: free_port(),
            as_postgres,
            options: options.to_string(),
        };
        let pw = s.dir.join("pw");
        std::fs::write(&pw, format!("{}\n", Self::PASSWORD)).expect("write the password file");
        s.chown(&s.dir);
        s.chown(&pw);
        s.run(
            "initdb",
            &[
                "-D",
                &s.data(),
                "-U",
                "postgres",
                "-N",
                "-E",
                "UTF8",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                &format!("--pwfile={}", pw.display()),
            ],
        );
        configure(&s.dir.join("data"));
        s.chown_all();
        s.start_server(true);
        Some(s)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn chown(&self, p: &std::path::Path) {
        if self.as_postgres {
            let _ = std::process::Command::new("chown")
                .arg("postgres")
                .arg(p)
                .status();
        }
    }

    /// Give everything in the folder to the server's user (files written by `configure`).
    pub fn chown_all(&self) {
        if self.as_postgres {
            let _ = std::process::Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&self.dir)
                .status();
        }
    }

    /// One server binary as a command (run as `postgres` when root).
    fn command(&self, tool: &str) -> std::process::Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        }
    }

    /// Run one server binary, panicking on failure.
    fn run(&self, tool: &str, args: &[&str]) {
        let out = self
            .command(tool)
            .args(args)
            .output()
            .expect("run a server binary");
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start the server; with `wait`, return once it accepts connections.
    pub fn start_server(&self, wait: bool) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off {}",
            self.port,
            self.dir.display(),
            self.options
        );
        let log = self.dir.join("log").display().to_string();
        let data = self.data();
        let mut args = vec!["-D", data.as_str(), "-l", &log, "-o", &opts];
        args.push(if wait { "-w" } else { "-W" });
        args.push("start");
        self.run("pg_ctl", &args);
    }

    /// Stop the server (`fast`: sessions are ended, then it shuts down).
    pub fn stop_server(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
    }

    /// The postmaster's process id (first line of `postmaster.pid`).
    pub fn postmaster_pid(&self) -> i32 {
        let text =
            std::fs::read_to_string(self.dir.join("data/postmaster.pid")).expect("postmaster.pid");
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid on the first line")
    }

    /// A store URL for role `postgres` on `host` (`127.0.0.1` or `localhost`) with query
    /// `params` (may be empty). Holds the password: never print it.
    pub fn url(&self, host: &str, params: &str) -> String {
        let q = if params.is_empty() {
            String::new()
        } else {
            format!("?{params}")
        };
        format!(
            "postgres://postgres:{}@{host}:{}/postgres{q}",
            Self::PASSWORD,
            self.port
        )
    }

    /// A client over the Unix socket as `postgres` (no password, no TLS): for set-up.
    pub fn socket_client(&self) -> postgres::Client {
        let mut c = postgres::Config::new();
        c.host_path(&self.dir)
            .port(self.port)
            .user("postgres")
            .dbname("postgres");
        c.connect(postgres::NoTls)
            .unwrap_or_else(|e| panic!("private server socket: {e}"))
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
