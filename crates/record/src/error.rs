//! The record crate's one error type: a record, its statistics or a records file that is
//! invalid, does not parse, or cannot be read or written. Store and database errors are not
//! here (they are the store's, which wraps this type unchanged).

use thiserror::Error;

/// An underlying error kept as the source of a [`RecordError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors from records, their statistics and records files.
#[derive(Debug, Error)]
pub enum RecordError {
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

impl RecordError {
    /// An [`RecordError::InvalidField`].
    pub fn invalid(
        source_name: impl Into<String>,
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> RecordError {
        RecordError::InvalidField {
            source_name: source_name.into(),
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// Replace the source name of an `InvalidField` or `Parse` error with a file name,
    /// keeping the old name in the field path.
    pub fn with_source(self, file: &str) -> RecordError {
        match self {
            RecordError::InvalidField {
                source_name,
                field,
                value,
                reason,
            } => RecordError::InvalidField {
                source_name: format!("{file} (workload `{source_name}`)"),
                field,
                value,
                reason,
            },
            RecordError::Parse { message, .. } => RecordError::Parse {
                source_name: file.to_string(),
                message,
            },
            other => other,
        }
    }
}
