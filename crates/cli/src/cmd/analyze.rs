//! `tensorforge analyze gemm|conv2d|transformer|model`.

use super::{parse_pe, print_json, HwArgs};
use crate::render;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use tensorforge_core::{
    analyze_gemm, presets, DType, Dataflow, Gemm, GemmOptions, HardwareSpec, PeArray, Tile,
};

/// Arguments of `analyze`.
#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(subcommand)]
    kind: AnalyzeKind,
}

#[derive(Subcommand, Debug)]
enum AnalyzeKind {
    /// A (batched) GEMM: C[M×N] = A[M×K] · B[K×N].
    Gemm(GemmArgs),
}

/// PE-array, SRAM and tile options shared by GEMM-shaped analyses.
#[derive(Args, Debug, Clone, Default)]
pub struct MappingArgs {
    /// PE array ROWSxCOLS overriding the chip's (keeps its clock unless --clock-hz).
    #[arg(long, value_name = "RxC")]
    pub pe: Option<String>,
    /// Clock in Hz for --pe when the chip has no PE array.
    #[arg(long)]
    pub clock_hz: Option<f64>,
    /// On-chip SRAM capacity in bytes for the fit check (default: the chip's tile buffer).
    #[arg(long)]
    pub sram_bytes: Option<u64>,
    /// Tile TMxTNxTK: computes DRAM traffic of every loop order.
    #[arg(long, value_name = "TMxTNxTK")]
    pub tile: Option<String>,
    /// Dataflow of the primary PE mapping: output-stationary (default), weight-stationary, input-stationary.
    #[arg(long)]
    pub dataflow: Option<String>,
    /// Add a systolic fill/drain term of rows + cols − 2 cycles per fold.
    #[arg(long)]
    pub fill_drain: bool,
}

impl MappingArgs {
    /// Convert to Core options for `hw`.
    pub fn options(&self, hw: &HardwareSpec) -> Result<GemmOptions> {
        let pe = match &self.pe {
            None => None,
            Some(s) => Some(pe_override(s, self.clock_hz, hw)?),
        };
        if let Some(c) = self.clock_hz {
            if !(c.is_finite() && c > 0.0) {
                bail!("invalid value for `--clock-hz`: {c} (must be positive and finite)");
            }
        }
        if self.sram_bytes == Some(0) {
            bail!("invalid value for `--sram-bytes`: 0 (must be at least 1)");
        }
        Ok(GemmOptions {
            pe,
            sram_bytes: self.sram_bytes,
            tile: self.tile.as_deref().map(Tile::parse).transpose()?,
            dataflow: self.dataflow.as_deref().map(Dataflow::parse).transpose()?,
            fill_drain: self.fill_drain,
        })
    }
}

/// A PE array of `spec` (ROWSxCOLS) using the chip's clock and MACs/PE/cycle, or `clock_hz`.
pub fn pe_override(spec: &str, clock_hz: Option<f64>, hw: &HardwareSpec) -> Result<PeArray> {
    let (rows, cols) = parse_pe(spec)?;
    let clock = match (clock_hz, &hw.pe_array) {
        (Some(c), _) => c,
        (None, Some(p)) => p.clock_hz,
        (None, None) => bail!(
            "`--pe {spec}`: hardware `{}` has no PE array, so its clock is unknown; pass --clock-hz",
            hw.name
        ),
    };
    Ok(PeArray {
        rows,
        cols,
        macs_per_pe_per_cycle: hw.pe_array.as_ref().map_or(1, |p| p.macs_per_pe_per_cycle),
        clock_hz: clock,
        arrays: 1,
    })
}

/// GEMM shape from a preset or from flags.
#[derive(Args, Debug, Clone)]
pub struct GemmShapeArgs {
    /// GEMM preset (see `tensorforge workloads list`).
    #[arg(long, conflicts_with_all = ["m", "n", "k"])]
    pub preset: Option<String>,
    /// Rows of A and C.
    #[arg(long)]
    pub m: Option<u64>,
    /// Columns of B and C.
    #[arg(long)]
    pub n: Option<u64>,
    /// Reduction dimension.
    #[arg(long)]
    pub k: Option<u64>,
    /// Independent GEMMs in the batch.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Element type: fp32, tf32, bf16, fp16, fp8, int8, int4 (default fp16).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Accumulate into C (C += A·B): C is read once more.
    #[arg(long)]
    pub accumulate: bool,
}

impl GemmShapeArgs {
    /// Build the validated GEMM.
    pub fn gemm(&self) -> Result<Gemm> {
        let mut g = match (&self.preset, self.m, self.n, self.k) {
            (Some(p), ..) => presets::gemm(p)?,
            (None, Some(m), Some(n), Some(k)) => Gemm {
                m,
                n,
                k,
                batch: 1,
                dtype: DType::Fp16,
                accumulate: false,
            },
            _ => bail!("give either --preset NAME or all of --m, --n and --k"),
        };
        if let Some(b) = self.batch {
            g.batch = b;
        }
        if let Some(d) = &self.dtype {
            g.dtype = DType::parse(d)?;
        }
        g.accumulate |= self.accumulate;
        g.validate()?;
        Ok(g)
    }
}

#[derive(Args, Debug)]
struct GemmArgs {
    #[command(flatten)]
    shape: GemmShapeArgs,
    #[command(flatten)]
    hw: HwArgs,
    #[command(flatten)]
    mapping: MappingArgs,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

/// Run `analyze`.
pub fn run(a: AnalyzeArgs) -> Result<()> {
    match a.kind {
        AnalyzeKind::Gemm(g) => {
            let gemm = g.shape.gemm()?;
            let hw = g.hw.load()?;
            let opts = g.mapping.options(&hw)?;
            let r = analyze_gemm(&gemm, &hw, &opts)?;
            if g.json {
                print_json(&r)
            } else {
                print!("{}", render::gemm(&r, &hw));
                Ok(())
            }
        }
    }
}
