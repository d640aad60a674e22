//! Human-readable reports. Each function renders one Core result as text; nothing here
//! computes model quantities.

use crate::fmt;
use std::fmt::Write;
use tensorforge_core::conv::Conv2dAnalysis;
use tensorforge_core::dse::{Candidate, ExploreResult, MultiExploreResult, RankBy};
use tensorforge_core::transformer::{
    GemmRow, ModelAnalysis, NonGemmRow, TransformerAnalysis, TransformerTotals,
};
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

    /// Render with two spaces of indent. A cell longer than [`MAX_CELL_CHARS`] is cut and
    /// says how much was left out (the JSON output keeps everything); padding is written
    /// by hand, so no width limit of `format!` applies.
    pub fn render(&self) -> String {
        let n = self.head.len();
        let cell = |c: &String| -> String {
            let len = c.chars().count();
            if len <= MAX_CELL_CHARS {
                c.clone()
            } else {
                let keep = MAX_CELL_CHARS - 24;
                let cut: String = c.chars().take(keep).collect();
                format!("{cut}… [+{} chars]", len - keep)
            }
        };
        let cells: Vec<Vec<String>> = std::iter::once(&self.head)
            .chain(self.rows.iter())
            .map(|r| r.iter().take(n).map(cell).collect())
            .collect();
        let mut w = vec![0usize; n];
        for r in &cells {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in &cells {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pad = w[i].saturating_sub(c.chars().count());
                    format!("{c}{}", " ".repeat(pad))
                })
                .collect();
            let _ = writeln!(out, "  {}", line.join("  ").trim_end());
        }
        out
    }
}

/// Longest table cell shown in full (longer ones are cut, with the count left out).
pub const MAX_CELL_CHARS: usize = 200;

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
            if s.capacity_source == tensorforge_core::analysis::GIVEN_SRAM_SOURCE {
                "--sram-bytes"
            } else {
                &s.capacity_source
            }
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
        if let (Some(first), Some(m)) = (r.schedules.first(), &r.pe_mapping) {
            if !first.levels.is_empty() {
                let _ = writeln!(
                    o,
                    "Per-level traffic, {} (bytes read / written at each level; energy where sourced)",
                    m.dataflow.name()
                );
                let mut head = vec!["schedule".to_string()];
                for l in &first.levels {
                    head.push(l.level.clone());
                }
                head.push("energy".into());
                head.push("largest".into());
                let head: Vec<&str> = head.iter().map(String::as_str).collect();
                let mut t = Table::new(&head);
                for s in &r.schedules {
                    let mut row = vec![s.name.clone()];
                    for l in &s.levels {
                        row.push(format!(
                            "{} / {}",
                            fmt::bytes(l.read_bytes as f64),
                            fmt::bytes(l.write_bytes as f64)
                        ));
                    }
                    let e = s.energy.as_ref();
                    row.push(
                        e.and_then(|e| e.total_pj)
                            .map(fmt::energy_pj)
                            .unwrap_or_else(|| "-".into()),
                    );
                    row.push(
                        e.and_then(|e| e.largest.clone())
                            .unwrap_or_else(|| "-".into()),
                    );
                    t.row(row);
                }
                o.push_str(&t.render());
                if let Some(e) = &first.energy {
                    if !e.missing.is_empty() {
                        let _ = writeln!(o, "No sourced energy for: {}", e.missing.join(", "));
                    }
                }
                o.push('\n');
            }
        }
    }
    o.push_str(&limitations(&r.limitations));
    o
}

/// The Conv2D report: shapes, both traffic models, then the lowered GEMM's report.
pub fn conv(r: &Conv2dAnalysis, hw: &HardwareSpec) -> String {
    let c = &r.workload;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Conv2D B={} Cin={} {}x{} -> Cout={} {}x{}, kernel {}x{}, stride {}x{}, pad {}x{}, dilation {}x{}, groups {} {} on {} — evidence: {}",
        c.batch, c.in_channels, c.height, c.width, c.out_channels, r.output_height, r.output_width,
        c.kernel_h, c.kernel_w, c.stride_h, c.stride_w, c.pad_h, c.pad_w, c.dilation_h, c.dilation_w,
        c.groups, c.dtype, hw.name, r.evidence
    );
    let g = &r.lowered_gemm;
    let _ = writeln!(
        o,
        "  lowered GEMM          M={} N={} K={} batch(groups)={}",
        g.m, g.n, g.k, g.batch
    );
    let _ = writeln!(
        o,
        "  MACs / FLOPs          {} / {}",
        fmt::count(r.macs as f64, ""),
        fmt::count(r.flops as f64, "FLOP")
    );
    let _ = writeln!(
        o,
        "  tensors               input {}, weights {}, output {}\n",
        fmt::bytes(r.input_bytes as f64),
        fmt::bytes(r.weight_bytes as f64),
        fmt::bytes(r.output_bytes as f64)
    );
    let mut t = Table::new(&[
        "traffic model",
        "DRAM bytes",
        "AI (FLOP/B)",
        "time lower bound",
        "bound",
    ]);
    t.row(vec![
        "implicit GEMM".into(),
        fmt::bytes(r.implicit_gemm.dram_bytes as f64),
        format!("{:.2}", r.implicit_gemm.arithmetic_intensity),
        fmt::time(r.implicit_gemm.roofline.time_lower_bound_s),
        r.implicit_gemm.roofline.bound.label().into(),
    ]);
    t.row(vec![
        format!(
            "materialized im2col (expansion {:.2}x)",
            r.im2col.expansion_ratio
        ),
        fmt::bytes(r.im2col.dram_bytes as f64),
        format!("{:.2}", r.im2col.arithmetic_intensity),
        fmt::time(r.im2col.roofline.time_lower_bound_s),
        r.im2col.roofline.bound.label().into(),
    ]);
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "  im2col matrix {}\n",
        fmt::bytes(r.im2col.im2col_bytes as f64)
    );
    o.push_str("The lowered GEMM on its own (its A operand is the im2col matrix):\n\n");
    let mut inner = gemm(&r.gemm, hw);
    // The lowered GEMM's own limitations are the Core's; print the conv list once below.
    if let Some(i) = inner.find("What this model leaves out:") {
        inner.truncate(i);
    }
    o.push_str(&inner);
    o.push_str(&limitations(&r.limitations));
    o
}

fn gemm_rows(rows: &[GemmRow]) -> String {
    let mut t = Table::new(&[
        "GEMM",
        "M",
        "N",
        "K",
        "batch",
        "FLOPs",
        "bytes",
        "AI",
        "lower bound",
        "bound",
    ]);
    for g in rows {
        t.row(vec![
            g.name.clone(),
            g.m.to_string(),
            g.n.to_string(),
            g.k.to_string(),
            g.batch.to_string(),
            fmt::count(g.flops as f64, "FLOP"),
            fmt::bytes(g.compulsory_bytes as f64),
            format!("{:.1}", g.arithmetic_intensity),
            fmt::time(g.time_lower_bound_s),
            g.bound.label().into(),
        ]);
    }
    t.render()
}

fn non_gemm_rows(rows: &[&NonGemmRow]) -> String {
    let mut t = Table::new(&[
        "op",
        "kind",
        "elements",
        "FLOPs",
        "bytes",
        "AI",
        "lower bound",
        "bound",
    ]);
    for g in rows {
        t.row(vec![
            g.name.clone(),
            g.op.name().to_string(),
            fmt::count(g.elements as f64, ""),
            fmt::count(g.flops as f64, "FLOP"),
            fmt::bytes(g.dram_bytes as f64),
            format!("{:.2}", g.arithmetic_intensity),
            fmt::time(g.time_lower_bound_s),
            g.bound.label().into(),
        ]);
    }
    t.render()
}

fn totals(t: &TransformerTotals) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "  FLOPs {} (GEMM {}, other {}); unfused DRAM bytes {}; AI {:.2} FLOP/B",
        fmt::count(t.flops as f64, "FLOP"),
        fmt::count(t.gemm_flops as f64, "FLOP"),
        fmt::count(t.non_gemm_flops as f64, "FLOP"),
        fmt::bytes(t.dram_bytes as f64),
        t.arithmetic_intensity
    );
    let _ = writeln!(
        o,
        "  weights {}; KV cache {}; sum of per-op lower bounds {}",
        fmt::bytes(t.weight_bytes as f64),
        fmt::bytes(t.kv_cache_bytes as f64),
        fmt::time(t.time_lower_bound_s)
    );
    o
}

/// The transformer-block report.
pub fn transformer(r: &TransformerAnalysis) -> String {
    let b = &r.workload;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Transformer block on {} — evidence: {}\n  batch {}, {:?} with {} new tokens/sequence attending over {}, D={}, heads {} (kv {}, group {}), head_dim {}, d_ff {}, {} MLP, {}, causal {} (useful fraction {:.3}), {}\n",
        r.hardware, r.evidence, b.batch, b.phase, r.query_len, r.attention_len, b.d_model, b.heads, r.kv_heads,
        r.kv_group_size, r.head_dim, b.d_ff, b.mlp.name(), b.norm.name(), b.causal, r.causal_useful_fraction, b.dtype
    );
    o.push_str(&gemm_rows(&r.gemms));
    o.push('\n');
    o.push_str(&non_gemm_rows(&r.non_gemm.iter().collect::<Vec<_>>()));
    o.push_str("\nTotals (every op run as its own kernel)\n");
    o.push_str(&totals(&r.totals));
    o.push('\n');
    o.push_str("The totals as one roofline point (all FLOPs over the unfused DRAM bytes):\n");
    o.push_str(&roofline(&r.roofline));
    o.push('\n');
    o.push_str(&limitations(&r.limitations));
    o
}

/// The decoder-model report.
pub fn model(r: &ModelAnalysis) -> String {
    let m = &r.workload;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Decoder model {}on {} — evidence: {}\n  {} layers, vocab {}, tied embeddings {}, LM head over {} tokens, {} parameters{}\n",
        if m.name.is_empty() { String::new() } else { format!("`{}` ", m.name) },
        r.hardware, r.evidence, r.layers, m.vocab_size, m.tie_word_embeddings, r.lm_head_tokens,
        fmt::count(r.weight_params as f64, ""),
        if r.active_weight_params != r.weight_params {
            format!(
                " ({} active per token; this batch touches {} routed experts per MoE layer)",
                fmt::count(r.active_weight_params as f64, ""),
                r.block.experts_touched
            )
        } else {
            String::new()
        }
    );
    if let Some(d) = &r.dense_block {
        let _ = writeln!(
            o,
            "The first {} layers (dense MLP, d_ff {}):",
            r.dense_layers, d.workload.d_ff
        );
        o.push_str(&gemm_rows(&d.gemms));
        o.push('\n');
        let _ = writeln!(
            o,
            "Each of the other {} layers:",
            r.layers.saturating_sub(r.dense_layers)
        );
    } else {
        o.push_str("One block (repeated per layer):\n");
    }
    o.push_str(&gemm_rows(&r.block.gemms));
    o.push('\n');
    o.push_str(&non_gemm_rows(&r.block.non_gemm.iter().collect::<Vec<_>>()));
    o.push_str("\nOutside the blocks:\n");
    o.push_str(&gemm_rows(std::slice::from_ref(&r.lm_head)));
    o.push_str(&non_gemm_rows(&[&r.embedding, &r.final_norm]));
    o.push_str("\nWhole model (every op its own kernel)\n");
    o.push_str(&totals(&r.totals));
    o.push('\n');
    o.push_str(&roofline(&r.roofline));
    if !m.notes.is_empty() {
        o.push_str("\nHow the config was read:\n");
        for n in &m.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o.push('\n');
    o.push_str(&limitations(&r.limitations));
    o
}

fn candidates_table(c: &[Candidate]) -> String {
    let energy = c.iter().any(|x| x.energy.is_some());
    let mut head = vec![
        "#",
        "tile",
        "PE",
        "schedule",
        "dataflow",
        "DRAM",
        "cycles",
        "SRAM",
        "overlapped",
        "serialized",
        "bound",
    ];
    if energy {
        head.extend(["energy", "largest part"]);
    }
    let mut t = Table::new(&head);
    for (i, x) in c.iter().enumerate() {
        let mut extra = vec![];
        if energy {
            let e = x.energy.as_ref();
            extra.push(
                e.and_then(|e| e.total_pj)
                    .map(fmt::energy_pj)
                    .unwrap_or_else(|| "-".into()),
            );
            extra.push(
                e.and_then(|e| e.largest.clone())
                    .unwrap_or_else(|| "-".into()),
            );
        }
        t.row(
            [
                vec![
                    (i + 1).to_string(),
                    x.tile.to_string(),
                    format!("{}x{}", x.pe_rows, x.pe_cols),
                    x.schedule.clone(),
                    x.dataflow.name().into(),
                    fmt::bytes(x.dram_bytes as f64),
                    x.compute_cycles.to_string(),
                    fmt::bytes(x.sram_used_bytes as f64),
                    fmt::time(x.timing.overlapped_time_s),
                    fmt::time(x.timing.serialized_time_s),
                    x.timing.bound.label().into(),
                ],
                extra,
            ]
            .concat(),
        );
    }
    t.render()
}

/// The design-space exploration report for one GEMM.
pub fn explore(r: &ExploreResult) -> String {
    let g = &r.workload;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Design-space exploration: GEMM M={} N={} K={} batch={} {} on {} — evidence: {}",
        g.m, g.n, g.k, g.batch, g.dtype, r.hardware, r.evidence
    );
    let _ = writeln!(
        o,
        "  {} candidates, {} feasible, evaluated in {} ({} evaluations/s); SRAM {} from {}",
        r.candidates_total,
        r.evaluated,
        fmt::time(r.elapsed_s),
        fmt::count(r.evaluations_per_s, ""),
        fmt::bytes(r.sram_capacity_bytes as f64),
        r.sram_source
    );
    for (reason, n) in &r.infeasible {
        let _ = writeln!(o, "  infeasible: {n} ({reason})");
    }
    let _ = writeln!(o, "  ranking: {}\n", r.ranking_rule);
    let _ = writeln!(
        o,
        "Top {} (ties for best: {})",
        r.top.len(),
        r.ties_for_best_count
    );
    o.push_str(&candidates_table(&r.top));
    let _ = writeln!(
        o,
        "\nPareto front over ({}, SRAM bytes, PE count): {} candidates",
        match r.rank {
            RankBy::Latency => "overlapped time",
            RankBy::Energy => "energy",
            RankBy::Edp => "energy-delay product",
        },
        r.pareto.len()
    );
    o.push_str(&candidates_table(&r.pareto));
    let _ = writeln!(o, "\nWhy: {}\n", r.why);
    o.push_str(&limitations(&r.limitations));
    o
}

/// The per-GEMM best-mapping report for a decomposed workload.
pub fn explore_many(r: &MultiExploreResult) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Best mapping per GEMM on {} — evidence: {}\n  {} candidates over {} distinct GEMMs, {} feasible, {} evaluations/s\n  ranking: {}\n",
        r.hardware,
        r.evidence,
        r.candidates_total,
        r.distinct_gemms,
        r.evaluated,
        fmt::count(r.evaluations_per_s, ""),
        r.ranking_rule
    );
    let energy = r.total_energy_pj.is_some();
    let mut head = vec![
        "GEMM",
        "M",
        "N",
        "K",
        "batch",
        "tile",
        "PE",
        "schedule",
        "dataflow",
        "DRAM",
        "overlapped",
        "bound",
    ];
    if energy {
        head.push("energy");
    }
    let mut t = Table::new(&head);
    for x in &r.rows {
        let mut row = vec![
            x.name.clone(),
            x.m.to_string(),
            x.n.to_string(),
            x.k.to_string(),
            x.batch.to_string(),
            x.tile.to_string(),
            format!("{}x{}", x.pe_rows, x.pe_cols),
            x.schedule.clone(),
            x.dataflow.name().into(),
            fmt::bytes(x.dram_bytes as f64),
            fmt::time(x.overlapped_time_s),
            x.bound.label().into(),
        ];
        if energy {
            row.push(
                x.energy_pj
                    .map(fmt::energy_pj)
                    .unwrap_or_else(|| "-".into()),
            );
        }
        t.row(row);
    }
    o.push_str(&t.render());
    if let Some(e) = r.total_energy_pj {
        let _ = writeln!(o, "  total energy: {}", fmt::energy_pj(e));
    }
    let _ = writeln!(
        o,
        "  total: overlapped {}, serialized {}, DRAM {}, {} compute cycles\n",
        fmt::time(r.total_overlapped_time_s),
        fmt::time(r.total_serialized_time_s),
        fmt::bytes(r.total_dram_bytes as f64),
        fmt::grouped(r.total_compute_cycles)
    );
    // GEMMs of one shape (q/k/v/o projections) share their explanation: print it once,
    // naming every GEMM it explains, in the order of first appearance.
    o.push_str("Why each wins:\n");
    let mut groups: Vec<(Vec<&str>, &str)> = vec![];
    for x in &r.rows {
        match groups.iter_mut().find(|(_, why)| *why == x.why) {
            Some((names, _)) => names.push(&x.name),
            None => groups.push((vec![&x.name], &x.why)),
        }
    }
    for (names, why) in groups {
        let _ = writeln!(o, "  {}: {}", names.join(", "), why);
    }
    o.push('\n');
    o.push_str(&limitations(&r.limitations));
    o
}

#[cfg(test)]
mod table_tests {
    use super::*;

    #[test]
    fn long_cells_are_cut_not_a_panic() {
        // 70 000 characters: over the 65 535 width limit of `format!` padding.
        let mut t = Table::new(&["name", "n"]);
        t.row(vec!["x".repeat(70_000), "1".into()]);
        t.row(vec!["short".into(), "2".into()]);
        let r = t.render();
        // Kept: 200 − 24 = 176 chars, then "… [+69824 chars]" (70 000 − 176 = 69 824).
        assert!(r.contains("… [+69824 chars]"), "{r}");
        assert!(r.lines().all(|l| l.chars().count() < 300), "{r}");
        // Columns still line up: "short" is padded to the cut cell's width.
        let w = 176 + "… [+69824 chars]".chars().count();
        assert!(r.contains(&format!("short{}  2", " ".repeat(w - 5))), "{r}");
    }
}
