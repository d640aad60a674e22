//! The measure crate's one error type. Every variant names the file or workload, the field
//! and the offending value where there is one.

use thiserror::Error;

/// Errors from workload parsing, the harness, calibration and validation.
#[derive(Debug, Error)]
pub enum MeasureError {
    /// A field holds an invalid value.
    #[error("{source_name}: invalid `{field}` = `{value}`: {reason}")]
    Invalid {
        /// File, workload or profile the value came from.
        source_name: String,
        /// Field path.
        field: String,
        /// Offending value.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A workload name that is neither a preset, a kernel spec nor a file.
    #[error("unknown workload `{name}`; valid names: {valid}")]
    UnknownWorkload {
        /// The name given.
        name: String,
        /// Every valid name and form.
        valid: String,
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
    },
    /// A profile that cannot be used here (other machine, other software, not calibrated).
    #[error("profile {source_name}: {reason}")]
    Profile {
        /// Profile file or store entry.
        source_name: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A holdout workload equal to a calibration probe.
    #[error("holdout workload `{name}` (fingerprint {fingerprint}) is identical to calibration probe `{probe}`; calibration and holdout sets must not overlap")]
    Overlap {
        /// Holdout workload name.
        name: String,
        /// Its fingerprint.
        fingerprint: String,
        /// The probe it equals.
        probe: String,
    },
    /// The analytical model rejected a workload.
    #[error("model: {0}")]
    Core(#[from] tensorforge_core::CoreError),
    /// A kernel rejected its arguments.
    #[error("kernel: {0}")]
    Kernel(#[from] tensorforge_kernels::KernelError),
    /// Record construction or a records file failed (its message and source, unchanged).
    #[error(transparent)]
    Record(#[from] tensorforge_store::RecordError),
    /// The store failed (its message and source, unchanged).
    #[error(transparent)]
    Store(#[from] tensorforge_store::StoreError),
    /// Anything else (thread pool creation, plotting), described.
    #[error("{0}")]
    Other(String),
}

impl MeasureError {
    /// An [`MeasureError::Invalid`].
    pub fn invalid(
        source_name: impl Into<String>,
        field: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> MeasureError {
        MeasureError::Invalid {
            source_name: source_name.into(),
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, MeasureError>;
