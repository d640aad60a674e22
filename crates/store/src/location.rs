//! Where a store lives, from what a user types after `--store` (or in `TENSORFORGE_STORE`): a
//! file path means the embedded SQLite store; a `postgres://` or `postgresql://` URL names a
//! PostgreSQL server (`user[:password]@host[:port]/dbname`). A URL is never printed with its
//! password: [`StoreLocation`]'s `Display` and every error show it redacted.
//!
//! This build has only the SQLite engine. A PostgreSQL URL is recognised and refused with a
//! one-line error instead of being taken as a file name (which silently created a local
//! SQLite file named after the URL). Left out: query parameters and Unix-socket hosts.

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
}

impl PostgresUrl {
    /// Whether the URL carried a password.
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }
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
        write!(f, "{}:{}/{}", self.host, self.port, self.dbname)
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
        let dbname = path.split(['?', '#']).next().unwrap_or("");
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
                Some((user, pw)) => (user.to_string(), Some(pw.to_string())),
                None => (u.to_string(), None),
            },
            None => (String::new(), None),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
            ),
            None => (hostport, 5432),
        };
        if host.is_empty() {
            return Err(bad("the URL names no host"));
        }
        Ok(StoreLocation::Postgres(PostgresUrl {
            user,
            password,
            host: host.to_string(),
            port,
            dbname: dbname.to_string(),
        }))
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
    }
}
