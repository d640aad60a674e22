//! The PostgreSQL store over TLS against a real server of the test's own, started with
//! certificates from a throw-away CA (made with the `openssl` command): the server accepts
//! TCP connections only with TLS (`hostnossl ... reject`), so every connection that works
//! here is encrypted. Checked: `verify-full` with the right CA and host name, its refusal of
//! a certificate for another name and of an unknown CA, `verify-ca` accepting another name,
//! `require` and `prefer` encrypting without a CA, `disable` refused by the server, and a
//! client certificate logging in a role that has no password (`cert` authentication).

use std::path::Path;
use std::process::Command;
use tensorforge_store::testing::{PrivateServer, REQUIRED_VAR};
use tensorforge_store::Store;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`NAME.crt`, `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// A certificate `NAME.crt` / `NAME.key` for common name `cn`, signed by CA `ca`, with the
/// extensions in `ext` (an `openssl x509 -extfile` line).
fn make_cert(dir: &Path, name: &str, cn: &str, ca: &str, ext: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), format!("{ext}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

fn have_openssl() -> bool {
    let ok = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var(REQUIRED_VAR).map_or(true, |v| v != "1"),
            "{REQUIRED_VAR}=1 but the openssl command is missing (the TLS test makes its CA with it)"
        );
        eprintln!("SKIPPED (PostgreSQL) TLS: no openssl command to make a test CA");
    }
    ok
}

#[test]
fn tls_modes_against_a_server_that_requires_tls() {
    if !have_openssl() {
        return;
    }
    let certs = std::env::temp_dir().join(format!("tf-tls-{}", tensorforge_store::new_run_id()));
    std::fs::create_dir_all(&certs).unwrap();
    make_ca(&certs, "ca");
    make_ca(&certs, "other-ca");
    // The server's certificate names `localhost` only, so 127.0.0.1 is "another name".
    make_cert(
        &certs,
        "server",
        "localhost",
        "ca",
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth",
    );
    make_cert(
        &certs,
        "client",
        "tf_cert",
        "ca",
        "extendedKeyUsage=clientAuth",
    );
    let server_files = certs.clone();
    let Some(server) = PrivateServer::start(
        "tls_modes",
        "-c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=ca.crt",
        move |data| {
            for f in ["server.crt", "server.key", "ca.crt"] {
                std::fs::copy(server_files.join(f), data.join(f)).unwrap();
            }
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(
                    data.join("server.key"),
                    std::fs::Permissions::from_mode(0o600),
                )
                .unwrap();
            }
            // TLS or nothing over TCP; the role tf_cert logs in by certificate only.
            let hba = data.join("pg_hba.conf");
            let old = std::fs::read_to_string(&hba).unwrap();
            std::fs::write(
                &hba,
                format!(
                    "hostnossl all all 127.0.0.1/32 reject\n\
                     hostssl all tf_cert 127.0.0.1/32 cert\n\
                     {old}"
                ),
            )
            .unwrap();
        },
    ) else {
        return;
    };
    let mut admin = server.socket_client();
    admin.batch_execute("CREATE ROLE tf_cert LOGIN").unwrap();
    admin
        .batch_execute("CREATE DATABASE tf_cert OWNER tf_cert")
        .unwrap();
    let p = |f: &str| certs.join(f).display().to_string();
    let ok = |url: String| match Store::open(Path::new(&url)) {
        Ok(s) => s.list_runs().unwrap().len(),
        Err(e) => panic!("{e}"),
    };
    let refused = |url: String| match Store::open(Path::new(&url)) {
        Ok(_) => panic!("connected: {}", tensorforge_store::location::redact(&url)),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        ok(server.url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={}", p("ca.crt"))
        )),
        0
    );
    let e = refused(server.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", p("ca.crt")),
    ));
    assert!(
        e.contains("cannot connect") && e.contains("certificate"),
        "{e}"
    );
    assert!(!e.contains(PrivateServer::PASSWORD), "{e}");
    let e = refused(server.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", p("other-ca.crt")),
    ));
    assert!(
        e.contains("UnknownIssuer") || e.contains("unknown issuer"),
        "{e}"
    );
    ok(server.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", p("ca.crt")),
    ));
    // `require` with a root certificate verifies the chain, as libpq does.
    let e = refused(server.url(
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={}", p("other-ca.crt")),
    ));
    assert!(e.contains("certificate"), "{e}");
    ok(server.url("127.0.0.1", "sslmode=require"));
    ok(server.url("127.0.0.1", "sslmode=prefer"));
    ok(server.url("127.0.0.1", ""));
    let e = refused(server.url("127.0.0.1", "sslmode=disable"));
    assert!(
        e.contains("no encryption") || e.contains("pg_hba.conf"),
        "{e}"
    );
    // A client certificate logs in tf_cert, which has no password.
    let cert_url = |extra: &str| {
        format!(
            "postgres://tf_cert@localhost:{}/tf_cert?sslmode=verify-full&sslrootcert={}{extra}",
            server.port,
            p("ca.crt")
        )
    };
    ok(cert_url(&format!(
        "&sslcert={}&sslkey={}",
        p("client.crt"),
        p("client.key")
    )));
    let e = refused(cert_url(""));
    assert!(e.contains("tf_cert"), "{e}");
    let e = refused(cert_url(&format!(
        "&sslcert={}&sslkey={}",
        p("client.crt"),
        p("server.key")
    )));
    assert!(
        e.contains("sslkey") && e.contains("does not go with sslcert"),
        "{e}"
    );
    std::fs::remove_dir_all(&certs).unwrap();
}
