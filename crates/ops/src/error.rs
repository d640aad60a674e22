//! The ops crate's one error type. Every variant names where the value came from (file or
//! workload), the field and the offending value, so a caller can print one actionable line.

use thiserror::Error;

/// Errors from policies, gates, reports and histories.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OpsError {
    /// A field holds an invalid value.
    #[error("{source_name}: invalid `{field}` = `{value}`: {reason}")]
    InvalidField {
        /// File or other label the value came from.
        source_name: String,
        /// Field path, e.g. `metrics.latency_p50.alpha`.
        field: String,
        /// The offending value as text.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A document that does not parse.
    #[error("{source_name}: cannot parse: {message}")]
    Parse {
        /// File or label of the document.
        source_name: String,
        /// Parser message.
        message: String,
    },
    /// Input that cannot be used (e.g. no records for a history).
    #[error("{0}")]
    Input(String),
}

impl OpsError {
    /// An [`OpsError::InvalidField`].
    pub fn invalid(
        source_name: impl Into<String>,
        field: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> OpsError {
        OpsError::InvalidField {
            source_name: source_name.into(),
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
