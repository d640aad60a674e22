//! `tensorforge verify-overflow`, `tensorforge verify-quant` and `tensorforge kernel OP`:
//! thin glue over `tensorforge-kernels`. The verify commands print the sweep table (or
//! `--json`) and fail with an error naming the number of failing cases; `kernel` reads
//! `.npy` inputs, runs one kernel and writes the result atomically (temp file + rename).

use super::print_json;
use crate::render::Table;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::Path;
use tensorforge_kernels::call;
use tensorforge_kernels::npy::{parse_npy, to_npy, NpyArray};
use tensorforge_kernels::verify::{
    verify_overflow, verify_quant, KernelSet, OverflowReport, QuantReport,
};

/// Arguments of `verify-overflow` and `verify-quant`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Run the sweep on the naive kernels instead (expected to fail; shows what the sweep catches).
    #[arg(long)]
    pub naive: bool,
}

fn kernel_set(naive: bool) -> KernelSet {
    if naive {
        KernelSet::Naive
    } else {
        KernelSet::Stable
    }
}

fn set_name(k: KernelSet) -> &'static str {
    match k {
        KernelSet::Stable => "stable",
        KernelSet::Naive => "naive",
    }
}

#[derive(Serialize)]
struct Versioned<'a, T: Serialize> {
    schema_version: u32,
    evidence: &'static str,
    #[serde(flatten)]
    report: &'a T,
}

fn pass_mark(p: bool) -> String {
    if p { "ok" } else { "FAIL" }.to_string()
}

/// Run `verify-overflow`.
pub fn run_verify_overflow(a: VerifyArgs) -> Result<()> {
    let r: OverflowReport = verify_overflow(kernel_set(a.naive));
    if a.json {
        print_json(&Versioned {
            schema_version: tensorforge_core::SCHEMA_VERSION,
            evidence: "measurement",
            report: &r,
        })?;
    } else {
        println!(
            "verify-overflow — {} kernels vs double-double reference (pass: ≤ {} ulp)",
            set_name(r.kernels),
            r.max_ulp_allowed
        );
        let mut t = Table::new(&[
            "case",
            "dtype",
            "naive",
            "stable",
            "reference",
            "ulp error",
            "pass",
        ]);
        for row in &r.rows {
            t.row(vec![
                row.case.clone(),
                row.dtype.clone(),
                row.naive_result.clone(),
                row.stable_result.clone(),
                row.reference.clone(),
                row.ulp_error
                    .map(|e| format!("{e:.2}"))
                    .unwrap_or_else(|| "mismatch".into()),
                pass_mark(row.pass),
            ]);
        }
        print!("{}", t.render());
        println!(
            "  {} of {} cases passed",
            r.rows.len() - r.failures,
            r.rows.len()
        );
    }
    if r.failures > 0 {
        bail!(
            "verify-overflow: {} of {} cases failed on the {} kernels",
            r.failures,
            r.rows.len(),
            set_name(r.kernels)
        );
    }
    Ok(())
}

/// Run `verify-quant`.
pub fn run_verify_quant(a: VerifyArgs) -> Result<()> {
    let r: QuantReport = verify_quant(kernel_set(a.naive));
    if a.json {
        print_json(&Versioned {
            schema_version: tensorforge_core::SCHEMA_VERSION,
            evidence: "measurement",
            report: &r,
        })?;
    } else {
        println!(
            "verify-quant — {} quantizer vs exact ONNX QuantizeLinear (round half to even, saturate)",
            set_name(r.kernels)
        );
        let mut t = Table::new(&[
            "input",
            "dtype",
            "scale",
            "zero point",
            "wrapping cast",
            "saturating",
            "reference",
            "pass",
        ]);
        for row in &r.rows {
            t.row(vec![
                row.input.clone(),
                row.dtype.clone(),
                format!("{}", row.scale),
                row.zero_point.to_string(),
                row.wrapping_result.to_string(),
                row.saturating_result.to_string(),
                row.reference.to_string(),
                pass_mark(row.pass),
            ]);
        }
        print!("{}", t.render());
        println!(
            "  {} of {} cases passed",
            r.rows.len() - r.failures,
            r.rows.len()
        );
    }
    if r.failures > 0 {
        bail!(
            "verify-quant: {} of {} cases failed on the {} kernels",
            r.failures,
            r.rows.len(),
            set_name(r.kernels)
        );
    }
    Ok(())
}

/// The operations `kernel` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KernelOp {
    /// log(e^a + e^b), elementwise over two inputs of one shape (f32/f64).
    Logaddexp,
    /// log2(2^a + 2^b), elementwise over two inputs of one shape (f32/f64).
    Logaddexp2,
    /// log Σ e^x over the last axis (f32/f64); the output drops that axis.
    Logsumexp,
    /// softmax over the last axis (f32/f64).
    Softmax,
    /// log_softmax over the last axis (f32/f64).
    #[value(name = "log_softmax", alias = "log-softmax")]
    LogSoftmax,
    /// f32 → u8/i8 (`--dtype`), per tensor or per `--axis`.
    Quantize,
    /// u8/i8 → f32, per tensor or per `--axis`.
    Dequantize,
    /// u8/i8 → u8/i8 with `--out-scale`/`--out-zero-point` (`--method fixed|float`).
    Requantize,
}

impl KernelOp {
    fn library(self) -> call::KernelOp {
        match self {
            KernelOp::Logaddexp => call::KernelOp::Logaddexp,
            KernelOp::Logaddexp2 => call::KernelOp::Logaddexp2,
            KernelOp::Logsumexp => call::KernelOp::Logsumexp,
            KernelOp::Softmax => call::KernelOp::Softmax,
            KernelOp::LogSoftmax => call::KernelOp::LogSoftmax,
            KernelOp::Quantize => call::KernelOp::Quantize,
            KernelOp::Dequantize => call::KernelOp::Dequantize,
            KernelOp::Requantize => call::KernelOp::Requantize,
        }
    }
}

/// Arguments of `kernel`.
#[derive(Args, Debug)]
pub struct KernelArgs {
    /// Which kernel.
    #[arg(value_enum)]
    pub op: KernelOp,
    /// Input `.npy` file; give it twice for logaddexp / logaddexp2.
    #[arg(long = "in", value_name = "FILE", required = true)]
    pub inputs: Vec<String>,
    /// Output `.npy` file (written via a temporary file and a rename).
    #[arg(long, value_name = "FILE")]
    pub out: String,
    /// Quantization scale; a comma-separated list (one per channel) with `--axis`.
    #[arg(long)]
    pub scale: Option<String>,
    /// Zero point; a comma-separated list with `--axis` (default 0).
    #[arg(long = "zero-point", allow_hyphen_values = true)]
    pub zero_point: Option<String>,
    /// Channel axis for per-axis (de)quantization.
    #[arg(long)]
    pub axis: Option<usize>,
    /// Quantized type for quantize / requantize output: u8 or i8 (default u8; requantize:
    /// the input's type).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Output scale for requantize.
    #[arg(long = "out-scale")]
    pub out_scale: Option<f32>,
    /// Output zero point for requantize (default 0).
    #[arg(long = "out-zero-point", allow_hyphen_values = true)]
    pub out_zero_point: Option<i32>,
    /// Requantization arithmetic: `fixed` (gemmlowp/TFLite integer path) or `float`.
    #[arg(long, default_value = "fixed")]
    pub method: String,
    /// Run the naive textbook kernel instead (logaddexp … log_softmax only).
    #[arg(long)]
    pub naive: bool,
}

fn read_npy(path: &str) -> Result<NpyArray> {
    let bytes = std::fs::read(path).with_context(|| format!("{path}: cannot read file"))?;
    parse_npy(&bytes).with_context(|| format!("{path}: malformed .npy input"))
}

/// Write bytes to `path` through a synced temporary sibling file and a rename (the store's
/// one implementation).
fn write_atomic(path: &str, bytes: &[u8]) -> Result<()> {
    let p = Path::new(path);
    if p.file_name().is_none() {
        bail!("invalid value for `--out`: `{path}` is not a file name");
    }
    tensorforge_store::write_atomic(p, bytes)?;
    Ok(())
}

/// Numbers parsed in f64 and checked to survive the f32 the kernels compute in: a finite
/// value that would become ±inf, or a non-zero one that would become 0 or subnormal, is an
/// error quoting what was typed.
fn parse_f32_list(s: &str, flag: &str) -> Result<Vec<f32>> {
    super::parse_list(s, flag, |x| {
        let v = x
            .parse::<f64>()
            .map_err(|_| anyhow!("invalid value for `{flag}`: `{x}` (expected a number)"))?;
        let f = v as f32;
        if v.is_finite() && (f.is_infinite() || (v != 0.0 && !f.is_normal())) {
            bail!(
                "`{x}` is outside the normal f32 range (±{:e} to ±{:e}) the kernels compute in",
                f32::MIN_POSITIVE,
                f32::MAX
            );
        }
        Ok(f)
    })
}

fn parse_i32_list(s: &str, flag: &str) -> Result<Vec<i32>> {
    super::parse_list(s, flag, |x| {
        x.parse::<i32>()
            .map_err(|_| anyhow!("invalid value for `{flag}`: `{x}` (expected an integer)"))
    })
}

/// Run `kernel OP`: read the inputs, run the library's dispatch
/// ([`tensorforge_kernels::call::run`]), write the output atomically.
pub fn run_kernel(a: KernelArgs) -> Result<()> {
    let op = a.op.library();
    if a.inputs.len() != op.arity() {
        bail!(
            "{} takes {} `--in` file(s), {} given",
            op.name(),
            op.arity(),
            a.inputs.len()
        );
    }
    let params = call::KernelParams {
        scale: a
            .scale
            .as_deref()
            .map(|s| parse_f32_list(s, "--scale"))
            .transpose()?
            .unwrap_or_default(),
        zero_point: a
            .zero_point
            .as_deref()
            .map(|s| parse_i32_list(s, "--zero-point"))
            .transpose()?
            .unwrap_or_default(),
        axis: a.axis,
        dtype: a
            .dtype
            .as_deref()
            .map(call::QuantDtype::parse)
            .transpose()?,
        out_scale: a.out_scale,
        out_zero_point: a.out_zero_point,
        method: call::RequantMethod::parse(&a.method)?,
        naive: a.naive,
    };
    let arrays = a
        .inputs
        .iter()
        .map(|p| read_npy(p))
        .collect::<Result<Vec<_>>>()?;
    let views: Vec<call::TensorRef> = a
        .inputs
        .iter()
        .zip(&arrays)
        .map(|(name, arr)| call::TensorRef::of(name, arr))
        .collect();
    let out = call::run(op, &views, &params)?;
    let bytes = to_npy(&out)?;
    write_atomic(&a.out, &bytes)?;
    println!("wrote {}: {} {:?}", a.out, out.data.dtype_name(), out.shape);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_kernels::npy::NpyData;

    fn tmp(name: &str) -> String {
        let d = std::env::temp_dir().join(format!("tf-kernels-cli-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name).to_string_lossy().into_owned()
    }

    fn save(path: &str, a: &NpyArray) {
        std::fs::write(path, to_npy(a).unwrap()).unwrap();
    }

    fn args(op: KernelOp, inputs: &[&str], out: &str) -> KernelArgs {
        KernelArgs {
            op,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            out: out.to_string(),
            scale: None,
            zero_point: None,
            axis: None,
            dtype: None,
            out_scale: None,
            out_zero_point: None,
            method: "fixed".into(),
            naive: false,
        }
    }

    #[test]
    fn verify_commands_pass_stable_and_fail_naive() {
        let v = |naive| VerifyArgs { json: true, naive };
        assert!(run_verify_overflow(v(false)).is_ok());
        assert!(run_verify_quant(v(false)).is_ok());
        let e = run_verify_overflow(v(true)).unwrap_err().to_string();
        assert!(e.contains("cases failed on the naive kernels"), "{e}");
        let e = run_verify_quant(v(true)).unwrap_err().to_string();
        assert!(e.contains("cases failed on the naive kernels"), "{e}");
    }

    #[test]
    fn kernel_softmax_and_logaddexp_on_npy_files() {
        let (a, b, y) = (tmp("a.npy"), tmp("b.npy"), tmp("y.npy"));
        save(
            &a,
            &NpyArray::new(vec![2, 2], NpyData::F32(vec![1000.0, 999.0, 0.0, 0.0])).unwrap(),
        );
        run_kernel(args(KernelOp::Softmax, &[&a], &y)).unwrap();
        let out = parse_npy(&std::fs::read(&y).unwrap()).unwrap();
        // softmax([1000, 999]) = [0.7310585786300049, 0.2689414213699951]; [0, 0] → [0.5, 0.5].
        assert_eq!(out.shape, vec![2, 2]);
        assert_eq!(
            out.data,
            NpyData::F32(vec![0.731_058_6, 0.268_941_43, 0.5, 0.5])
        );
        run_kernel(args(KernelOp::Logsumexp, &[&a], &y)).unwrap();
        let out = parse_npy(&std::fs::read(&y).unwrap()).unwrap();
        assert_eq!(out.shape, vec![2]);
        save(
            &b,
            &NpyArray::new(vec![2, 2], NpyData::F32(vec![1000.0; 4])).unwrap(),
        );
        run_kernel(args(KernelOp::Logaddexp, &[&a, &b], &y)).unwrap();
        let out = parse_npy(&std::fs::read(&y).unwrap()).unwrap();
        // logaddexp(1000, 1000) = 1000 + ln 2 = 1000.6931471805599;
        // logaddexp(999, 1000) = 1000 + ln(1 + e^-1) = 1000.3132616875182; (0, 1000) = 1000 in f32.
        assert_eq!(
            out.data,
            NpyData::F32(vec![
                1_000.693_147_180_559_9_f64 as f32,
                1_000.313_261_687_518_2_f64 as f32,
                1000.0,
                1000.0
            ])
        );
        // Mismatched shapes are an error and leave the output untouched.
        save(
            &b,
            &NpyArray::new(vec![4], NpyData::F32(vec![1.0; 4])).unwrap(),
        );
        let before = std::fs::read(&y).unwrap();
        let e = run_kernel(args(KernelOp::Logaddexp, &[&a, &b], &y)).unwrap_err();
        assert!(e.to_string().contains("differ in shape"));
        assert_eq!(std::fs::read(&y).unwrap(), before);
        // Malformed input.
        std::fs::write(&b, b"not numpy").unwrap();
        let e = run_kernel(args(KernelOp::Softmax, &[&b], &y)).unwrap_err();
        assert!(format!("{e:#}").contains("magic"), "{e:#}");
    }

    #[test]
    fn kernel_quantize_per_axis_and_requantize() {
        let (x, q, y) = (tmp("x.npy"), tmp("q.npy"), tmp("r.npy"));
        save(
            &x,
            &NpyArray::new(vec![2, 2], NpyData::F32(vec![-1.0, 2.5, 3.0, 1e9])).unwrap(),
        );
        let mut a = args(KernelOp::Quantize, &[&x], &q);
        a.scale = Some("1,0.5".into());
        a.zero_point = Some("0,10".into());
        a.axis = Some(0);
        run_kernel(a).unwrap();
        let out = parse_npy(&std::fs::read(&q).unwrap()).unwrap();
        // row 0 (scale 1, zp 0): −1 → 0 (saturated, not 255), 2.5 → 2 (tie to even);
        // row 1 (scale 0.5, zp 10): 3 / 0.5 = 6 → 16, 1e9 → 255.
        assert_eq!(out.data, NpyData::U8(vec![0, 2, 16, 255]));
        let mut r = args(KernelOp::Requantize, &[&q], &y);
        r.scale = Some("1".into());
        r.out_scale = Some(2.0);
        r.dtype = Some("i8".into());
        run_kernel(r).unwrap();
        let out = parse_npy(&std::fs::read(&y).unwrap()).unwrap();
        // M = 0.5, fixed point rounds half up then away: 0, 1 (2·0.5), 8, 127.5 → 128 → 127.
        assert_eq!(out.data, NpyData::I8(vec![0, 1, 8, 127]));
        let mut bad = args(KernelOp::Quantize, &[&x], &q);
        bad.scale = Some("0".into());
        assert!(run_kernel(bad).unwrap_err().to_string().contains("scale"));
        let mut bad = args(KernelOp::Quantize, &[&x], &q);
        bad.scale = Some("1,2,3".into());
        bad.axis = Some(1);
        assert!(run_kernel(bad).is_err());
    }
}
