//! Placeholder, filled in by its issue.

use anyhow::{bail, Result};
use clap::Args;

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct GateArgs {}

/// Run (placeholder).
pub fn run_gate(_a: GateArgs) -> Result<u8> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct ReportArgs {}

/// Run (placeholder).
pub fn run_report(_a: ReportArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct HistoryArgs {}

/// Run (placeholder).
pub fn run_history(_a: HistoryArgs) -> Result<()> {
    bail!("not implemented yet")
}
