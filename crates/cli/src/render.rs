//! Human-readable reports. Each function renders one Core result as text; nothing here
//! computes model quantities.

use crate::fmt;
use std::fmt::Write;
use tensorforge_core::{GemmAnalysis, HardwareSpec, Roofline};

/// A simple left-aligned text table.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings.
    pub fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: vec![],
        }
    }

    /// Add a row.
    pub fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    /// Render with two spaces of indent.
    pub fn render(&self) -> String {
        let n = self.head.len();
        let mut w = vec![0usize; n];
        for r in std::iter::once(&self.head).chain(self.rows.iter()) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.head).chain(self.rows.iter()) {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = w[i.min(n - 1)]))
                .collect();
            let _ = writeln!(out, "  {}", line.join("  ").trim_end());
        }
        out
    }
}

/// Roofline section shared by every report.
pub fn roofline(r: &Roofline) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Roofline ({} dense peak {}, AI {:.2} FLOP/B)",
        r.dtype,
        fmt::rate(r.peak_flops_per_s, "FLOP"),
        r.arithmetic_intensity
    );
    let mut t = Table::new(&["roof", "bandwidth", "bytes", "ridge", "attainable", "time"]);
    for l in &r.levels {
        t.row(vec![
            l.level.clone(),
            fmt::bandwidth(l.bandwidth_bytes_per_s),
            fmt::bytes(l.bytes),
            format!("{:.2} FLOP/B", l.ridge_flops_per_byte),
            fmt::rate(l.attainable_flops_per_s, "FLOP"),
            fmt::time(l.time_s),
        ]);
    }
    t.row(vec![
        "compute".into(),
        String::new(),
        String::new(),
        String::new(),
        fmt::rate(r.peak_flops_per_s, "FLOP"),
        fmt::time(r.compute_time_s),
    ]);
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "  bound: {} (binding roof: {}); attainable {}; time lower bound {}",
        r.bound.label(),
        r.binding_roof,
        fmt::rate(r.attainable_flops_per_s, "FLOP"),
        fmt::time(r.time_lower_bound_s)
    );
    o
}

/// Limitations list.
pub fn limitations(l: &[String]) -> String {
    let mut o = String::from("What this model leaves out:\n");
    for s in l {
        let _ = writeln!(o, "  - {s}");
    }
    o
}

/// The GEMM report.
pub fn gemm(r: &GemmAnalysis, hw: &HardwareSpec) -> String {
    let g = &r.workload;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "GEMM M={} N={} K={} batch={} {}{} on {} — evidence: {}",
        g.m,
        g.n,
        g.k,
        g.batch,
        g.dtype,
        if g.accumulate { " (C += A·B)" } else { "" },
        hw.name,
        r.evidence
    );
    let _ = writeln!(
        o,
        "  MACs                  {}",
        fmt::count(r.macs as f64, "")
    );
    let _ = writeln!(
        o,
        "  FLOPs                 {}",
        fmt::count(r.flops as f64, "FLOP")
    );
    let _ = writeln!(
        o,
        "  compulsory bytes      {}  (A {}, B {}, C {})",
        fmt::bytes(r.compulsory_bytes as f64),
        fmt::bytes(r.operand_bytes.a as f64),
        fmt::bytes(r.operand_bytes.b as f64),
        fmt::bytes(r.operand_bytes.c as f64)
    );
    let _ = writeln!(
        o,
        "  arithmetic intensity  {:.2} FLOP/B\n",
        r.arithmetic_intensity
    );
    o.push_str(&roofline(&r.roofline));
    o.push('\n');
    if let Some(p) = &r.pe_mapping {
        let _ = writeln!(
            o,
            "PE mapping ({}x{}{} PEs; primary: {}, {} on rows, {} on cols, {} in time)",
            p.pe_rows,
            p.pe_cols,
            if p.arrays > 1 {
                format!(" x{}", p.arrays)
            } else {
                String::new()
            },
            p.dataflow.name(),
            p.rows_dim,
            p.cols_dim,
            p.time_dim
        );
        let mut t = Table::new(&[
            "dataflow",
            "folds",
            "waves",
            "spatial util",
            "util",
            "cycles",
            "compute time",
        ]);
        for m in &r.pe_mappings {
            t.row(vec![
                m.dataflow.name().into(),
                m.folds.to_string(),
                m.waves.to_string(),
                format!("{:.1} %", 100.0 * m.spatial_utilization),
                format!("{:.1} %", 100.0 * m.utilization),
                m.compute_cycles.to_string(),
                fmt::time(m.compute_time_s),
            ]);
        }
        o.push_str(&t.render());
        o.push('\n');
    }
    if let Some(s) = &r.sram_fit {
        let _ = writeln!(
            o,
            "SRAM fit (capacity {} from {})",
            fmt::bytes(s.capacity_bytes as f64),
            s.capacity_source
        );
        let yes = |b: bool| if b { "fits" } else { "does not fit" };
        let _ = writeln!(
            o,
            "  whole working set {}: {}",
            fmt::bytes(s.working_set_bytes as f64),
            yes(s.working_set_fits)
        );
        if let (Some(t), Some(b), Some(f), Some(db), Some(dbf)) = (
            s.tile,
            s.tile_bytes,
            s.tile_fits,
            s.double_buffered_bytes,
            s.double_buffered_fits,
        ) {
            let _ = writeln!(
                o,
                "  tile {t}: {} {}; double-buffered {} {}",
                fmt::bytes(b as f64),
                yes(f),
                fmt::bytes(db as f64),
                yes(dbf)
            );
        }
        o.push('\n');
    }
    let _ = writeln!(
        o,
        "Timing without tiling: compute {}, memory {}, serialized {}, overlapped {} ({}-bound)\n",
        fmt::time(r.timing.compute_time_s),
        fmt::time(r.timing.memory_time_s),
        fmt::time(r.timing.serialized_time_s),
        fmt::time(r.timing.overlapped_time_s),
        r.timing.bound.label()
    );
    if !r.schedules.is_empty() {
        let tile = r
            .sram_fit
            .as_ref()
            .and_then(|s| s.tile)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let _ = writeln!(o, "Tile schedules {tile} (DRAM traffic per operand)");
        let mut t = Table::new(&[
            "schedule",
            "loops",
            "A read",
            "B read",
            "C read",
            "C write",
            "total",
            "amplif.",
            "eff. AI",
            "overlapped",
            "bound",
        ]);
        for s in &r.schedules {
            t.row(vec![
                s.name.clone(),
                s.loops.join(","),
                fmt::bytes(s.dram_bytes.a_read as f64),
                fmt::bytes(s.dram_bytes.b_read as f64),
                fmt::bytes(s.dram_bytes.c_read as f64),
                fmt::bytes(s.dram_bytes.c_write as f64),
                fmt::bytes(s.dram_bytes.total as f64),
                format!("{:.2}x", s.amplification),
                format!("{:.2}", s.effective_arithmetic_intensity),
                fmt::time(s.timing.overlapped_time_s),
                s.timing.bound.label().into(),
            ]);
        }
        o.push_str(&t.render());
        o.push('\n');
    }
    o.push_str(&limitations(&r.limitations));
    o
}
