//! One-line notes the store gives about something that went right only after going wrong
//! (a connection retried while the server was starting up) or that a user should know (an
//! explicit `sslmode=prefer` that ended up unencrypted). They go to a process-wide sink:
//! standard error as `note: ...` unless a program installs its own ([`set_sink`]). Left out:
//! levels and structured logging; errors are returned, never noted.

use std::sync::{Mutex, OnceLock};

type Sink = Box<dyn Fn(&str) + Send + Sync>;

fn sink() -> &'static Mutex<Option<Sink>> {
    static SINK: OnceLock<Mutex<Option<Sink>>> = OnceLock::new();
    SINK.get_or_init(|| Mutex::new(None))
}

/// Send every later note to `f` instead of standard error.
pub fn set_sink(f: impl Fn(&str) + Send + Sync + 'static) {
    *sink().lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(f));
}

/// Give one note (one line; it must never hold a password).
pub fn note(message: &str) {
    let guard = sink().lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_ref() {
        Some(f) => f(message),
        None => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "note: {message}");
        }
    }
}
