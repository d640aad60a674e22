//! How a PostgreSQL store connection behaves, from the URL's query parameters: TLS
//! (`sslmode`, certificates), how long each step may take (connect, statement, lock, idle in
//! a transaction), TCP keepalive, and how often a connection the server refuses for now is
//! retried. Parameter names and units follow libpq and the server's settings, so a DBA's
//! URL reads as it would for `psql`: `connect_timeout` and the `keepalives_*` in seconds,
//! `tcp_user_timeout` in milliseconds, the server settings (`statement_timeout`,
//! `lock_timeout`, `idle_in_transaction_session_timeout`) in milliseconds unless a unit
//! (`ms`, `s`, `min`, `h`) follows, `0` turning a timeout off. Left out: `sslmode=allow`'s
//! second try with TLS, `sslrootcert=system`, certificate revocation lists, `sslpassword`
//! (an encrypted client key), GSS and Kerberos.

use std::path::PathBuf;
use std::time::Duration;

/// `sslmode`, as libpq defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// Plain TCP (libpq would try TLS when the server demands it; this build does not).
    Allow,
    /// TLS when the server offers it, without checking its certificate; plain otherwise. The
    /// default, as in libpq. Given explicitly, connecting without TLS says so in a note.
    Prefer,
    /// TLS or no connection; the certificate is checked against `sslrootcert` when one is
    /// given (as libpq does with a root certificate present), not otherwise.
    Require,
    /// TLS, the server's certificate chain checked against `sslrootcert`; any host name.
    VerifyCa,
    /// TLS, the chain checked and the certificate issued for the host in the URL.
    VerifyFull,
}

impl SslMode {
    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Connection settings of a PostgreSQL store; [`Default`] gives the values used when the URL
/// says nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `sslmode` (default `prefer`).
    pub ssl_mode: SslMode,
    /// Whether the URL gave `sslmode` (an explicit `prefer` that ends up unencrypted says so).
    pub ssl_mode_given: bool,
    /// `sslrootcert`: PEM file of the certificate authorities to trust (`verify-ca`,
    /// `verify-full`; default `~/.postgresql/root.crt`, as libpq).
    pub ssl_root_cert: Option<PathBuf>,
    /// `sslcert`: PEM client certificate chain (needs `sslkey`).
    pub ssl_cert: Option<PathBuf>,
    /// `sslkey`: PEM private key of the client certificate (unencrypted).
    pub ssl_key: Option<PathBuf>,
    /// `connect_timeout`: the whole connection (TCP, TLS, authentication, start-up) must be
    /// done within this (default 10 s).
    pub connect: Duration,
    /// `statement_timeout`: the server cancels a statement running longer (default 60 s;
    /// zero: never). The client waits this plus [`CLIENT_GRACE`] for any answer, so a server
    /// that stops answering altogether is also given up on.
    pub statement: Duration,
    /// `lock_timeout`: a statement waiting longer for a lock fails (default 30 s; zero:
    /// never).
    pub lock: Duration,
    /// `idle_in_transaction_session_timeout`: the server ends a session left idle inside a
    /// transaction (default 60 s; zero: never).
    pub idle_in_transaction: Duration,
    /// `keepalives`: TCP keepalive probes on an idle connection (default on).
    pub keepalives: bool,
    /// `keepalives_idle`: idle time before the first probe (default 30 s).
    pub keepalives_idle: Duration,
    /// `keepalives_interval`: time between probes (default 10 s).
    pub keepalives_interval: Duration,
    /// `keepalives_count`: unanswered probes before the connection is dropped (default 3).
    pub keepalives_count: u32,
    /// `tcp_user_timeout`: how long sent data may stay unacknowledged before the connection
    /// is dropped (default 30 s; zero: the system's).
    pub tcp_user_timeout: Duration,
    /// `connect_retries`: how many times a connection is tried again while the server is
    /// starting up, shutting down or refusing connections, waiting 0.25 s, 0.5 s, 1 s, ...
    /// (at most 4 s) in between (default 5: about 8 s in all). Never for an authentication
    /// error.
    pub connect_retries: u32,
}

/// How much longer than `statement_timeout` the client waits for an answer before it drops
/// the connection itself (the server's own cancellation, when it can still act, comes first).
pub const CLIENT_GRACE: Duration = Duration::from_secs(2);

impl Default for ConnectionSettings {
    fn default() -> Self {
        ConnectionSettings {
            ssl_mode: SslMode::Prefer,
            ssl_mode_given: false,
            ssl_root_cert: None,
            ssl_cert: None,
            ssl_key: None,
            connect: Duration::from_secs(10),
            statement: Duration::from_secs(60),
            lock: Duration::from_secs(30),
            idle_in_transaction: Duration::from_secs(60),
            keepalives: true,
            keepalives_idle: Duration::from_secs(30),
            keepalives_interval: Duration::from_secs(10),
            keepalives_count: 3,
            tcp_user_timeout: Duration::from_secs(30),
            connect_retries: 5,
        }
    }
}

/// The parameters [`ConnectionSettings::set`] understands (for the error naming an unknown
/// one).
pub const PARAMETERS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "connect_retries",
];

/// `v` as a whole number.
fn whole(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| "expected a whole number".to_string())
}

/// A server time setting: a whole number of milliseconds, or one followed by `ms`, `s`,
/// `min` or `h` (as `postgresql.conf` writes them).
pub fn parse_server_duration(v: &str) -> Result<Duration, String> {
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &v[digits.len()..];
    let n = whole(digits.trim())
        .map_err(|_| "expected milliseconds, or a number with ms, s, min or h".to_string())?;
    let ms_per = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit `{unit}` (ms, s, min or h)")),
    };
    n.checked_mul(ms_per)
        .map(Duration::from_millis)
        .ok_or_else(|| "too long".to_string())
}

impl ConnectionSettings {
    /// Apply one URL parameter; `Err(reason)` for an unknown name or a bad value.
    pub fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let secs = |v: &str| whole(v).map(Duration::from_secs);
        match key {
            "sslmode" => {
                self.ssl_mode =
                    match v {
                        "disable" => SslMode::Disable,
                        "allow" => SslMode::Allow,
                        "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-ca" => SslMode::VerifyCa,
                        "verify-full" => SslMode::VerifyFull,
                        _ => return Err(
                            "expected disable, allow, prefer, require, verify-ca or verify-full"
                                .into(),
                        ),
                    };
                self.ssl_mode_given = true;
            }
            "sslrootcert" | "sslcert" | "sslkey" => {
                if v.is_empty() {
                    return Err("expected a file path".into());
                }
                let p = Some(PathBuf::from(v));
                match key {
                    "sslrootcert" => self.ssl_root_cert = p,
                    "sslcert" => self.ssl_cert = p,
                    _ => self.ssl_key = p,
                }
            }
            "connect_timeout" => {
                self.connect = secs(v)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or("expected a whole number of seconds above 0")?
            }
            "statement_timeout" => self.statement = parse_server_duration(v)?,
            "lock_timeout" => self.lock = parse_server_duration(v)?,
            "idle_in_transaction_session_timeout" => {
                self.idle_in_transaction = parse_server_duration(v)?
            }
            "keepalives" => {
                self.keepalives = match v {
                    "1" => true,
                    "0" => false,
                    _ => return Err("expected 1 or 0".into()),
                }
            }
            "keepalives_idle" => self.keepalives_idle = secs(v)?,
            "keepalives_interval" => self.keepalives_interval = secs(v)?,
            "keepalives_count" => {
                self.keepalives_count = whole(v)?.try_into().map_err(|_| "too large".to_string())?
            }
            "tcp_user_timeout" => self.tcp_user_timeout = Duration::from_millis(whole(v)?),
            "connect_retries" => {
                self.connect_retries = whole(v)?
                    .try_into()
                    .ok()
                    .filter(|n| *n <= 20)
                    .ok_or("expected a whole number from 0 to 20")?
            }
            _ => {
                return Err(format!(
                    "unknown URL parameter (understood: {})",
                    PARAMETERS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Check what only makes sense together.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.ssl_cert.is_some() != self.ssl_key.is_some() {
            return Err((
                if self.ssl_cert.is_some() {
                    "sslkey"
                } else {
                    "sslcert"
                },
                "a client certificate needs both sslcert and sslkey".into(),
            ));
        }
        if matches!(self.ssl_mode, SslMode::Disable | SslMode::Allow)
            && (self.ssl_root_cert.is_some() || self.ssl_cert.is_some())
        {
            return Err((
                "sslmode",
                format!(
                    "sslmode={} connects without TLS, yet certificates were given",
                    self.ssl_mode.as_str()
                ),
            ));
        }
        Ok(())
    }

    /// The server settings sent at start-up (the `options` start-up parameter), as the
    /// server reads them: `-c statement_timeout=60000 ...` in milliseconds.
    pub fn server_options(&self) -> String {
        format!(
            "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            self.statement.as_millis(),
            self.lock.as_millis(),
            self.idle_in_transaction.as_millis()
        )
    }

    /// How long the client waits for the answer to one statement before it gives up on the
    /// connection: `statement_timeout + CLIENT_GRACE`; `None` when `statement_timeout` is 0.
    pub fn client_deadline(&self) -> Option<Duration> {
        (!self.statement.is_zero()).then(|| self.statement + CLIENT_GRACE)
    }

    /// The pause before retry `k` (0-based): 0.25 s doubled each time, at most 4 s.
    pub fn retry_pause(k: u32) -> Duration {
        Duration::from_millis(250u64.saturating_mul(1 << k.min(4)).min(4_000))
    }
}

/// A duration as messages show it (the Core's one time formatter).
pub fn human(d: Duration) -> String {
    tensorforge_core::units::time(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_parse_in_libpq_and_server_units() {
        let mut s = ConnectionSettings::default();
        s.set("statement_timeout", "1500").unwrap();
        assert_eq!(s.statement, Duration::from_millis(1500));
        s.set("lock_timeout", "2s").unwrap();
        assert_eq!(s.lock, Duration::from_secs(2));
        s.set("idle_in_transaction_session_timeout", "1min")
            .unwrap();
        assert_eq!(s.idle_in_transaction, Duration::from_secs(60));
        s.set("connect_timeout", "3").unwrap();
        assert_eq!(s.connect, Duration::from_secs(3));
        s.set("tcp_user_timeout", "9000").unwrap();
        assert_eq!(s.tcp_user_timeout, Duration::from_secs(9));
        s.set("sslmode", "verify-full").unwrap();
        assert_eq!((s.ssl_mode, s.ssl_mode_given), (SslMode::VerifyFull, true));
        // The server reads milliseconds: 1500 ms, 2 s = 2000 ms, 1 min = 60000 ms.
        assert_eq!(
            s.server_options(),
            "-c statement_timeout=1500 -c lock_timeout=2000 -c idle_in_transaction_session_timeout=60000"
        );
        // 1.5 s + 2 s grace.
        assert_eq!(s.client_deadline(), Some(Duration::from_millis(3500)));
        s.set("statement_timeout", "0").unwrap();
        assert_eq!(s.client_deadline(), None);
        for (k, v) in [
            ("connect_timeout", "0"),
            ("statement_timeout", "5 days"),
            ("statement_timeout", "-1"),
            ("keepalives", "yes"),
            ("sslmode", "verify"),
            ("connect_retries", "99"),
            ("sslrootcert", ""),
            ("application_name", "x"),
        ] {
            assert!(s.set(k, v).is_err(), "{k}={v}");
        }
    }

    #[test]
    fn retry_pauses_double_up_to_four_seconds() {
        // 250, 500, 1000, 2000, 4000, 4000 ms: five retries wait 7.75 s in all.
        let p: Vec<u128> = (0..6)
            .map(|k| ConnectionSettings::retry_pause(k).as_millis())
            .collect();
        assert_eq!(p, [250, 500, 1000, 2000, 4000, 4000]);
    }

    #[test]
    fn certificates_need_tls_and_come_in_pairs() {
        let mut s = ConnectionSettings::default();
        s.set("sslcert", "/c.pem").unwrap();
        assert_eq!(s.check().unwrap_err().0, "sslkey");
        s.set("sslkey", "/k.pem").unwrap();
        assert!(s.check().is_ok());
        s.set("sslmode", "disable").unwrap();
        assert_eq!(s.check().unwrap_err().0, "sslmode");
    }
}
