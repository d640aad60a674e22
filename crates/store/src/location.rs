//! Where a store lives, from what a user types after `--store` (or in `TENSORFORGE_STORE`): a
//! file path means the embedded SQLite store; a `postgres://` or `postgresql://` URL names a
//! PostgreSQL server (`user[:password]@host[:port]/dbname`). A URL is never printed with its
//! password: [`StoreLocation`]'s `Display` and every error show it redacted.
//!
//! User, password and database name may be percent-encoded. Query parameters: `sslmode`
//! (`disable`, `allow` or `prefer`: this build speaks plain TCP only, so `require` and
//! `verify-*` are refused rather than silently downgraded) and `connect_timeout` (seconds).
//! Left out: TLS, Unix-socket hosts, several hosts, and every other libpq parameter (an
//! unknown one is an error naming it).

use crate::error::StoreError;
use std::fmt;
use std::path::PathBuf;

/// A PostgreSQL server location parsed from a URL; the password is kept out of `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    /// Role name (empty: the server's default).
    pub user: String,
    /// Password from the URL, if any (never displayed).
    password: Option<String>,
    /// Host name or address.
    pub host: String,
    /// TCP port (default 5432).
    pub port: u16,
    /// Database name.
    pub dbname: String,
    /// Seconds to wait for the server to answer a connection (`connect_timeout`).
    pub connect_timeout_s: Option<u64>,
}

impl PostgresUrl {
    /// Whether the URL carried a password.
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// The password the URL carried (for connecting only; never shown).
    pub(crate) fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The same server with another database name (tests create one database each).
    pub fn with_dbname(&self, dbname: &str) -> PostgresUrl {
        PostgresUrl {
            dbname: dbname.to_string(),
            ..self.clone()
        }
    }
}

/// `s` with `%XX` escapes decoded (a malformed escape or non-UTF-8 result is an error).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresUrl({self})")
    }
}

impl fmt::Display for PostgresUrl {
    /// `postgres://user:***@host:port/dbname` (the password, when there is one, as `***`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("postgres://")?;
        if !self.user.is_empty() {
            f.write_str(&self.user)?;
            if self.password.is_some() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}/{}", self.host, self.port, self.dbname)
        } else {
            write!(f, "{}:{}/{}", self.host, self.port, self.dbname)
        }
    }
}

/// A store: an embedded SQLite file or a PostgreSQL server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded store in this file.
    Sqlite(PathBuf),
    /// A PostgreSQL server.
    Postgres(PostgresUrl),
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(p) => write!(f, "{}", p.display()),
            StoreLocation::Postgres(u) => u.fmt(f),
        }
    }
}

/// `s` with any `:password@` of a URL replaced by `:***@`, for messages about text that did
/// not parse.
pub fn redact(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => s.to_string(),
        },
        None => s.to_string(),
    }
}

/// A store given as a path (a file path, or a URL typed where a path goes) as shown in
/// messages: any URL password as `***`.
pub fn shown(path: &std::path::Path) -> String {
    redact(&path.to_string_lossy())
}

/// Whether `path` names a SQLite store file that does not exist. A URL, or text that does
/// not parse (opening it reports why), is not a missing file.
pub fn is_missing_file(path: &std::path::Path) -> bool {
    match path.to_str() {
        Some(t) => StoreLocation::parse(t).is_ok_and(|l| l.is_missing_file()),
        None => !path.is_file(),
    }
}

impl StoreLocation {
    /// Parse what a user gave: `postgres://` / `postgresql://` URLs are PostgreSQL, any
    /// other `scheme://` is an error naming the scheme, everything else a SQLite file path.
    ///
    /// ```
    /// use tensorforge_store::location::StoreLocation;
    /// let l = StoreLocation::parse("postgres://ci:s3cret@db.internal/bench").unwrap();
    /// assert_eq!(l.to_string(), "postgres://ci:***@db.internal:5432/bench");
    /// assert!(matches!(StoreLocation::parse("runs.sqlite").unwrap(), StoreLocation::Sqlite(_)));
    /// ```
    pub fn parse(s: &str) -> Result<StoreLocation, StoreError> {
        let bad = |reason: &str| StoreError::invalid(redact(s), "store", redact(s), reason);
        let Some((scheme, rest)) = s.split_once("://") else {
            return Ok(StoreLocation::Sqlite(PathBuf::from(s)));
        };
        if !matches!(scheme, "postgres" | "postgresql") {
            return Err(StoreError::invalid(
                redact(s),
                "store",
                scheme,
                "unknown URL scheme; give a file path (SQLite) or a postgres:// URL",
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let dbname = path.split('#').next().unwrap_or("");
        let decode = |field: &str, v: &str| {
            percent_decode(v).ok_or_else(|| {
                StoreError::invalid(
                    redact(s),
                    field,
                    if field == "password" { "***" } else { v },
                    "malformed %-escape",
                )
            })
        };
        let dbname = decode("dbname", dbname)?;
        if dbname.is_empty() {
            return Err(bad(
                "the URL names no database (postgres://user@host:port/dbname)",
            ));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, pw)) => (decode("user", user)?, Some(decode("password", pw)?)),
                None => (decode("user", u)?, None),
            },
            None => (String::new(), None),
        };
        // `[v6::addr]:port` keeps its colons inside the brackets.
        let (host, port_text) = match hostport.strip_prefix('[') {
            Some(rest) => match rest.split_once(']') {
                Some((h, tail)) => (h, tail.strip_prefix(':')),
                None => return Err(bad("unclosed `[` in the host")),
            },
            None => match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            },
        };
        let port = match port_text {
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
            None => 5432,
        };
        if host.is_empty() {
            return Err(bad("the URL names no host"));
        }
        let mut connect_timeout_s = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslmode" => match v {
                    "disable" | "allow" | "prefer" => {}
                    _ => {
                        return Err(StoreError::invalid(
                            redact(s),
                            "sslmode",
                            v,
                            "this build connects without TLS (sslmode disable, allow or prefer); use a trusted network or a TLS tunnel",
                        ))
                    }
                },
                "connect_timeout" => {
                    connect_timeout_s = Some(v.parse::<u64>().ok().filter(|t| *t > 0).ok_or_else(
                        || {
                            StoreError::invalid(
                                redact(s),
                                "connect_timeout",
                                v,
                                "expected a whole number of seconds above 0",
                            )
                        },
                    )?)
                }
                _ => {
                    return Err(StoreError::invalid(
                        redact(s),
                        k,
                        v,
                        "unknown URL parameter (sslmode and connect_timeout are understood)",
                    ))
                }
            }
        }
        Ok(StoreLocation::Postgres(PostgresUrl {
            user,
            password,
            host: host.to_string(),
            port,
            dbname,
            connect_timeout_s,
        }))
    }

    /// Whether this is a SQLite file that does not exist yet (commands that only read say
    /// "no store" instead of creating an empty one). Always false for a server.
    pub fn is_missing_file(&self) -> bool {
        matches!(self, StoreLocation::Sqlite(p) if !p.is_file())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_never_show_the_password() {
        let l = StoreLocation::parse("postgresql://bench:pa:ss@10.0.0.5:6543/tf").unwrap();
        let StoreLocation::Postgres(u) = &l else {
            panic!("{l:?}")
        };
        assert_eq!(
            (u.user.as_str(), u.port, u.dbname.as_str()),
            ("bench", 6543, "tf")
        );
        assert!(u.has_password());
        assert_eq!(l.to_string(), "postgres://bench:***@10.0.0.5:6543/tf");
        assert!(!format!("{l:?}").contains("pa:ss"));
        let l = StoreLocation::parse("postgres://localhost/tf").unwrap();
        assert_eq!(l.to_string(), "postgres://localhost:5432/tf");
        assert_eq!(
            StoreLocation::parse("/tmp/a b.sqlite").unwrap(),
            StoreLocation::Sqlite(PathBuf::from("/tmp/a b.sqlite"))
        );
    }

    #[test]
    fn bad_urls_name_the_field_without_the_password() {
        for (url, needle) in [
            ("postgres://u:secret@host:99999/db", "port"),
            ("postgres://u:secret@host:5432/", "no database"),
            ("postgres://u:secret@:5432/db", "no host"),
            ("mysql://u:secret@host/db", "mysql"),
        ] {
            let e = StoreLocation::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("store"), "{url}: {e}");
            assert!(!e.contains("secret"), "{url}: {e}");
        }
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("plain/path"), "plain/path");
        for (url, field) in [
            ("postgres://u:secret@h/db?sslmode=require", "sslmode"),
            (
                "postgres://u:secret@h/db?connect_timeout=x",
                "connect_timeout",
            ),
            (
                "postgres://u:secret@h/db?target_session_attrs=any",
                "target_session_attrs",
            ),
            ("postgres://u:secret@[::1/db", "host"),
        ] {
            let e = StoreLocation::parse(url).unwrap_err().to_string();
            assert!(e.contains(field) && !e.contains("secret"), "{url}: {e}");
        }
    }

    #[test]
    fn escapes_ipv6_and_parameters() {
        // "p@ss:w/rd" percent-encoded: @ = %40, : = %3A, / = %2F.
        let l = StoreLocation::parse(
            "postgres://ci%2Dbot:p%40ss%3Aw%2Frd@[::1]:6000/bench%20db?sslmode=disable&connect_timeout=3",
        )
        .unwrap();
        let StoreLocation::Postgres(u) = &l else {
            panic!("{l:?}")
        };
        assert_eq!(u.user, "ci-bot");
        assert_eq!(u.password(), Some("p@ss:w/rd"));
        assert_eq!((u.host.as_str(), u.port), ("::1", 6000));
        assert_eq!(u.dbname, "bench db");
        assert_eq!(u.connect_timeout_s, Some(3));
        assert!(!l.to_string().contains("p@ss"));
        assert!(StoreLocation::parse("postgres://u:%zz@h/db")
            .unwrap_err()
            .to_string()
            .contains("%-escape"));
    }
}
