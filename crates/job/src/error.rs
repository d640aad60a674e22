//! Errors of the jobs: each names what failed (a file, a field and its value, a side and a
//! round of a comparison) in one line, and wraps the library error it came from.

use thiserror::Error;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, JobError>;

/// What can go wrong in a job.
#[derive(Debug, Error)]
pub enum JobError {
    /// An option holds an invalid value.
    #[error("invalid `{field}` = `{value}`: {reason}")]
    Invalid {
        /// Option name.
        field: String,
        /// Offending value.
        value: String,
        /// Why.
        reason: String,
    },
    /// Measurement, calibration or validation failed.
    #[error(transparent)]
    Measure(#[from] tensorforge_measure::MeasureError),
    /// A record or a records file was rejected, or could not be read or written.
    #[error(transparent)]
    Record(#[from] tensorforge_store::RecordError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] tensorforge_store::StoreError),
    /// The policy or the gate failed.
    #[error(transparent)]
    Ops(#[from] tensorforge_ops::OpsError),
    /// The comparison could not decide.
    #[error(transparent)]
    Compare(#[from] tensorforge_ops::compare::CompareError),
    /// A file could not be written or read.
    #[error("{path}: {what}")]
    Io {
        /// The path.
        path: String,
        /// What was attempted.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A side's command failed, timed out or printed something unusable.
    #[error("{side} command, {when}: {what}")]
    Command {
        /// `baseline` or `candidate`.
        side: String,
        /// `warm-up run` or `round N`.
        when: String,
        /// What happened.
        what: String,
    },
    /// The two sides measured different workloads.
    #[error("identity mismatch: {0}")]
    Identity(String),
}

impl JobError {
    /// An invalid option value.
    pub fn invalid(field: &str, value: impl ToString, reason: impl Into<String>) -> JobError {
        JobError::Invalid {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
