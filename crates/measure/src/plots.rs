//! SVG plots of a validation report: the roofline of the calibrated ceilings with each
//! holdout workload's measured rate at its arithmetic intensity, and predicted versus
//! measured time on log-log axes with the y = x line. Workloads without a FLOP count cannot
//! sit on a roofline and appear only in the second plot. A workload measured faster than
//! its roof (a ceiling violation) is drawn as a black cross labelled `CEILING VIOLATED` in
//! both plots, never as an ordinary point. Plots are returned as SVG strings; writing them
//! is the caller's business.

use crate::error::{MeasureError, Result};
use crate::validate::ValidationReport;
use plotters::prelude::*;

fn perr(e: impl std::fmt::Display) -> MeasureError {
    MeasureError::Other(format!("plot: {e}"))
}

fn span(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() || hi <= 0.0 {
        return (1e-3, 1.0);
    }
    (lo / pad, hi * pad)
}

/// The roofline (fp32 peak and DRAM bandwidth of the profile) with measured points.
pub fn roofline_svg(report: &ValidationReport) -> Result<String> {
    let peak = report.peak_flops_per_s;
    let bw = report.dram_bandwidth_bytes_per_s;
    let ridge = peak / bw;
    let pts: Vec<(f64, f64, &str, bool)> = report
        .rows
        .iter()
        .filter_map(|r| {
            Some((
                r.arithmetic_intensity?,
                r.measured_flops_per_s?,
                r.workload.as_str(),
                r.ceiling_violated,
            ))
        })
        .collect();
    let (x0, x1) = span(
        pts.iter().map(|p| p.0).chain([ridge / 8.0, ridge * 8.0]),
        2.0,
    );
    let (y0, y1) = span(pts.iter().map(|p| p.1).chain([peak, bw * x0]), 2.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Roofline of {} ({} threads)",
                    report.profile, report.threads
                ),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP / compulsory byte)")
            .y_desc("FLOP/s")
            .draw()
            .map_err(perr)?;
        let steps = 200;
        let roof: Vec<(f64, f64)> = (0..=steps)
            .map(|i| {
                let x = x0 * (x1 / x0).powf(i as f64 / steps as f64);
                (x, peak.min(bw * x))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(roof, BLUE.stroke_width(2)))
            .map_err(perr)?
            .label(format!(
                "calibrated roof: {:.1} GFLOP/s, {:.1} GB/s",
                peak / 1e9,
                bw / 1e9
            ))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart
            .draw_series(
                pts.iter()
                    .filter(|p| !p.3)
                    .map(|&(x, y, ..)| Circle::new((x, y), 5, RED.filled())),
            )
            .map_err(perr)?
            .label("measured (p50)")
            .legend(|(x, y)| Circle::new((x + 10, y), 5, RED.filled()));
        if pts.iter().any(|p| p.3) {
            chart
                .draw_series(
                    pts.iter()
                        .filter(|p| p.3)
                        .map(|&(x, y, ..)| Cross::new((x, y), 7, BLACK.stroke_width(3))),
                )
                .map_err(perr)?
                .label("CEILING VIOLATED: above the calibrated roof")
                .legend(|(x, y)| Cross::new((x + 10, y), 6, BLACK.stroke_width(3)));
        }
        for &(x, y, name, violated) in &pts {
            let label = if violated {
                format!("{name} (CEILING VIOLATED)")
            } else {
                name.to_string()
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (x, y),
                    ("sans-serif", 12),
                )))
                .map_err(perr)?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(perr)?;
        root.present().map_err(perr)?;
    }
    Ok(svg)
}

/// Predicted versus measured p50 (s), log-log, for both model variants, with y = x.
pub fn predicted_vs_measured_svg(report: &ValidationReport) -> Result<String> {
    let pure: Vec<(f64, f64)> = report
        .rows
        .iter()
        .map(|r| (r.predicted_s, r.measured_p50_s))
        .collect();
    let floor: Vec<(f64, f64)> = report
        .rows
        .iter()
        .filter_map(|r| Some((r.predicted_with_floor_s?, r.measured_p50_s)))
        .collect();
    let (lo, hi) = span(pure.iter().chain(&floor).flat_map(|&(a, b)| [a, b]), 2.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (700, 700)).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Predicted vs measured (p50)", ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("predicted time (s)")
            .y_desc("measured p50 (s)")
            .draw()
            .map_err(perr)?;
        chart
            .draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], BLACK.mix(0.5)))
            .map_err(perr)?
            .label("y = x")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        let violated = |i: usize| report.rows[i].ceiling_violated;
        chart
            .draw_series(
                pure.iter()
                    .enumerate()
                    .filter(|(i, _)| !violated(*i))
                    .map(|(_, &p)| Circle::new(p, 5, BLUE.filled())),
            )
            .map_err(perr)?
            .label("roofline")
            .legend(|(x, y)| Circle::new((x + 10, y), 5, BLUE.filled()));
        if report.rows.iter().any(|r| r.ceiling_violated) {
            chart
                .draw_series(
                    pure.iter()
                        .enumerate()
                        .filter(|(i, _)| violated(*i))
                        .map(|(_, &p)| Cross::new(p, 7, BLACK.stroke_width(3))),
                )
                .map_err(perr)?
                .label("CEILING VIOLATED: measured below the roofline bound")
                .legend(|(x, y)| Cross::new((x + 10, y), 6, BLACK.stroke_width(3)));
        }
        if !floor.is_empty() {
            chart
                .draw_series(
                    floor
                        .iter()
                        .map(|&p| TriangleMarker::new(p, 6, RED.filled())),
                )
                .map_err(perr)?
                .label("roofline + floor")
                .legend(|(x, y)| TriangleMarker::new((x + 10, y), 6, RED.filled()));
        }
        for (r, &(x, y)) in report.rows.iter().zip(&pure) {
            let label = if r.ceiling_violated {
                format!("{} (CEILING VIOLATED)", r.workload)
            } else {
                r.workload.clone()
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (x, y),
                    ("sans-serif", 11),
                )))
                .map_err(perr)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(perr)?;
        root.present().map_err(perr)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{ValidationRow, VariantSummary};

    fn report() -> ValidationReport {
        let row = |name: &str, flops: Option<f64>, p: f64, m: f64| ValidationRow {
            workload: name.into(),
            kind: "gemm".into(),
            fingerprint: String::new(),
            flops,
            bytes: 1e6,
            predicted_s: p,
            predicted_with_floor_s: Some(p + 1e-6),
            predicted_bound: "compute".into(),
            measured_p50_s: m,
            signed_error_pct: (p - m) / m * 100.0,
            ape_pct: ((p - m) / m * 100.0).abs(),
            ratio: m / p,
            signed_error_with_floor_pct: None,
            ape_with_floor_pct: None,
            measured_flops_per_s: flops.map(|f| f / m),
            arithmetic_intensity: flops.map(|f| f / 1e6),
            roof: "fp32 compute peak 100.0 GFLOP/s".into(),
            ceiling_violated: m < p,
        };
        ValidationReport {
            schema_version: 2,
            evidence: "model-vs-measurement".into(),
            profile: "p".into(),
            machine_id: "m".into(),
            threads: 2,
            peak_flops_per_s: 1e11,
            dram_bandwidth_bytes_per_s: 1e10,
            floor_s: Some(1e-6),
            run_id: "r".into(),
            rows: vec![
                row("g<&>", Some(1e8), 1e-3, 2e-3),
                row("k", None, 1e-4, 3e-4),
            ],
            variants: vec![VariantSummary {
                label: "roofline".into(),
                description: String::new(),
                median_ape_pct: 1.0,
                mean_ape_pct: 1.0,
                max_ape_pct: 1.0,
            }],
            ceiling_violations: vec![],
            limitations: vec![],
        }
    }

    #[test]
    fn plots_are_svg_with_labels() {
        let r = report();
        let a = roofline_svg(&r).unwrap();
        assert!(a.starts_with("<svg") && a.trim_end().ends_with("</svg>"));
        assert!(a.contains("measured (p50)"));
        let b = predicted_vs_measured_svg(&r).unwrap();
        assert!(b.contains("roofline + floor") && b.contains("</svg>"));
        // An empty report still renders.
        let mut e = r.clone();
        e.rows.clear();
        assert!(predicted_vs_measured_svg(&e).unwrap().contains("</svg>"));
        assert!(roofline_svg(&e).unwrap().contains("</svg>"));
        // No violation: no marker.
        assert!(!a.contains("CEILING VIOLATED") && !b.contains("CEILING VIOLATED"));
        // A point faster than its roof is marked in both plots.
        let mut v = r.clone();
        v.rows[0].measured_p50_s = 5e-4; // predicted 1e-3 s: beaten
        v.rows[0].measured_flops_per_s = Some(1e8 / 5e-4);
        v.rows[0].ceiling_violated = true;
        let a = roofline_svg(&v).unwrap();
        let b = predicted_vs_measured_svg(&v).unwrap();
        assert!(a.contains("CEILING VIOLATED") && a.contains("g&lt;&amp;&gt; (CEILING VIOLATED)"));
        assert!(b.contains("CEILING VIOLATED"));
    }
}
