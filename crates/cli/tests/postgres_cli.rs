//! The team store end to end through the binary, against a real PostgreSQL server (the one
//! `TENSORFORGE_TEST_POSTGRES` names; CI starts one, and without it these tests print
//! `SKIPPED` and return): the main job and the gate run unchanged with `--store
//! postgres://...`, a retried import stores nothing twice and says so, and `records sync`
//! moves runs SQLite -> PostgreSQL -> SQLite idempotently. A store of another application
//! is refused with a one-line error and left untouched.

mod common;

use common::{fails, json, tf};
use tensorforge_store::testing::TestDatabase;

/// A hyperfine result file of one command in `dir` (runs to record without measuring).
fn hyperfine_file(dir: &std::path::Path) -> std::path::PathBuf {
    let hf = dir.join("hf.json");
    std::fs::write(
        &hf,
        r#"{"results":[{"command":"./gemm 64","mean":0.0015,"stddev":0.0005,"median":0.0015,
        "user":0.001,"system":0.0,"min":0.001,"max":0.002,"times":[0.001,0.002,0.0015],
        "exit_codes":[0,0,0]}]}"#,
    )
    .unwrap();
    hf
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tf-pg-cli-{}-{name}-{}",
        std::process::id(),
        tensorforge_store::new_run_id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn quickstart_and_gate_run_unchanged_against_postgres() {
    let Some(db) = TestDatabase::create("quickstart_and_gate") else {
        return;
    };
    let url = db.url_with_password();
    let dir = tmp("qs");
    let quickstart = || {
        tf().current_dir(&dir)
            .env_remove("TENSORFORGE_STORE")
            .args(["quickstart", "--store", &url])
            .args(["--time-budget-ms", "100", "--iterations", "20"])
            .output()
            .unwrap()
    };
    let first = quickstart();
    let out = String::from_utf8_lossy(&first.stdout).to_string();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(out.contains("baseline established"), "{out}");
    // The password never reaches the output or the reports.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let secret = db.url_with_password();
    let secret = secret.split(':').nth(2).unwrap().split('@').next().unwrap();
    assert!(
        !out.contains(secret) && !md.contains(secret),
        "password shown"
    );
    assert!(out.contains(&db.url.to_string()), "{out}");
    let second = quickstart();
    let out = String::from_utf8_lossy(&second.stdout).to_string();
    assert!(matches!(second.status.code(), Some(0) | Some(3)), "{out}");
    assert!(out.contains("against 1 earlier run(s)"), "{out}");

    // Both runs are in the server's store, and the gate resolves them there.
    let listed = json(&["records", "list", "--json", "--store", &url]);
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{listed}");
    let older = runs[1]["run_id"].as_str().unwrap().to_string();
    let gate = tf()
        .args([
            "gate",
            "--store",
            &url,
            "--baseline",
            &older,
            "--candidate",
            "latest",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&gate.stdout).to_string();
    assert!(
        matches!(gate.status.code(), Some(0) | Some(1) | Some(3)),
        "gate exit {:?}: {text}{}",
        gate.status.code(),
        String::from_utf8_lossy(&gate.stderr)
    );
    assert!(
        text.contains("PASS") || text.contains("FAIL") || text.contains("INCONCLUSIVE"),
        "{text}"
    );
}

#[test]
fn import_retries_and_sync_both_ways() {
    let Some(db) = TestDatabase::create("import_and_sync") else {
        return;
    };
    let url = db.url_with_password();
    let dir = tmp("sync");
    let a = dir.join("a.sqlite").display().to_string();
    let b = dir.join("b.sqlite").display().to_string();
    // Two runs in a local store, via a hyperfine file (no measuring needed).
    let hf = hyperfine_file(&dir);
    for _ in 0..2 {
        tf().args(["ingest", "hyperfine"])
            .arg(&hf)
            .args(["--workload-kind", "gemm", "--workload-name", "gemm_64"])
            .args([
                "--param", "m=64", "--dtype", "f32", "--record", "--store", &a,
            ])
            .assert()
            .success();
    }
    let first = json(&["records", "sync", "--from", &a, "--to", &url, "--json"]);
    assert_eq!(first["runs_copied"], 2, "{first}");
    assert_eq!(first["records_copied"], 2, "{first}");
    assert_eq!(first["schema_version"], 2);
    assert_eq!(first["runs_refused"], serde_json::json!([]), "{first}");
    assert!(!first["to"]
        .as_str()
        .unwrap()
        .contains(url.split('@').next().unwrap().rsplit(':').next().unwrap()));
    let again = json(&["records", "sync", "--from", &a, "--to", &url, "--json"]);
    assert_eq!(
        (
            again["runs_copied"].as_u64(),
            again["runs_already_present"].as_u64()
        ),
        (Some(0), Some(2))
    );
    let back = json(&["records", "sync", "--from", &url, "--to", &b, "--json"]);
    assert_eq!(back["runs_copied"], 2, "{back}");
    let a_list = json(&["records", "list", "--json", "--store", &a]);
    let b_list = json(&["records", "list", "--json", "--store", &b]);
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&a_list), ids(&b_list));

    // Export from the server and import it back: a retried CI step stores nothing twice.
    let out = dir.join("all.jsonl").display().to_string();
    tf().args(["records", "export", "--out", &out, "--store", &url])
        .assert()
        .success();
    let imp = json(&["records", "import", &out, "--json", "--store", &url]);
    assert_eq!(imp["inserted"].as_array().unwrap().len(), 0, "{imp}");
    assert_eq!(imp["already_stored"].as_array().unwrap().len(), 2, "{imp}");
}

#[test]
fn a_database_of_another_application_is_refused() {
    let Some(db) = TestDatabase::create("other_application") else {
        return;
    };
    db.execute("CREATE TABLE orders (id INT)");
    let url = db.url_with_password();
    fails(
        &["records", "list", "--store", &url],
        &[
            "not a TensorForge store",
            "left untouched",
            &db.url.to_string(),
        ],
    );
}

#[test]
fn credentials_come_from_pgpassword_or_pgpass_and_are_never_shown() {
    let Some(db) = TestDatabase::create("credentials") else {
        return;
    };
    let u = &db.url;
    let with = db.url_with_password();
    let password = with
        .strip_prefix(&format!("postgres://{}:", u.user))
        .and_then(|rest| rest.split_once('@'))
        .map(|(p, _)| p.to_string())
        .unwrap();
    // The URL without a password, given through TENSORFORGE_STORE.
    let bare = format!("postgres://{}@{}:{}/{}", u.user, u.host, u.port, u.dbname);
    let home = tmp("home");
    let run = |envs: &[(&str, &str)]| {
        let mut c = tf();
        c.env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .env("HOME", &home)
            .env("TENSORFORGE_STORE", &bare)
            .args(["records", "list", "--json"]);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let ok = run(&[("PGPASSWORD", &password)]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(listed["store"], bare.as_str(), "{listed}");

    // ~/.pgpass with a matching line, readable by its owner only.
    let pgpass = home.join(".pgpass");
    std::fs::write(
        &pgpass,
        format!(
            "# tensorforge test\n*:*:other_db:*:nope\n{}:{}:*:{}:{password}\n",
            u.host, u.port, u.user
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ok = run(&[]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    // Readable by others: ignored as libpq ignores it, and the error says so.
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bad = run(&[]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr).to_string();
    assert!(
        err.contains("authentication failed") && err.contains("chmod 600"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    // A wrong PGPASSWORD: named as the source, never shown.
    let bad = run(&[("PGPASSWORD", "wrong-pw-123")]);
    let err = String::from_utf8_lossy(&bad.stderr).to_string();
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("password from PGPASSWORD") && !err.contains("wrong-pw-123"),
        "{err}"
    );
}

/// Store URLs as users type them, `{hp}` the server's host:port and `{db}` the database,
/// with the password each carries (`None`: the URL is refused before connecting). Every
/// password holds the segments `qZx1` and `wYv2`, so any part of it leaking is found.
const URL_SHAPES: &[(&str, Option<&str>)] = &[
    ("postgres://{u}:qZx1/wYv2@{hp}/{db}", Some("qZx1/wYv2")),
    ("postgres://{u}:qZx1@wYv2@{hp}/{db}", Some("qZx1@wYv2")),
    ("postgres://{u}:qZx1:wYv2@{hp}/{db}", Some("qZx1:wYv2")),
    ("postgres://{u}:qZx1%2FwYv2@{hp}/{db}", Some("qZx1/wYv2")),
    (
        "postgres://{u}:qZx1%40wYv2%3A@{hp}/{db}",
        Some("qZx1@wYv2:"),
    ),
    ("postgres://{u}:qZx1?wYv2@{hp}/{db}", Some("qZx1?wYv2")),
    ("postgres://{u}:qZx1#wYv2@{hp}/{db}", Some("qZx1#wYv2")),
    ("postgres://{u}:qZx1 wYv2@{hp}/{db}", Some("qZx1 wYv2")),
    (
        "postgresql://{u}:qZx1/wYv2@{hp}/{db}?sslmode=disable",
        Some("qZx1/wYv2"),
    ),
    ("postgres://{u}:qZx1/?@wYv2@{hp}/{db}", Some("qZx1/?@wYv2")),
    ("postgres://{u}:qZx1-wrong-wYv2@{hp}/{db}", None),
    ("postgres://{u}:qZx1%zzwYv2@{hp}/{db}", None),
    ("postgres://{u}:qZx1%wYv2@{hp}/{db}", None),
    ("postgres://{u}:qZx1wYv2@/{db}", None),
    ("postgres://{u}:qZx1wYv2@{hp}9999/{db}", None),
    ("postgres://{u}:qZx1wYv2/{db}", None),
    ("postgres://{u}:qZx1wYv2@{hp}/", None),
    ("postgres://{u}:qZx1wYv2@{hp}/{db}?fancy=1", None),
    ("postgres://{u}:qZx1wYv2@{hp}/{db}?sslmode=bogus", None),
    ("postgres://{u}:qZx1wYv2@[::1/{db}", None),
    ("mysql://{u}:qZx1/wYv2@{hp}/{db}", None),
];

#[test]
fn twenty_url_shapes_never_show_a_password() {
    let Some(db) = TestDatabase::create("twenty_url_shapes") else {
        return;
    };
    let admin = db.url_with_password();
    // The store's schema, made by the admin; then one role per password, with the writer
    // grants docs/records.md gives.
    tf().args(["records", "list", "--store", &admin])
        .assert()
        .success();
    let tag = tensorforge_store::new_run_id().replace('-', "");
    let role = |i: usize| format!("tf_leak_{i}_{}", &tag[tag.len() - 8..]);
    for (i, (_, pw)) in URL_SHAPES.iter().enumerate() {
        let Some(pw) = pw else { continue };
        db.execute(&format!(
            "CREATE ROLE {r} LOGIN PASSWORD '{pw}';
             GRANT CONNECT ON DATABASE {d} TO {r};
             GRANT USAGE ON SCHEMA tensorforge TO {r};
             GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA tensorforge TO {r};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA tensorforge TO {r};",
            r = role(i),
            d = db.url.dbname
        ));
    }
    let dir = tmp("shapes");
    let hp = format!("{}:{}", db.url.host, db.url.port);
    let mut connected = 0;
    for (i, (shape, pw)) in URL_SHAPES.iter().enumerate() {
        let url = shape
            .replace("{u}", &role(i))
            .replace("{hp}", &hp)
            .replace("{db}", &db.url.dbname);
        let dest = dir.join(format!("copy{i}.sqlite"));
        let dest = dest.to_str().unwrap();
        let runs: Vec<(Vec<&str>, Option<&str>)> = vec![
            (vec!["records", "list", "--store", &url], None),
            (vec!["records", "list", "--json", "--store", &url], None),
            (vec!["records", "list"], Some(url.as_str())),
            (vec!["records", "sync", "--from", &url, "--to", dest], None),
            (vec!["history", "--store", &url, "g0"], None),
        ];
        for (args, env) in runs {
            let mut c = tf();
            c.env_remove("TENSORFORGE_STORE")
                .env_remove("PGPASSWORD")
                .args(&args);
            if let Some(v) = env {
                c.env("TENSORFORGE_STORE", v);
            }
            let out = c.output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            for segment in ["qZx1", "wYv2"] {
                assert!(
                    !text.contains(segment),
                    "shape {i} {args:?} shows `{segment}`:\n{text}"
                );
            }
            assert!(!text.contains("panicked"), "{text}");
            if args[1] == "list" {
                // A URL that carries a password of the role connects; the others fail
                // with one line, exit 2.
                if pw.is_some() {
                    assert!(out.status.success(), "shape {i} {args:?}:\n{text}");
                    connected += 1;
                } else {
                    assert_eq!(out.status.code(), Some(2), "shape {i}:\n{text}");
                    assert_eq!(text.trim_end().lines().count(), 1, "{text}");
                }
            }
        }
    }
    // 10 shapes carry a role's password, each listed 3 ways.
    assert_eq!(connected, 30);
    for (i, (_, pw)) in URL_SHAPES.iter().enumerate() {
        if pw.is_some() {
            db.execute(&format!(
                "REVOKE ALL ON ALL TABLES IN SCHEMA tensorforge FROM {r};
                 REVOKE ALL ON ALL SEQUENCES IN SCHEMA tensorforge FROM {r};
                 REVOKE ALL ON SCHEMA tensorforge FROM {r};
                 REVOKE ALL ON DATABASE {d} FROM {r};
                 DROP ROLE {r};",
                r = role(i),
                d = db.url.dbname
            ));
        }
    }
}

/// The SQL block of docs/records.md's "Grants for a team's roles", with the database and
/// roles renamed for this test.
fn grants_sql(dbname: &str, writer: &str, reader: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/records.md"
    ))
    .unwrap();
    let section = doc
        .split("### Grants for a team's roles")
        .nth(1)
        .expect("docs/records.md has the grants section");
    let sql = section
        .split("```sql\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a sql block in the grants section");
    sql.replace("DATABASE tensorforge", &format!("DATABASE {dbname}"))
        .replace("tf_writer", writer)
        .replace("tf_reader", reader)
}

#[test]
fn grants_in_the_docs_let_a_writer_record_and_a_reader_only_read() {
    let Some(db) = TestDatabase::create("grants_in_the_docs") else {
        return;
    };
    let admin = db.url_with_password();
    tf().args(["records", "list", "--store", &admin])
        .assert()
        .success();
    let tag = tensorforge_store::new_run_id().replace('-', "");
    let tag = &tag[tag.len() - 8..];
    let (writer, reader) = (format!("tf_w_{tag}"), format!("tf_r_{tag}"));
    db.execute(&grants_sql(&db.url.dbname, &writer, &reader));
    let hp = format!("{}:{}", db.url.host, db.url.port);
    let w_url = format!("postgres://{writer}:writer-password@{hp}/{}", db.url.dbname);
    let r_url = format!("postgres://{reader}:reader-password@{hp}/{}", db.url.dbname);
    let dir = tmp("grants");
    let hf = hyperfine_file(&dir);
    let ingest = |url: &str| {
        tf().env_remove("TENSORFORGE_STORE")
            .args(["ingest", "hyperfine"])
            .arg(&hf)
            .args(["--workload-kind", "gemm", "--workload-name", "gemm_64"])
            .args([
                "--param", "m=64", "--dtype", "f32", "--record", "--store", url,
            ])
            .output()
            .unwrap()
    };
    let w = ingest(&w_url);
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    let listed = json(&["records", "list", "--json", "--store", &r_url]);
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
    let listed = json(&["records", "list", "--json", "--store", &w_url]);
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
    let r = ingest(&r_url);
    let err = String::from_utf8_lossy(&r.stderr).to_string();
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    db.execute(&format!(
        "DROP OWNED BY {writer}; DROP OWNED BY {reader}; DROP ROLE {writer}; DROP ROLE {reader};"
    ));
}

#[test]
fn a_silent_server_is_a_one_line_timeout_error_exit_2() {
    // No PostgreSQL needed: a listener that accepts and never answers.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming() {
            held.push(c);
        }
    });
    let url = format!("postgres://ci:Hush/Secret@127.0.0.1:{port}/db?connect_timeout=1");
    let t = std::time::Instant::now();
    let out = tf()
        .env_remove("TENSORFORGE_STORE")
        .args(["records", "list", "--store", &url])
        .output()
        .unwrap();
    assert!(t.elapsed() < std::time::Duration::from_secs(4));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("no answer within connect_timeout 1.000 s") && !err.contains("Secret"),
        "{err}"
    );
}
