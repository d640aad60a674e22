//! Placeholder, filled in by its issue.

use anyhow::{bail, Result};
use clap::Args;

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct BenchArgs {}

/// Run (placeholder).
pub fn run_bench(_a: BenchArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct CalibrateArgs {}

/// Run (placeholder).
pub fn run_calibrate(_a: CalibrateArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct ValidateArgs {}

/// Run (placeholder).
pub fn run_validate(_a: ValidateArgs) -> Result<()> {
    bail!("not implemented yet")
}
