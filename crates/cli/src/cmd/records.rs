//! Placeholder, filled in by its issue.

use anyhow::{bail, Result};
use clap::Args;

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct RecordsArgs {}

/// Run (placeholder).
pub fn run_records(_a: RecordsArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct IngestArgs {}

/// Run (placeholder).
pub fn run_ingest(_a: IngestArgs) -> Result<()> {
    bail!("not implemented yet")
}
