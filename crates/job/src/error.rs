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
    /// The GPU, its libraries or a GPU measurement failed.
    #[error(transparent)]
    Cuda(#[from] tensorforge_cuda::CudaError),
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
    /// A records file named as a baseline or candidate was rejected or could not be read
    /// (`{e:#}` shows the file's own error after the input's name).
    #[error("{input}")]
    RecordsFile {
        /// The input that named the file (`--baseline`).
        input: String,
        /// Why the file was rejected.
        #[source]
        source: tensorforge_store::RecordError,
    },
    /// A run selector named as a baseline or candidate did not resolve in the store.
    #[error("{input} `{selector}`")]
    Selector {
        /// The input that gave the selector (`--candidate`).
        input: String,
        /// The selector as given.
        selector: String,
        /// The store's answer (no such run, an ambiguous prefix...); boxed, so that every
        /// `Result` of this crate stays small.
        #[source]
        source: Box<tensorforge_store::StoreError>,
    },
    /// What an input needs is not there (no records file and no store to look in).
    #[error("{input}: {message}")]
    Unavailable {
        /// The input, with its value where it has one (``--baseline `latest` ``).
        input: String,
        /// What is missing.
        message: String,
    },
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
