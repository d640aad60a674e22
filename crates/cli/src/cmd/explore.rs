//! `tensorforge explore gemm|conv2d|transformer`.

use anyhow::Result;
use clap::Args;

/// Arguments of `explore`.
#[derive(Args, Debug)]
pub struct ExploreArgs {}

/// Run `explore`.
pub fn run(_a: ExploreArgs) -> Result<()> {
    anyhow::bail!("explore: not wired yet")
}
