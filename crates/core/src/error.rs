//! The Core's single error type. Every variant names the field (or thing) and the
//! offending value so that a caller can print one line a user can act on.

use thiserror::Error;

/// Errors raised by the analytical Core.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// A field holds a value the model cannot use (zero, negative, NaN, inconsistent...).
    #[error("{source_name}field `{field}` = {value}: {reason}")]
    InvalidField {
        /// Where the value came from, with a trailing ": " (e.g. "chip.toml: "), or empty.
        source_name: String,
        /// Dotted field name, e.g. `dram.bandwidth_bytes_per_s`.
        field: String,
        /// The offending value as text.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A product of shape dimensions does not fit in 64 bits.
    #[error("overflow: {what} does not fit in 64 bits")]
    Overflow {
        /// What was being computed, e.g. `m * n * k * batch`.
        what: String,
    },
    /// A name that is not one of the known ones (preset, dtype, schedule...).
    #[error("unknown {kind} `{name}`; valid: {valid}")]
    Unknown {
        /// What kind of name, e.g. "hardware preset".
        kind: String,
        /// The name given.
        name: String,
        /// Comma-separated list of valid names.
        valid: String,
    },
    /// A document (TOML/JSON) could not be parsed.
    #[error("{source_name}: {message}")]
    Parse {
        /// File name or other label of the document.
        source_name: String,
        /// The parser's message.
        message: String,
    },
    /// The hardware publishes no peak for the workload's dtype.
    #[error("hardware `{hardware}` has no peak throughput for dtype {dtype}; it has: {available} (pass a dtype it has, or a hardware file that gives {dtype})")]
    MissingPeak {
        /// Hardware name.
        hardware: String,
        /// Requested dtype.
        dtype: String,
        /// Dtypes that the spec does give.
        available: String,
    },
    /// A design-space exploration asked for more candidates than the cap.
    #[error("design space has {count} candidates, above the cap of {cap}; narrow the lists or raise the cap (`max_candidates`)")]
    TooManyCandidates {
        /// Candidate count requested (saturating).
        count: u64,
        /// The cap in force.
        cap: u64,
    },
}

impl CoreError {
    /// Shorthand for an [`CoreError::InvalidField`] without a source label.
    pub fn invalid(
        field: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        CoreError::InvalidField {
            source_name: String::new(),
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// Shorthand for an [`CoreError::Overflow`].
    pub fn overflow(what: impl Into<String>) -> Self {
        CoreError::Overflow { what: what.into() }
    }

    /// Attach a source label (a file name) to a field error.
    pub fn with_source(self, source: &str) -> Self {
        match self {
            CoreError::InvalidField {
                field,
                value,
                reason,
                ..
            } => CoreError::InvalidField {
                source_name: format!("{source}: "),
                field,
                value,
                reason,
            },
            other => other,
        }
    }
}

/// Result alias for the Core.
pub type Result<T> = std::result::Result<T, CoreError>;

/// Checked product of `factors`, naming `what` in the overflow error.
pub fn checked_product(factors: &[u64], what: &str) -> Result<u64> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| CoreError::overflow(what))
}

/// Checked sum of `terms`, naming `what` in the overflow error.
pub fn checked_sum(terms: &[u64], what: &str) -> Result<u64> {
    terms
        .iter()
        .try_fold(0u64, |acc, &t| acc.checked_add(t))
        .ok_or_else(|| CoreError::overflow(what))
}

/// Ceiling division `ceil(a / b)` for `b > 0`.
pub fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}
