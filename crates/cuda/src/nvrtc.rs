//! NVRTC: CUDA C++ to PTX at run time, and the entry points of the PTX it gives back.
//! NVRTC is a compiler library, not a device: it runs on any Linux machine where
//! `libnvrtc.so.12` can be loaded (the `nvidia-cuda-nvrtc-cu12` wheel provides it; CI
//! installs it and puts its `lib` folder on `LD_LIBRARY_PATH`). PTX is cached on disk beside
//! the C JIT's objects ([`compile_ptx_cached`]), keyed by the source, the architecture, the
//! options and NVRTC's version. Left out: `ptxas` (the PTX is assembled to SASS by the
//! driver when it loads it).

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

/// NVRTC's version `(major, minor)`, when it loads.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_available() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library loads (checked above); both pointers are valid.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// Options every compile uses (part of the cache key).
const OPTIONS_KEY: &str = "ftz=false prec-div=true prec-sqrt=true --std=c++17";

/// Where [`compile_ptx_cached`] keeps PTX: `ptx/` in the C JIT's cache folder
/// (`TENSORFORGE_CACHE_DIR`, else the XDG cache folder).
pub fn ptx_cache_dir() -> std::path::PathBuf {
    tensorforge_graph::jit::cache_dir().join("ptx")
}

/// [`compile_ptx`] through the disk cache: `(ptx, true)` when the cache had it. The key is
/// SHA-256 of NVRTC's version, `arch`, the options and `source`; a cache that cannot be
/// written only costs the next process a compile.
pub fn compile_ptx_cached(source: &str, name: &str, arch: &'static str) -> Result<(String, bool)> {
    let (major, minor) = nvrtc_version().ok_or_else(nvrtc_missing)?;
    let head = format!("tensorforge-ptx-1\0nvrtc {major}.{minor}\0{arch}\0{OPTIONS_KEY}\0");
    let key = tensorforge_core::digest::sha256_hex(&[head.as_bytes(), source.as_bytes()]);
    let path = ptx_cache_dir().join(format!("{key}.ptx"));
    if let Ok(ptx) = std::fs::read_to_string(&path) {
        // A truncated or foreign file is not trusted: it must end its last entry.
        if ptx.contains(".entry") && ptx.trim_end().ends_with('}') {
            return Ok((ptx, true));
        }
    }
    let ptx = compile_ptx(source, name, arch)?;
    if std::fs::create_dir_all(ptx_cache_dir()).is_ok() {
        let _ = tensorforge_store::write_atomic(&path, ptx.as_bytes());
    }
    Ok((ptx, false))
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

    /// The second compile of the same source for the same architecture comes from the
    /// disk cache; another architecture does not.
    #[test]
    fn ptx_is_cached_by_source_and_architecture() {
        if !nvrtc_available() {
            assert!(!nvrtc_required(), "NVRTC required but absent");
            println!("SKIPPED: NVRTC cannot be loaded here");
            return;
        }
        // A source no earlier run can have cached.
        let nonce = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let src = format!("/* {nonce} */\nextern \"C\" __global__ void tf_t(float *x) {{ x[threadIdx.x] += 1.0f; }}\n");
        let (a, hit_a) = compile_ptx_cached(&src, "t", "sm_80").unwrap();
        let (b, hit_b) = compile_ptx_cached(&src, "t", "sm_80").unwrap();
        let (c, hit_c) = compile_ptx_cached(&src, "t", "sm_90").unwrap();
        assert!(!hit_a && hit_b && !hit_c, "{hit_a} {hit_b} {hit_c}");
        assert_eq!(a, b);
        assert!(c.contains(".target sm_90") && a.contains(".target sm_80"));
    }

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
