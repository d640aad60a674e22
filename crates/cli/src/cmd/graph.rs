//! Placeholder, filled in by its issue.

use anyhow::{bail, Result};
use clap::Args;

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct FuseArgs {}

/// Run (placeholder).
pub fn run_fuse(_a: FuseArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct PlanMemoryArgs {}

/// Run (placeholder).
pub fn run_plan_memory(_a: PlanMemoryArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct RunArgs {}

/// Run (placeholder).
pub fn run_graph(_a: RunArgs) -> Result<()> {
    bail!("not implemented yet")
}

/// Arguments (placeholder).
#[derive(Args, Debug)]
pub struct MemoryTrafficArgs {}

/// Run (placeholder).
pub fn run_memory_traffic(_a: MemoryTrafficArgs) -> Result<()> {
    bail!("not implemented yet")
}
