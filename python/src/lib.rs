//! The `tensorforge._native` extension module: the TensorForge libraries called from Python
//! (never the CLI). Each submodule is one area: kernels on NumPy arrays, the ONNX session,
//! the analytical model, and measurement and policy. The pure-Python package around it
//! (`python/tensorforge`) adds result objects, stubs and the pytest plugin.
//!
//! Errors: bad input (a dtype, a shape, a value, an unknown name) is a `ValueError` with the
//! library's one-line text; an operational failure (a file that cannot be read, a store that
//! cannot be reached) is an `OSError`/`RuntimeError`; a panic inside the libraries is caught
//! here and becomes a `RuntimeError`, never an abort of the interpreter.

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

mod kernels;
mod model;
mod records;
mod session;

/// Run `f`, turning a panic into a `RuntimeError` naming it a bug.
pub(crate) fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(PyRuntimeError::new_err(format!(
                "internal error in tensorforge (a bug, please report it): {what}"
            )))
        }
    }
}

/// A bad-input error: `ValueError` with the library's text.
pub(crate) fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// An operational error: `OSError` with the library's text.
pub(crate) fn os_err(e: impl std::fmt::Display) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// Serialize a library result to the JSON text the CLI's `--json` prints.
pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SCHEMA_VERSION", tensorforge_core::SCHEMA_VERSION)?;
    kernels::register(m)?;
    session::register(m)?;
    model::register(m)?;
    records::register(m)?;
    Ok(())
}
