//! Placeholder, filled in by its issue.

use anyhow::{bail, Result};
use clap::Args;

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct QuickstartArgs {}

/// Run (placeholder).
pub fn run_quickstart(_a: QuickstartArgs) -> Result<u8> {
    bail!("not implemented yet")
}
