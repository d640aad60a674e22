//! The store crate's one error type.

use thiserror::Error;

/// An underlying error kept as the source of a [`StoreError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors from the store and ingestion, and (wrapped unchanged) from records, their
/// statistics and records files.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A record, its statistics or a records file was rejected (`tensorforge-record`'s
    /// error, its message and source unchanged).
    #[error(transparent)]
    Record(#[from] tensorforge_record::RecordError),
    /// A field holds an invalid value.
    #[error("{source_name}: invalid `{field}` = `{value}`: {reason}")]
    InvalidField {
        /// File, record or workload the value came from.
        source_name: String,
        /// Field path.
        field: String,
        /// Offending value.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// Text that does not parse.
    #[error("{source_name}: cannot parse: {message}")]
    Parse {
        /// File the text came from.
        source_name: String,
        /// Parser message.
        message: String,
    },
    /// Something asked for is not there.
    #[error("{0}")]
    NotFound(String),
    /// The store (SQLite or PostgreSQL) failed or refused.
    #[error("store {store}: {message}")]
    Database {
        /// Store path, or URL with its password redacted.
        store: String,
        /// What failed.
        message: String,
        /// The database, I/O or JSON error underneath, when there is one (`{e:#}` in a
        /// chain-printing caller such as anyhow shows it after the message).
        #[source]
        source: Option<Cause>,
    },
    /// File I/O failed.
    #[error("{path}: {message}")]
    Io {
        /// File path.
        path: String,
        /// What failed.
        message: String,
        /// The I/O or serialization error underneath, when there is one.
        #[source]
        source: Option<Cause>,
    },
}

impl StoreError {
    /// An [`StoreError::InvalidField`].
    pub fn invalid(
        source_name: impl Into<String>,
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> StoreError {
        StoreError::InvalidField {
            source_name: source_name.into(),
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// Replace the source name of an `InvalidField` or `Parse` error (also one from a
    /// record) with a file name, keeping the old name in the field path.
    pub fn with_source(self, file: &str) -> StoreError {
        match self {
            StoreError::Record(e) => StoreError::Record(e.with_source(file)),
            StoreError::InvalidField {
                source_name,
                field,
                value,
                reason,
            } => StoreError::InvalidField {
                source_name: format!("{file} (workload `{source_name}`)"),
                field,
                value,
                reason,
            },
            StoreError::Parse { message, .. } => StoreError::Parse {
                source_name: file.to_string(),
                message,
            },
            other => other,
        }
    }
}
