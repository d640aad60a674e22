//! NVRTC: CUDA C++ to PTX at run time, and the entry points of the PTX it gives back.
//! NVRTC is a compiler library, not a device: it runs on any Linux machine where
//! `libnvrtc.so.12` can be loaded (the `nvidia-cuda-nvrtc-cu12` wheel provides it; CI
//! installs it and puts its `lib` folder on `LD_LIBRARY_PATH`). Left out: caching PTX on
//! disk (the module cache of [`crate::graph`] keeps it per process), and `ptxas`: the PTX is
//! not assembled to SASS until the driver loads it.

use crate::error::{CudaError, Result};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};

/// The GPU architectures the tests compile for: A100 (sm_80) and H100/H200 (sm_90).
pub const TEST_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// Whether `libnvrtc` can be loaded here.
pub fn nvrtc_available() -> bool {
    // SAFETY: dlopen of candidate names; no symbol of the library is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether the tests must find NVRTC (`TENSORFORGE_TEST_NVRTC_REQUIRED=1`, as CI sets it):
/// then a test that needs it fails instead of printing SKIPPED.
pub fn nvrtc_required() -> bool {
    std::env::var("TENSORFORGE_TEST_NVRTC_REQUIRED").is_ok_and(|v| v == "1")
}

/// The error for a machine where NVRTC cannot be loaded.
pub fn nvrtc_missing() -> CudaError {
    CudaError::Missing {
        what: "NVRTC",
        tried: "libnvrtc.so, libnvrtc.so.12 (on LD_LIBRARY_PATH)".into(),
        hint: "install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc-cu12` and put its nvidia/cuda_nvrtc/lib folder on LD_LIBRARY_PATH",
    }
}

/// Compile `source` (a self-contained translation unit: no `#include` of system headers)
/// for `arch` (`sm_80`, `sm_90`…) to PTX text. `name` labels errors.
pub fn compile_ptx(source: &str, name: &str, arch: &'static str) -> Result<String> {
    if !nvrtc_available() {
        return Err(nvrtc_missing());
    }
    if source.contains('\0') || name.contains('\0') {
        return Err(CudaError::Compile {
            name: name.into(),
            log: "the source holds a NUL byte".into(),
        });
    }
    let opts = CompileOptions {
        arch: Some(arch),
        name: Some(format!("{name}.cu")),
        // IEEE division, square root and denormals, as the CPU executor computes them.
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    match compile_ptx_with_opts(source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { log, .. }) => Err(CudaError::Compile {
            name: name.into(),
            log: log.to_string_lossy().trim().to_string(),
        }),
        Err(e) => Err(CudaError::Compile {
            name: name.into(),
            log: e.to_string(),
        }),
    }
}

/// One `.entry` of a PTX module: its name and the PTX type of each parameter in order
/// (`.u64` for pointers and 64-bit integers, `.u32`, `.f32`…).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PtxEntry {
    /// Function name (unmangled for `extern "C"`).
    pub name: String,
    /// PTX type of each parameter.
    pub param_types: Vec<String>,
}

/// The `.visible .entry` functions of `ptx`, in order.
///
/// ```
/// let ptx = ".visible .entry tf_k0(\n\t.param .u64 tf_k0_param_0,\n\t.param .u64 tf_k0_param_1\n)\n{\n}\n";
/// let e = tensorforge_cuda::nvrtc::ptx_entries(ptx);
/// assert_eq!(e[0].name, "tf_k0");
/// assert_eq!(e[0].param_types, vec![".u64", ".u64"]);
/// ```
pub fn ptx_entries(ptx: &str) -> Vec<PtxEntry> {
    let mut out = vec![];
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        let Some(rest) = t
            .strip_prefix(".visible .entry ")
            .or_else(|| t.strip_prefix(".entry "))
        else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or("").trim().to_string();
        let mut params = vec![];
        // Parameters follow one per line until the closing parenthesis.
        let mut pending = rest.split_once('(').map(|(_, p)| p.to_string());
        loop {
            let text = match pending.take() {
                Some(p) => p,
                None => match lines.next() {
                    Some(l) => l.to_string(),
                    None => break,
                },
            };
            for part in text.split(',') {
                let p = part.trim();
                if let Some(decl) = p.strip_prefix(".param ") {
                    let ty = decl
                        .split_whitespace()
                        .find(|w| w.starts_with('.') && !w.starts_with(".align"))
                        .unwrap_or("")
                        .to_string();
                    params.push(ty);
                }
            }
            if text.contains(')') {
                break;
            }
        }
        out.push(PtxEntry {
            name,
            param_types: params,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_their_parameter_types_are_read_from_ptx() {
        let ptx = "//\n.version 8.8\n.target sm_90\n\n.visible .entry tf_k1(\n\t.param .u64 .ptr .align 1 tf_k1_param_0,\n\t.param .u64 tf_k1_param_1,\n\t.param .u32 tf_k1_param_2\n)\n{\n\tret;\n}\n\n.visible .entry tf_k2()\n{\n}\n";
        let e = ptx_entries(ptx);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].name, "tf_k1");
        assert_eq!(e[0].param_types, vec![".u64", ".u64", ".u32"]);
        assert_eq!(e[1].name, "tf_k2");
        assert!(e[1].param_types.is_empty());
    }
}
