//! The graph compiler's generated CUDA, compiled to PTX by NVRTC (through the disk cache)
//! and checked: every
//! rendered kernel must appear as an entry point whose parameters are the generator's
//! (`I…`, `O…`, `scratch`, `rows`: all 64-bit). This runs without a GPU. Left out: loading
//! and launching (see [`crate::device`]), and assembling to SASS (no `ptxas` here).

use crate::error::{CudaError, Result};
use crate::nvrtc::{compile_ptx_cached, ptx_entries, PtxEntry};
use tensorforge_graph::codegen::cuda::{render_program_with, CudaOptions, CudaProgram};
use tensorforge_graph::fusion::Program;

/// A program's CUDA, its PTX for one architecture, and the PTX's entry points.
#[derive(Debug, Clone)]
pub struct CompiledProgram {
    /// The rendered kernels (and those left out, with the reason).
    pub cuda: CudaProgram,
    /// Architecture compiled for.
    pub arch: &'static str,
    /// PTX text.
    pub ptx: String,
    /// Its entry points.
    pub entries: Vec<PtxEntry>,
    /// Whether the PTX came from the disk cache.
    pub cached: bool,
}

/// Render `p`'s kernels as CUDA with f32 tensors, compile them with NVRTC for `arch` and
/// check each kernel's entry point against its parameter list. `name` labels errors.
pub fn compile_program(p: &Program, name: &str, arch: &'static str) -> Result<CompiledProgram> {
    compile_program_with(p, name, arch, &CudaOptions::default())
}

/// [`compile_program`] with the tensors' storage and vector width of `o`.
pub fn compile_program_with(
    p: &Program,
    name: &str,
    arch: &'static str,
    o: &CudaOptions,
) -> Result<CompiledProgram> {
    let cuda = render_program_with(p, o);
    let (ptx, cached) = compile_ptx_cached(&cuda.source(), name, arch)?;
    let entries = ptx_entries(&ptx);
    check_entries(&cuda, &entries, name)?;
    Ok(CompiledProgram {
        cuda,
        arch,
        ptx,
        entries,
        cached,
    })
}

/// Each rendered kernel has exactly one entry of its name whose parameters are its
/// [`params`](tensorforge_graph::codegen::cuda::CudaKernel::params), every one `.u64`;
/// there is no other entry.
pub fn check_entries(cuda: &CudaProgram, entries: &[PtxEntry], name: &str) -> Result<()> {
    let bad = |reason: String| CudaError::Ptx {
        name: name.into(),
        reason,
    };
    if entries.len() != cuda.kernels.len() {
        return Err(bad(format!(
            "{} entry points for {} kernels",
            entries.len(),
            cuda.kernels.len()
        )));
    }
    for k in &cuda.kernels {
        let e: Vec<&PtxEntry> = entries.iter().filter(|e| e.name == k.symbol).collect();
        let [e] = e.as_slice() else {
            return Err(bad(format!("{} entry points named {}", e.len(), k.symbol)));
        };
        let want = k.params().len();
        if e.param_types.len() != want {
            return Err(bad(format!(
                "{} takes {} parameters, the launcher passes {want}",
                k.symbol,
                e.param_types.len()
            )));
        }
        if let Some((i, t)) = e
            .param_types
            .iter()
            .enumerate()
            .find(|(_, t)| t.as_str() != ".u64")
        {
            return Err(bad(format!(
                "{} parameter {i} is {t}, the launcher passes 64-bit values",
                k.symbol
            )));
        }
    }
    Ok(())
}
