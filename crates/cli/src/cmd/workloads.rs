//! `tensorforge workloads list`.

use super::print_json;
use crate::render::Table;
use anyhow::Result;
use clap::Subcommand;
use serde::Serialize;
use tensorforge_core::conv::{conv2d_preset, CONV2D_PRESET_NAMES};
use tensorforge_core::presets;
use tensorforge_core::transformer::{transformer_preset, TRANSFORMER_PRESET_NAMES};

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
    for name in CONV2D_PRESET_NAMES {
        let c = conv2d_preset(name)?;
        v.push(Entry {
            name: name.to_string(),
            kind: "conv2d",
            summary: format!(
                "B={} {}->{} ch at {}x{}, {}x{} kernel, stride {}, pad {}, {}",
                c.batch,
                c.in_channels,
                c.out_channels,
                c.height,
                c.width,
                c.kernel_h,
                c.kernel_w,
                c.stride_h,
                c.pad_h,
                c.dtype
            ),
            command: format!("tensorforge analyze conv2d --preset {name}"),
        });
    }
    for name in TRANSFORMER_PRESET_NAMES {
        let b = transformer_preset(name)?;
        v.push(Entry {
            name: name.to_string(),
            kind: "transformer",
            summary: format!(
                "B={} S={} D={} H={} F={} {} {} {}",
                b.batch,
                b.seq_len,
                b.d_model,
                b.heads,
                b.d_ff,
                b.mlp.name(),
                b.norm.name(),
                b.dtype
            ),
            command: format!("tensorforge analyze transformer --preset {name}"),
        });
    }
    Ok(v)
}

/// Version of `workloads list --json`.
const WORKLOADS_SCHEMA_VERSION: u32 = 1;

/// Run `workloads`.
pub fn run(c: WorkloadsCommand) -> Result<()> {
    match c {
        WorkloadsCommand::List { json } => {
            let e = entries()?;
            if json {
                return print_json(&serde_json::json!({
                    "schema_version": WORKLOADS_SCHEMA_VERSION,
                    "workloads": e,
                }));
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
