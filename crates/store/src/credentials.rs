//! Where a PostgreSQL store's role name and password come from, as libpq looks for them:
//! the URL first, then `PGUSER` / `PGPASSWORD`, then the password file (`PGPASSFILE`, else
//! `~/.pgpass`) whose lines are `host:port:database:user:password` with `*` matching
//! anything and `\:` / `\\` escaping. Like libpq, a password file readable by group or others
//! is ignored. The password itself is never returned in a message: only where it came from
//! ([`PasswordSource`]). Left out: `PGSERVICE` service files, Kerberos/GSS and certificates.

use crate::location::PostgresUrl;
use std::path::{Path, PathBuf};

/// Where the password used to connect came from (shown in authentication errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordSource {
    /// The URL's `user:password@`.
    Url,
    /// The `PGPASSWORD` environment variable.
    Environment,
    /// A matching line of this password file.
    PasswordFile(PathBuf),
    /// This password file exists but was ignored: readable by group or others.
    IgnoredPasswordFile(PathBuf),
    /// None was found (the server may still trust the connection).
    None,
}

impl std::fmt::Display for PasswordSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PasswordSource::Url => f.write_str("password from the URL"),
            PasswordSource::Environment => f.write_str("password from PGPASSWORD"),
            PasswordSource::PasswordFile(p) => write!(f, "password from {}", p.display()),
            PasswordSource::IgnoredPasswordFile(p) => write!(
                f,
                "no password: {} was ignored because group or others can read it (chmod 600)",
                p.display()
            ),
            PasswordSource::None => f.write_str("no password given (URL, PGPASSWORD or ~/.pgpass)"),
        }
    }
}

/// The role name and password to connect to `url` with, and where the password came from.
pub fn resolve(url: &PostgresUrl) -> (String, Option<String>, PasswordSource) {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let user = if url.user.is_empty() {
        var("PGUSER")
            .or_else(|| var("USER"))
            .unwrap_or_else(|| "postgres".to_string())
    } else {
        url.user.clone()
    };
    if let Some(p) = url.password() {
        return (user, Some(p.to_string()), PasswordSource::Url);
    }
    if let Some(p) = var("PGPASSWORD") {
        return (user, Some(p), PasswordSource::Environment);
    }
    let file = var("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| Path::new(&h).join(".pgpass")));
    let Some(file) = file.filter(|f| f.is_file()) else {
        return (user, None, PasswordSource::None);
    };
    if group_or_other_readable(&file) {
        return (user, None, PasswordSource::IgnoredPasswordFile(file));
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    match lookup(&text, &url.host, url.port, &url.dbname, &user) {
        Some(p) => (user, Some(p), PasswordSource::PasswordFile(file)),
        None => (user, None, PasswordSource::None),
    }
}

#[cfg(unix)]
fn group_or_other_readable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

#[cfg(not(unix))]
fn group_or_other_readable(_: &Path) -> bool {
    false
}

/// The password of the first line of a password file matching the connection.
pub fn lookup(text: &str, host: &str, port: u16, dbname: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    let want = [host, port.as_str(), dbname, user];
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .find_map(|line| {
            let fields = split_fields(line);
            let [h, p, d, u, pw] = fields.as_slice() else {
                return None;
            };
            let matches = [h, p, d, u]
                .iter()
                .zip(want)
                .all(|(f, w)| f.as_str() == "*" || f.as_str() == w);
            matches.then(|| pw.clone())
        })
}

/// Split one line on unescaped `:`, removing the escapes (`\:` and `\\`).
fn split_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    out.last_mut().expect("never empty").push(n);
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            c => out.last_mut().expect("never empty").push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_lines_match_like_libpq() {
        let text = "# comment\n\
                    db.internal:5432:bench:ci:first\n\
                    *:5432:*:ci:second\n\
                    h\\:x:1:d:u:es\\:c\\\\aped\n\
                    *:*:*:*:any\n";
        assert_eq!(
            lookup(text, "db.internal", 5432, "bench", "ci").unwrap(),
            "first"
        );
        assert_eq!(lookup(text, "other", 5432, "x", "ci").unwrap(), "second");
        assert_eq!(lookup(text, "h:x", 1, "d", "u").unwrap(), "es:c\\aped");
        assert_eq!(lookup(text, "other", 6000, "x", "ci").unwrap(), "any");
        assert_eq!(lookup("a:1:d:u:p\n", "a", 2, "d", "u"), None);
        // A password may contain ':' unescaped after the fifth field starts.
        assert_eq!(lookup("*:*:*:*:a:b\n", "h", 1, "d", "u").unwrap(), "a:b");
    }

    #[test]
    fn sources_never_show_the_password() {
        let url = match crate::location::StoreLocation::parse("postgres://ci:hunter2@h/db") {
            Ok(crate::location::StoreLocation::Postgres(u)) => *u,
            other => panic!("{other:?}"),
        };
        let (user, pw, src) = resolve(&url);
        assert_eq!((user.as_str(), pw.as_deref()), ("ci", Some("hunter2")));
        assert!(!src.to_string().contains("hunter2"));
        assert_eq!(src, PasswordSource::Url);
    }
}
