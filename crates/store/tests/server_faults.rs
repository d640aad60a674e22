//! The PostgreSQL store against servers that misbehave: one that accepts a connection and
//! never answers, nothing listening, a server refusing connections while it starts up, a
//! frozen postmaster (SIGSTOP), a backend frozen in the middle of a write, a lock held by
//! another session; every client operation must end within its timeout with a one-line
//! error naming what timed out. Fake servers (plain TCP listeners in this process) need no
//! PostgreSQL; the rest use the shared test server (`TENSORFORGE_TEST_POSTGRES`) or a server
//! of the test's own (`testing::PrivateServer`), printing `SKIPPED` without one unless CI
//! requires it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tensorforge_store::testing::{free_port, record, PrivateServer, TestDatabase};
use tensorforge_store::{new_run_id, Store};

fn open(url: &str) -> Result<Store, String> {
    Store::open(Path::new(url)).map_err(|e| e.to_string())
}

/// Notes the store gave, captured for every test of this binary (filter by port).
fn notes() -> &'static Mutex<Vec<String>> {
    static NOTES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    NOTES.get_or_init(|| {
        tensorforge_store::notices::set_sink(|m| notes().lock().unwrap().push(m.to_string()));
        Mutex::new(Vec::new())
    })
}

fn notes_about(port: u16) -> Vec<String> {
    notes()
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n.contains(&format!(":{port}/")))
        .cloned()
        .collect()
}

fn signal(pid: i32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn a_server_that_never_answers_fails_the_connection_at_connect_timeout() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // Accept and hold every connection, answering nothing (as a hung server or a black-holing
    // proxy would).
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming() {
            held.push(c);
        }
    });
    let t = Instant::now();
    let e = open(&format!(
        "postgres://ci:pw@127.0.0.1:{port}/db?connect_timeout=2"
    ))
    .unwrap_err();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "{took:?}: {e}"
    );
    assert!(
        e.contains("no answer within connect_timeout 2.000 s")
            && e.contains("nothing was recorded"),
        "{e}"
    );
    assert!(!e.contains(":pw@") && !e.contains('\n'), "{e}");
}

#[test]
fn nothing_listening_is_retried_with_backoff_then_reported() {
    let port = free_port();
    let t = Instant::now();
    let e = open(&format!(
        "postgres://ci:pw@127.0.0.1:{port}/db?connect_retries=2"
    ))
    .unwrap_err();
    // Two pauses: 0.25 s + 0.5 s.
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(740) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!(
        e.contains("cannot connect") && e.contains("after 2 retries"),
        "{e}"
    );
    let t = Instant::now();
    let e = open(&format!(
        "postgres://ci:pw@127.0.0.1:{port}/db?connect_retries=0"
    ))
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_millis(500), "{e}");
    assert!(!e.contains("retries"), "{e}");
}

/// A fake server: declines TLS, reads the start-up message, and answers the first
/// `starting` connections with FATAL 57P03 ("the database system is starting up") and
/// every later one with FATAL 28P01 (password authentication failed). Returns the port and
/// the count of connections it saw.
fn fake_starting_server(starting: usize) -> (u16, Arc<Mutex<usize>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let n = {
                let mut s = count.lock().unwrap();
                *s += 1;
                *s
            };
            let (code, message) = if n <= starting {
                ("57P03", "the database system is starting up")
            } else {
                ("28P01", "password authentication failed for user \"ci\"")
            };
            let _ = serve_one_error(&mut c, code, message);
        }
    });
    (port, seen)
}

fn serve_one_error(c: &mut TcpStream, code: &str, message: &str) -> std::io::Result<()> {
    loop {
        let mut len = [0u8; 4];
        c.read_exact(&mut len)?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        c.read_exact(&mut body)?;
        // SSLRequest (code 80877103) and GSSENCRequest (80877104): decline, read on.
        if body.len() == 4
            && matches!(
                u32::from_be_bytes(body[..4].try_into().unwrap()),
                80877103 | 80877104
            )
        {
            c.write_all(b"N")?;
            continue;
        }
        break;
    }
    let mut fields = Vec::new();
    for (k, v) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        fields.push(k);
        fields.extend_from_slice(v.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut msg = vec![b'E'];
    msg.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
    msg.extend_from_slice(&fields);
    c.write_all(&msg)
}

#[test]
fn starting_up_is_retried_but_an_authentication_failure_never_is() {
    let (port, seen) = fake_starting_server(2);
    let e = open(&format!("postgres://ci:pw@127.0.0.1:{port}/db")).unwrap_err();
    // Two answers of 57P03, each retried, then the authentication failure ends it at once:
    // 3 connections, not the 6 that five retries allow.
    assert_eq!(*seen.lock().unwrap(), 3, "{e}");
    assert!(e.contains("authentication failed for role `ci`"), "{e}");
    let (port, seen) = fake_starting_server(100);
    let e = open(&format!(
        "postgres://ci:pw@127.0.0.1:{port}/db?connect_retries=1"
    ))
    .unwrap_err();
    assert_eq!(*seen.lock().unwrap(), 2, "{e}");
    assert!(
        e.contains("starting up") && e.contains("after 1 retries"),
        "{e}"
    );
}

#[test]
fn a_backend_frozen_mid_write_ends_the_write_at_the_client_deadline() {
    let Some(db) = TestDatabase::create("a_backend_frozen_mid_write") else {
        return;
    };
    let url = format!("{}?statement_timeout=1s", db.url_with_password());
    let store = open(&url).unwrap();
    let mut admin = db.client();
    let run = new_run_id();
    let recs: Vec<_> = (0..3)
        .map(|i| record(&run, i, "m", 1_700_000_000, 1, None))
        .collect();
    let mut frozen = None;
    let mut stopped_at = None;
    let e = store
        .insert_run_with_hook(&recs, |i| {
            if i == 0 {
                let pid: i32 = admin
                    .query_one(
                        "SELECT pid FROM pg_stat_activity
                         WHERE datname = current_database() AND application_name = 'tensorforge'",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                signal(pid, "-STOP");
                frozen = Some(pid);
                stopped_at = Some(Instant::now());
            }
        })
        .unwrap_err()
        .to_string();
    let took = stopped_at.unwrap().elapsed();
    let pid = frozen.unwrap();
    signal(pid, "-CONT");
    // The server cannot cancel anything while frozen; the client gives up at
    // statement_timeout (1 s) + 2 s.
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(6),
        "{took:?}: {e}"
    );
    assert!(
        e.contains("insert record: timed out: the server did not answer within 3.000 s")
            && e.contains("nothing of it is stored"),
        "{e}"
    );
    // The store gives up on that connection: later calls fail at once.
    let t = Instant::now();
    let again = store.list_runs().unwrap_err().to_string();
    assert!(t.elapsed() < Duration::from_millis(200) && again.contains("given up earlier"));
    // Resumed, the backend finds its client gone and rolls back: the run never appears.
    let fresh = open(&db.url_with_password()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if n == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(fresh.run_info(&run).unwrap().is_none());
    assert!(fresh.list_runs().unwrap().is_empty());
}

#[test]
fn a_lock_held_elsewhere_ends_the_write_at_lock_timeout() {
    let Some(db) = TestDatabase::create("a_lock_held_elsewhere") else {
        return;
    };
    let store = open(&format!("{}?lock_timeout=500", db.url_with_password())).unwrap();
    let mut admin = db.client();
    let mut tx = admin.transaction().unwrap();
    tx.batch_execute("LOCK TABLE tensorforge.runs IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let run = new_run_id();
    let t = Instant::now();
    let e = store
        .insert_run(&[record(&run, 0, "m", 1_700_000_000, 1, None)])
        .unwrap_err()
        .to_string();
    assert!(t.elapsed() < Duration::from_secs(3), "{e}");
    assert!(
        e.contains("timed out waiting for a lock") && e.contains("lock_timeout 500.00 ms"),
        "{e}"
    );
    tx.rollback().unwrap();
    // The connection is still good after a server-side timeout.
    store
        .insert_run(&[record(&run, 0, "m", 1_700_000_000, 1, None)])
        .unwrap();
}

#[test]
fn a_frozen_postmaster_fails_a_new_connection_at_connect_timeout() {
    let Some(server) = PrivateServer::start("a_frozen_postmaster", "", |_| {}) else {
        return;
    };
    let url = server.url("127.0.0.1", "connect_timeout=2");
    // Connected before the freeze: the backend is its own process and keeps answering.
    let before = open(&url).unwrap();
    let pid = server.postmaster_pid();
    signal(pid, "-STOP");
    let t = Instant::now();
    let e = open(&url);
    let took = t.elapsed();
    let listed = before.list_runs().map(|r| r.len());
    signal(pid, "-CONT");
    let e = e.unwrap_err();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "{took:?}: {e}"
    );
    assert!(
        e.contains("no answer within connect_timeout 2.000 s"),
        "{e}"
    );
    assert!(!e.contains(PrivateServer::PASSWORD), "{e}");
    assert_eq!(listed.unwrap(), 0);
}

#[test]
fn a_server_starting_up_is_waited_for_and_the_retry_is_noted() {
    notes();
    let Some(server) = PrivateServer::start("a_server_starting_up", "", |_| {}) else {
        return;
    };
    let url = server.url("127.0.0.1", "");
    open(&url).unwrap();
    server.stop_server();
    let server = Arc::new(server);
    let s2 = server.clone();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        s2.start_server(false);
    });
    // Refused for about a second: retried after 0.25, 0.5 and 1 s, then connected.
    let store = open(&url);
    starter.join().unwrap();
    let store = store.unwrap();
    assert!(store.list_runs().unwrap().is_empty());
    let n = notes_about(server.port);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(n[0].contains("connected after retrying"), "{n:?}");
    assert!(!n[0].contains(PrivateServer::PASSWORD));
}

#[test]
fn an_explicit_prefer_that_ends_unencrypted_is_noted() {
    notes();
    let Some(db) = TestDatabase::create("an_explicit_prefer") else {
        return;
    };
    let port = db.url.port;
    // The test server offers no TLS (CI starts it without certificates).
    let before = notes_about(port).len();
    open(&format!("{}?sslmode=prefer", db.url_with_password())).unwrap();
    let n = notes_about(port);
    let new: Vec<_> = n[before..]
        .iter()
        .filter(|m| m.contains(&db.url.dbname))
        .collect();
    assert_eq!(new.len(), 1, "{n:?}");
    assert!(new[0].contains("WITHOUT TLS") && new[0].contains("sslmode=require"));
    // Not given (the default prefer), nothing is noted.
    open(&db.url_with_password()).unwrap();
    assert_eq!(
        notes_about(port)
            .iter()
            .filter(|m| m.contains(&db.url.dbname))
            .count(),
        1
    );
}
