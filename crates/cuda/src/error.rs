//! The CUDA crate's one error type. A missing library or device is its own variant with a
//! message that names what is missing and how to get it, so the CLI prints one line and
//! exits 2 instead of panicking inside a loader.

use thiserror::Error;

/// Errors from loading CUDA, compiling kernels and measuring on a GPU.
#[derive(Debug, Error)]
pub enum CudaError {
    /// A `--device` value that is not `cpu`, `cuda` or `cuda:N`.
    #[error(
        "invalid `--device` = `{value}`: expected `cpu`, `cuda` or `cuda:N` (N a device index)"
    )]
    BadDevice {
        /// The value given.
        value: String,
    },
    /// A CUDA library could not be opened.
    #[error("{what} cannot be loaded (tried {tried}); {hint}")]
    Missing {
        /// Which library (`the NVIDIA driver (libcuda)`, `NVRTC`, `cuBLAS`).
        what: &'static str,
        /// File names tried.
        tried: String,
        /// What to install.
        hint: &'static str,
    },
    /// The driver loads but reports fewer devices than asked for.
    #[error("`--device cuda:{ordinal}`: the driver reports {count} CUDA device(s)")]
    NoDevice {
        /// Index asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver: {during}: {source}")]
    Driver {
        /// What was being done.
        during: String,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS: {during}: {source}")]
    Cublas {
        /// What was being done.
        during: String,
        /// cuBLAS's error.
        #[source]
        source: cudarc::cublas::result::CublasError,
    },
    /// A cuBLASLt call failed.
    #[error("cuBLASLt: {during}: {source}")]
    CublasLt {
        /// What was being done.
        during: String,
        /// cuBLASLt's error.
        #[source]
        source: cudarc::cublaslt::result::CublasError,
    },
    /// NVRTC refused a source; `log` is its compile log.
    #[error("NVRTC: {name}: {log}")]
    Compile {
        /// Program name.
        name: String,
        /// NVRTC's log (or error).
        log: String,
    },
    /// Generated PTX does not have the entry points the generator promised.
    #[error("PTX of {name}: {reason}")]
    Ptx {
        /// Program name.
        name: String,
        /// What does not match.
        reason: String,
    },
    /// A workload spec that does not parse or has no GPU form.
    #[error("{source_name}: invalid `{field}` = `{value}`: {reason}")]
    Invalid {
        /// Argument or file.
        source_name: String,
        /// Field.
        field: String,
        /// Offending value.
        value: String,
        /// Why.
        reason: String,
    },
    /// The graph compiler refused a graph.
    #[error("graph {name}: {message}")]
    Graph {
        /// Graph name.
        name: String,
        /// What failed.
        message: String,
    },
    /// A result that cannot be a measurement (a timing of zero, a non-finite value).
    #[error("{what}: {reason}")]
    Measurement {
        /// What was measured.
        what: String,
        /// Why the result is refused.
        reason: String,
    },
    /// A workload spec the measure crate parses (graph workloads) was refused.
    #[error(transparent)]
    Measure(#[from] tensorforge_measure::MeasureError),
    /// Building a record failed.
    #[error(transparent)]
    Record(#[from] tensorforge_store::RecordError),
}

impl CudaError {
    pub(crate) fn invalid(
        source_name: &str,
        field: &str,
        value: impl ToString,
        reason: impl ToString,
    ) -> Self {
        CudaError::Invalid {
            source_name: source_name.into(),
            field: field.into(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn driver(
        during: impl ToString,
    ) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        let during = during.to_string();
        move |source| CudaError::Driver { during, source }
    }

    pub(crate) fn cublas(
        during: impl ToString,
    ) -> impl FnOnce(cudarc::cublas::result::CublasError) -> Self {
        let during = during.to_string();
        move |source| CudaError::Cublas { during, source }
    }
}

impl CudaError {
    pub(crate) fn cublaslt(
        during: impl ToString,
    ) -> impl FnOnce(cudarc::cublaslt::result::CublasError) -> Self {
        let during = during.to_string();
        move |source| CudaError::CublasLt { during, source }
    }
}

/// Result with [`CudaError`].
pub type Result<T> = std::result::Result<T, CudaError>;
