//! `tensorforge workloads list`.

use super::print_json;
use crate::render::Table;
use anyhow::Result;
use clap::Subcommand;
use serde::Serialize;
use tensorforge_core::presets;

/// `workloads` subcommands.
#[derive(Subcommand, Debug)]
pub enum WorkloadsCommand {
    /// List the named workload presets.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct Entry {
    name: String,
    kind: &'static str,
    summary: String,
    command: String,
}

fn entries() -> Result<Vec<Entry>> {
    let mut v = Vec::new();
    for (name, ..) in presets::GEMM_PRESETS {
        let g = presets::gemm(name)?;
        v.push(Entry {
            name: name.to_string(),
            kind: "gemm",
            summary: format!("M={} N={} K={} {}", g.m, g.n, g.k, g.dtype),
            command: format!("tensorforge analyze gemm --preset {name}"),
        });
    }
    Ok(v)
}

/// Run `workloads`.
pub fn run(c: WorkloadsCommand) -> Result<()> {
    match c {
        WorkloadsCommand::List { json } => {
            let e = entries()?;
            if json {
                return print_json(&e);
            }
            let mut t = Table::new(&["name", "kind", "shape", "analyze with"]);
            for x in e {
                t.row(vec![x.name, x.kind.into(), x.summary, x.command]);
            }
            print!("{}", t.render());
            Ok(())
        }
    }
}
