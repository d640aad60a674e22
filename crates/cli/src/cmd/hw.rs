//! `tensorforge hw list|show`.

use super::{load_hw_file, print_json};
use crate::fmt;
use crate::render::Table;
use anyhow::{bail, Result};
use clap::Subcommand;
use tensorforge_core::{presets, HardwareSpec};

/// `hw` subcommands.
#[derive(Subcommand, Debug)]
pub enum HwCommand {
    /// List the built-in hardware presets.
    List {
        /// Print JSON (every preset's full spec).
        #[arg(long)]
        json: bool,
    },
    /// Show one preset (or a hardware file with --file).
    Show {
        /// Preset name or alias.
        name: Option<String>,
        /// A hardware file (TOML or JSON) to validate and show instead.
        #[arg(long, value_name = "FILE", conflicts_with = "name")]
        file: Option<String>,
        /// Print JSON (the same format a hardware file uses).
        #[arg(long)]
        json: bool,
    },
}

/// Run `hw`.
pub fn run(c: HwCommand) -> Result<()> {
    match c {
        HwCommand::List { json } => {
            let all = presets::hardware_presets();
            if json {
                return print_json(&serde_json::json!({
                    "schema_version": tensorforge_core::hardware::HARDWARE_SCHEMA_VERSION,
                    "presets": all,
                }));
            }
            let mut t = Table::new(&["name", "peaks (dense)", "DRAM", "tile buffer", "PE array"]);
            for h in &all {
                t.row(vec![
                    h.name.clone(),
                    peaks_short(h),
                    h.dram
                        .bandwidth_bytes_per_s
                        .map(fmt::bandwidth)
                        .unwrap_or_default(),
                    h.tile_buffer()
                        .map(|l| {
                            format!(
                                "{} {}",
                                l.name,
                                fmt::bytes(l.capacity_bytes.unwrap_or(0) as f64)
                            )
                        })
                        .unwrap_or_else(|| "-".into()),
                    h.pe_array
                        .as_ref()
                        .map(|p| {
                            format!(
                                "{}x{}{}",
                                p.rows,
                                p.cols,
                                if p.arrays > 1 {
                                    format!(" x{}", p.arrays)
                                } else {
                                    String::new()
                                }
                            )
                        })
                        .unwrap_or_else(|| "-".into()),
                ]);
            }
            print!("{}", t.render());
            println!(
                "\naliases: {}",
                presets::HARDWARE_ALIASES
                    .iter()
                    .map(|(a, p)| format!("{a} -> {p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Ok(())
        }
        HwCommand::Show { name, file, json } => {
            let h = match (name, file) {
                (_, Some(f)) => load_hw_file(&f)?,
                (Some(n), None) => presets::hardware(&n)?,
                (None, None) => bail!("give a preset name or --file FILE"),
            };
            if json {
                return print_json(&h);
            }
            print!("{}", show(&h));
            Ok(())
        }
    }
}

fn peaks_short(h: &HardwareSpec) -> String {
    h.peak_ops_per_s
        .iter()
        .map(|(d, v)| {
            let unit = if d.name().starts_with("int") {
                "OP"
            } else {
                "FLOP"
            };
            format!("{d} {}", fmt::rate(*v, unit))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn show(h: &HardwareSpec) -> String {
    let mut o = format!("{}\n  {}\n\nDense peak throughput\n", h.name, h.description);
    let mut t = Table::new(&["dtype", "peak"]);
    for (d, v) in &h.peak_ops_per_s {
        let unit = if d.name().starts_with("int") {
            "OP"
        } else {
            "FLOP"
        };
        t.row(vec![d.to_string(), fmt::rate(*v, unit)]);
    }
    o.push_str(&t.render());
    o.push_str("\nMemory levels\n");
    let mut t = Table::new(&[
        "level",
        "capacity",
        "instances",
        "bandwidth",
        "holds",
        "read / write energy",
    ]);
    let energy = |e: Option<&tensorforge_core::AccessEnergy>| {
        e.map(|e| format!("{} / {} pJ/B", e.read_pj_per_byte, e.write_pj_per_byte))
            .unwrap_or_else(|| "n/p".into())
    };
    for l in std::iter::once(&h.dram).chain(h.onchip.iter()) {
        let holds = if l.operands.is_empty() {
            "a, b, c".to_string()
        } else {
            let names: Vec<&str> = l.operands.iter().map(|x| x.name()).collect();
            names.join(", ")
        };
        let capacity = l
            .capacity_bytes
            .map(|c| fmt::bytes(c as f64))
            .unwrap_or_else(|| "n/p".into());
        t.row(vec![
            l.name.clone(),
            if l.capacity_per_operand {
                format!("{capacity} per operand")
            } else {
                capacity
            },
            l.instances.to_string(),
            l.bandwidth_bytes_per_s
                .map(fmt::bandwidth)
                .unwrap_or_else(|| "n/p".into()),
            holds,
            energy(l.energy.as_ref()),
        ]);
    }
    o.push_str(&t.render());
    if let Some(p) = &h.pe_array {
        o.push_str(&format!(
            "\nPE array: {}x{} PEs x{} arrays, {} MAC/PE/cycle at {:.3} GHz (derived peak {})\n",
            p.rows,
            p.cols,
            p.arrays,
            p.macs_per_pe_per_cycle,
            p.clock_hz / 1e9,
            fmt::rate(p.peak_flops_per_s(), "FLOP")
        ));
        match &p.energy {
            Some(e) => o.push_str(&format!(
                "  energy: {} pJ per {} MAC; registers {} ({})\n",
                e.mac_pj,
                e.mac_dtype,
                energy(Some(&e.registers)),
                e.source
            )),
            None => {
                o.push_str("  energy: n/p (per-level energy and explore --rank energy need it)\n")
            }
        }
    }
    match &h.interconnect {
        Some(i) => o.push_str(&format!(
            "\nInterconnect: {}, {} per device each way{}{}{}\n",
            i.name,
            fmt::bandwidth(i.unidirectional_bytes_per_s),
            i.peer_unidirectional_bytes_per_s
                .map(|p| format!(", {} to any one peer", fmt::bandwidth(p)))
                .unwrap_or_default(),
            i.links.map(|l| format!(", {l} links")).unwrap_or_default(),
            i.domain_devices
                .map(|d| format!(", {d} devices per domain"))
                .unwrap_or_default(),
        )),
        None => o.push_str("\nInterconnect: n/p (multi-device splits need one)\n"),
    }
    if !h.notes.is_empty() {
        o.push_str("\nNotes\n");
        for n in &h.notes {
            o.push_str(&format!("  - {n}\n"));
        }
    }
    if !h.sources.is_empty() {
        o.push_str("\nSources\n");
        for s in &h.sources {
            o.push_str(&format!("  - {s}\n"));
        }
    }
    o.push_str("\n(n/p = not published in the sources; see docs/hardware.md)\n");
    o
}
