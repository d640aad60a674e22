//! `tensorforge roofline --hw NAME --flops F --bytes B`.

use super::{print_json, HwArgs};
use crate::render;
use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;
use tensorforge_core::{roofline, DType, Roofline, LIMITATIONS, SCHEMA_VERSION};

/// Arguments of `roofline`.
#[derive(Args, Debug)]
pub struct RooflineArgs {
    #[command(flatten)]
    hw: HwArgs,
    /// Work in FLOPs (or integer OPs), e.g. 50000000 or 5e7.
    #[arg(long)]
    flops: String,
    /// DRAM bytes moved, e.g. 1000000 or 1e6.
    #[arg(long)]
    bytes: String,
    /// Dtype whose peak is used (default fp16).
    #[arg(long, default_value = "fp16")]
    dtype: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct RooflineReport {
    schema_version: u32,
    evidence: &'static str,
    hardware: String,
    #[serde(flatten)]
    roofline: Roofline,
    limitations: Vec<String>,
}

fn positive(s: &str, flag: &str) -> Result<f64> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => bail!("invalid value for `{flag}`: `{s}` (expected a positive, finite number)"),
    }
}

/// Run `roofline`.
pub fn run(a: RooflineArgs) -> Result<()> {
    let hw = a.hw.load()?;
    let flops = positive(&a.flops, "--flops")?;
    let bytes = positive(&a.bytes, "--bytes")?;
    let dtype = DType::parse(&a.dtype)?;
    let r = roofline(&hw, dtype, flops, bytes, &[])?;
    if a.json {
        return print_json(&RooflineReport {
            schema_version: SCHEMA_VERSION,
            evidence: "model",
            hardware: hw.name.clone(),
            roofline: r,
            limitations: LIMITATIONS.iter().map(|s| s.to_string()).collect(),
        });
    }
    println!("{} — evidence: model", hw.name);
    println!("  FLOPs {flops:e}, DRAM bytes {bytes:e}");
    println!(
        "  arithmetic intensity {:.3} FLOP/B",
        r.arithmetic_intensity
    );
    println!(
        "  ridge point          {:.3} FLOP/B",
        r.ridge_flops_per_byte
    );
    println!("  bound                {}", r.bound.label());
    println!(
        "  attainable           {}\n",
        crate::fmt::rate(r.attainable_flops_per_s, "FLOP")
    );
    print!("{}", render::roofline(&r));
    Ok(())
}
