//! Where a store lives, from what a user types after `--store` (or in `TENSORFORGE_STORE`): a
//! file path means the embedded SQLite store; a `postgres://` or `postgresql://` URL names a
//! PostgreSQL server (`user[:password]@host[:port]/dbname`). A URL is never printed with its
//! password: [`StoreLocation`]'s `Display` and every error show it redacted.
//!
//! User, password and database name may be percent-encoded; a password holding a raw `/`,
//! `@` or `:` is read up to the last `@`. Query parameters (TLS, timeouts, keepalive,
//! retries) are read by [`crate::settings`]; an unknown one is an error naming it. Left out:
//! Unix-socket hosts, several hosts, and libpq parameters outside [`crate::settings`].

use crate::error::StoreError;
use crate::settings::ConnectionSettings;
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
    /// TLS, timeouts, keepalive and retries (the URL's query parameters).
    pub settings: ConnectionSettings,
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

/// Whether `a` reads as `host` or `host:port` (a port of digits; IPv6 in brackets).
fn is_host_port(a: &str) -> bool {
    let tail = match a.strip_prefix('[') {
        Some(r) => match r.split_once(']') {
            Some((_, t)) => t,
            None => return false,
        },
        None => a,
    };
    match tail.rsplit_once(':') {
        Some((h, p)) => !h.contains(':') && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()),
        None => true,
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
    /// A PostgreSQL server (boxed: its settings make it much larger than a path).
    Postgres(Box<PostgresUrl>),
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(p) => write!(f, "{}", p.display()),
            StoreLocation::Postgres(u) => u.fmt(f),
        }
    }
}

/// `s` (a store URL as typed, whole, possibly malformed) with anything that may be a password
/// replaced by `***`, for messages about it.
///
/// The userinfo ends at the LAST `@`, so a password holding a raw `/`, `@`, `:`, `?` or
/// space is covered whole. Without any `@`, text after the first `:` that is not a port
/// number (`postgres://ci:pw/x`: a URL missing its host) is redacted to the end. This errs
/// on the side of hiding too much: a `@` later in the URL (in a parameter) hides the host as
/// well.
///
/// ```
/// use tensorforge_store::location::redact;
/// assert_eq!(redact("postgres://tf:Leak/Me@h:5432/db"), "postgres://tf:***@h:5432/db");
/// assert_eq!(redact("postgres://tf:Leak/Me"), "postgres://tf:***");
/// assert_eq!(redact("postgres://h:5432/db"), "postgres://h:5432/db");
/// ```
pub fn redact(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    if let Some(at) = rest.rfind('@') {
        let userinfo = &rest[..at];
        return match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
            None => s.to_string(),
        };
    }
    // No userinfo: a `:` in the authority must be followed by a port (IPv6 keeps its colons
    // inside brackets).
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let host_end = if authority.starts_with('[') {
        authority
            .find(']')
            .map(|i| i + 1)
            .unwrap_or(authority.len())
    } else {
        0
    };
    match authority[host_end..].find(':') {
        Some(i) => {
            let colon = host_end + i;
            let port = &authority[colon + 1..];
            if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
                s.to_string()
            } else {
                format!("{scheme}://{}:***", &rest[..colon])
            }
        }
        None => s.to_string(),
    }
}

/// `text` with every occurrence of each of `secrets` (and of its %-encoded form) replaced by
/// `***`: the last line of defence for a message that might quote a URL as typed.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let encoded: String = secret
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        for form in [secret.as_str(), encoded.as_str(), &encoded.to_lowercase()] {
            if !form.is_empty() {
                out = out.replace(form, "***");
            }
        }
    }
    out
}

/// The password a store argument carries, as typed and decoded, for [`scrub`]: the text
/// between the first `:` of the userinfo and its last `@` (see [`redact`]), or what a parse
/// of the URL found. Empty for a file path.
pub fn secrets_in(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((_, rest)) = s.split_once("://") {
        let userinfo = match rest.rfind('@') {
            Some(at) => &rest[..at],
            None => rest,
        };
        if let Some((_, pw)) = userinfo.split_once(':') {
            let authority = rest.split(['/', '?']).next().unwrap_or("");
            if rest.contains('@') {
                out.push(pw.to_string());
            } else if !is_host_port(authority) {
                // No `@`: what `redact` hides, to the end and to the first `/`.
                out.push(pw.to_string());
                out.extend(authority.split_once(':').map(|(_, p)| p.to_string()));
            }
            let decoded: Vec<String> = out.iter().filter_map(|p| percent_decode(p)).collect();
            out.extend(decoded);
        }
        if let Ok(StoreLocation::Postgres(u)) = StoreLocation::parse(s) {
            out.extend(u.password().map(str::to_string));
        }
    }
    out.retain(|p| !p.is_empty());
    out.sort();
    out.dedup();
    out
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
        // The userinfo ends at an `@` before the first `/`, as libpq reads it. When the
        // authority before that `/` has no `@` and is not `host[:port]`, but an `@` follows,
        // the password held a raw `/`: the userinfo then ends at the last `@` before any `?`
        // that follows the first `@`.
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) if !a.contains('@') && p.contains('@') && !is_host_port(a) => {
                let first_at = rest.find('@').expect("an @ follows");
                let end = rest[first_at..]
                    .find('?')
                    .map_or(rest.len(), |q| first_at + q);
                let at = rest[..end].rfind('@').expect("an @ is before it");
                let after = &rest[at + 1..];
                let hostport_len = after.find('/').unwrap_or(after.len());
                let path = after.get(hostport_len + 1..).unwrap_or("");
                (&rest[..at + 1 + hostport_len], path)
            }
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
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
        if dbname.contains('@') {
            return Err(bad(
                "a raw `@` after the host; %-encode `@` and `/` in a password (as %40 and %2F)",
            ));
        }
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
        if host.contains(['@', '/', '?', '#']) || host.contains(char::is_whitespace) {
            return Err(bad(
                "the host holds `@`, `/`, `?`, `#` or a space; %-encode such characters in the password (e.g. `/` as %2F)",
            ));
        }
        let mut settings = ConnectionSettings::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).unwrap_or_else(|| v.to_string());
            settings
                .set(k, &v)
                .map_err(|reason| StoreError::invalid(redact(s), k, &v, reason))?;
        }
        settings
            .check()
            .map_err(|(k, reason)| StoreError::invalid(redact(s), k, "…", reason))?;
        Ok(StoreLocation::Postgres(Box::new(PostgresUrl {
            user,
            password,
            host: host.to_string(),
            port,
            dbname,
            settings,
        })))
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
            ("postgres://u:secret@h/db?sslmode=require-ish", "sslmode"),
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

    /// URL shapes a user may type, with the password each carries (`None`: the URL is
    /// refused). Every password is made of the segments `qZx1` and `wYv2` (and a separator),
    /// so a leak of any part of it is found by looking for either segment.
    pub(crate) const SHAPES: &[(&str, Option<&str>)] = &[
        ("postgres://tf:qZx1/wYv2@h:5/db", Some("qZx1/wYv2")),
        ("postgres://tf:qZx1@wYv2@h:5/db", Some("qZx1@wYv2")),
        ("postgres://tf:qZx1:wYv2@h:5/db", Some("qZx1:wYv2")),
        ("postgres://tf:qZx1%2FwYv2@h:5/db", Some("qZx1/wYv2")),
        ("postgres://tf:qZx1%40wYv2%3A@h:5/db", Some("qZx1@wYv2:")),
        ("postgres://tf:qZx1?wYv2@h:5/db", Some("qZx1?wYv2")),
        ("postgres://tf:qZx1#wYv2@h:5/db", Some("qZx1#wYv2")),
        ("postgres://tf:qZx1 wYv2@h:5/db", Some("qZx1 wYv2")),
        (
            "postgresql://tf:qZx1/wYv2@h:5/db?sslmode=disable",
            Some("qZx1/wYv2"),
        ),
        ("postgres://tf:qZx1/?@wYv2@h:5/db", Some("qZx1/?@wYv2")),
        ("postgres://tf:1/2@h:5/db", None),
        ("postgres://tf:qZx1/wYv2@[::1]:5/db", Some("qZx1/wYv2")),
        ("postgres://tf:qZx1%zzwYv2@h:5/db", None),
        ("postgres://tf:qZx1%wYv2@h:5/db", None),
        ("postgres://tf:qZx1wYv2@/db", None),
        ("postgres://tf:qZx1wYv2@h:99999/db", None),
        ("postgres://tf:qZx1wYv2/db", None),
        ("postgres://tf:qZx1wYv2@h:5/", None),
        ("postgres://tf:qZx1wYv2@h:5/db?fancy=1", None),
        ("postgres://tf:qZx1wYv2@h:5/db?sslmode=bogus", None),
        ("postgres://tf:qZx1wYv2@[::1/db", None),
        ("mysql://tf:qZx1/wYv2@h/db", None),
    ];

    #[test]
    fn twenty_url_shapes_parse_or_fail_without_showing_the_password() {
        assert!(SHAPES.len() >= 20);
        for (url, want) in SHAPES {
            let shown = match StoreLocation::parse(url) {
                Ok(l) => {
                    let StoreLocation::Postgres(u) = &l else {
                        panic!("{url}: {l:?}")
                    };
                    assert_eq!(u.password(), *want, "{url}");
                    assert_eq!((u.user.as_str(), u.dbname.as_str()), ("tf", "db"), "{url}");
                    format!("{l} {l:?} {}", redact(url))
                }
                Err(e) => {
                    assert_eq!(*want, None, "{url}: {e}");
                    format!("{e} {e:?} {}", redact(url))
                }
            };
            for segment in ["qZx1", "wYv2"] {
                assert!(!shown.contains(segment), "{url} shows `{segment}`: {shown}");
            }
            // The defence of last resort finds the password in a message quoting the URL.
            let secrets = secrets_in(url);
            assert!(!secrets.is_empty(), "{url}");
            let scrubbed = scrub(&format!("cannot use {url}"), &secrets);
            if !url.starts_with("mysql") {
                assert!(
                    !scrubbed.contains("qZx1") || !scrubbed.contains("wYv2"),
                    "{scrubbed}"
                );
            }
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
        assert_eq!(u.settings.connect, std::time::Duration::from_secs(3));
        assert!(!l.to_string().contains("p@ss"));
        assert!(StoreLocation::parse("postgres://u:%zz@h/db")
            .unwrap_err()
            .to_string()
            .contains("%-escape"));
    }
}
