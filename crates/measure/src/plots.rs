//! SVG plots of a validation report: the roofline of the calibrated ceilings with each
//! holdout workload's measured rate at its arithmetic intensity, and predicted versus
//! measured time on log-log axes with the y = x line. Workloads without a FLOP count cannot
//! sit on a roofline and appear only in the second plot. A workload measured faster than
//! its roof (a ceiling violation) is drawn as a black cross labelled `CEILING VIOLATED` in
//! both plots, never as an ordinary point. Axes carry scaled units (GFLOP/s, FLOP/byte,
//! µs/ms) on a light grid at 1-2-5 or decade ticks, and point labels are placed so that no
//! two overlap (a label pushed away from its point gets a thin leader line). Plots are
//! returned as SVG strings; writing them is the caller's business.

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

/// Ticks of a log axis over `[lo, hi]`: 1, 2 and 5 times each power of ten when the axis
/// spans at most three and a half decades, the powers of ten alone when it spans more, and
/// every second (third...) power of ten beyond eight decades.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && lo.is_finite() && hi.is_finite()) {
        return Vec::new();
    }
    let mantissas: &[f64] = if (hi / lo).log10() <= 3.5 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    // At most about eight decade ticks: over more decades, every second (third...) one.
    let step = ((last - first) as f64 / 8.0).ceil().max(1.0) as i32;
    let mut ticks = Vec::new();
    for e in (first..=last).filter(|e| e.rem_euclid(step) == 0) {
        for m in mantissas {
            // Parse the decimal text: `m * 10^e` computed in binary can land a hair off
            // (2 × 10^-1 is 0.20000000000000004), which a label would then show.
            let t: f64 = format!("{m}e{e}").parse().unwrap_or(0.0);
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
    }
    ticks
}

/// A tick value as short decimal text: `0.05`, `2`, `500`, `20,000`, and `5e-5` below a
/// thousandth; never a long run of digits.
fn number_tick(v: f64) -> String {
    if v >= 1e4 {
        return tensorforge_core::units::grouped(v.round() as u64);
    }
    if v < 1e-3 {
        return format!("{v:e}");
    }
    let text = format!("{v:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// A time tick in a scaled unit without trailing zeros: `100 µs`, `2 ms`, `1 s`, and
/// `1e5 s` from ten thousand seconds on.
fn time_tick(s: f64) -> String {
    if s >= 1e4 {
        return format!("{s:e} s");
    }
    let text = tensorforge_core::units::time(s);
    match text.split_once(' ') {
        Some((num, unit)) if num.contains('.') => {
            format!("{} {unit}", num.trim_end_matches('0').trim_end_matches('.'))
        }
        _ => text,
    }
}

/// A rectangle in backend pixels: left, top, right, bottom.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bbox {
    l: i32,
    t: i32,
    r: i32,
    b: i32,
}

impl Bbox {
    fn overlaps(&self, o: &Bbox) -> bool {
        self.l < o.r && o.l < self.r && self.t < o.b && o.t < self.b
    }
    fn inside(&self, o: &Bbox) -> bool {
        self.l >= o.l && self.r <= o.r && self.t >= o.t && self.b <= o.b
    }
}

/// Font size of point labels, in pixels.
const LABEL_PX: i32 = 12;
/// Half the side of the box a point marker is taken to cover.
const MARKER_HALF: i32 = 7;

/// The box a label takes when drawn with its top-left corner at `(x, y)`: an upper estimate
/// of sans-serif text (0.6 em per character), since the SVG is measured by whatever font
/// the viewer has.
fn label_box(text: &str, x: i32, y: i32) -> Bbox {
    let w = (text.chars().count() as f64 * LABEL_PX as f64 * 0.6).ceil() as i32 + 2;
    Bbox {
        l: x,
        t: y,
        r: x + w,
        b: y + LABEL_PX + 3,
    }
}

/// Which side of its box a label's text is anchored to: the side nearest its point, so that
/// the text sits against the point (or its leader line) whatever the viewer's font width.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Anchor {
    Left,
    Right,
    Center,
}

/// A label's place: its box, the side its text is anchored to, and whether it sits away
/// from its point (then a leader line joins them).
#[derive(Clone, Copy, Debug)]
struct Placed {
    bbox: Bbox,
    anchor: Anchor,
    away: bool,
}

/// Places one label per point (pixel positions) inside `area` so that no label covers
/// another label, a point marker or a `blocked` box. Each label tries, in order, the right
/// of its point, its left, above and below; then, further and further up and down, the right
/// and the left (these get a leader line). A label that fits nowhere is put at the right of
/// its point anyway.
fn place_labels(
    points: &[(i32, i32)],
    labels: &[String],
    area: Bbox,
    blocked: &[Bbox],
) -> Vec<Placed> {
    let mut taken: Vec<Bbox> = blocked.to_vec();
    taken.extend(points.iter().map(|&(x, y)| Bbox {
        l: x - MARKER_HALF,
        t: y - MARKER_HALF,
        r: x + MARKER_HALF,
        b: y + MARKER_HALF,
    }));
    // Top to bottom, then left to right: neighbours are placed one after the other.
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&i| (points[i].1, points[i].0));
    let mut placed = vec![
        Placed {
            bbox: label_box("", 0, 0),
            anchor: Anchor::Left,
            away: false,
        };
        points.len()
    ];
    for i in order {
        let (x, y) = points[i];
        let text = &labels[i];
        let w = label_box(text, 0, 0).r;
        let h = LABEL_PX + 3;
        let gap = MARKER_HALF + 2;
        let mut candidates = vec![
            ((x + gap, y - h / 2), Anchor::Left, false),
            ((x - gap - w, y - h / 2), Anchor::Right, false),
            ((x - w / 2, y - gap - h), Anchor::Center, false),
            ((x - w / 2, y + gap), Anchor::Center, false),
        ];
        for k in 1..=15 {
            for sign in [-1, 1] {
                let dy = y - h / 2 + sign * k * (h + 2);
                candidates.push(((x + gap + 8, dy), Anchor::Left, true));
                candidates.push(((x - gap - 8 - w, dy), Anchor::Right, true));
            }
        }
        let fits = |b: &Bbox| b.inside(&area) && !taken.iter().any(|o| o.overlaps(b));
        let chosen = candidates
            .iter()
            .map(|&((lx, ly), anchor, away)| Placed {
                bbox: label_box(text, lx, ly),
                anchor,
                away,
            })
            .find(|p| fits(&p.bbox))
            .unwrap_or(Placed {
                bbox: label_box(text, x + gap, y - h / 2),
                anchor: Anchor::Left,
                away: false,
            });
        taken.push(chosen.bbox);
        placed[i] = chosen;
    }
    placed
}

/// Where the legend goes: the first corner of the plot area (upper left, lower right, upper
/// right, lower left) whose legend box covers none of `points`, else the upper left. The box
/// is as plotters lays it out (5 px in from the corner, 10 px margins, a 30 px marker
/// column, about 16 px a line at 12 px), widened a little; labels avoid it.
fn legend_place(
    area: Bbox,
    lines: &[String],
    points: &[(i32, i32)],
) -> (SeriesLabelPosition, Bbox) {
    let widest = lines
        .iter()
        .map(|l| label_box(l, 0, 0).r)
        .max()
        .unwrap_or(0);
    let (w, h) = (
        5 + widest + 30 + 20 + 6,
        5 + lines.len() as i32 * 16 + 20 + 6,
    );
    let corner = |left: bool, top: bool| {
        let l = if left { area.l } else { area.r - w };
        let t = if top { area.t } else { area.b - h };
        Bbox {
            l,
            t,
            r: l + w,
            b: t + h,
        }
    };
    let corners = [
        (SeriesLabelPosition::UpperLeft, corner(true, true)),
        (SeriesLabelPosition::LowerRight, corner(false, false)),
        (SeriesLabelPosition::UpperRight, corner(false, true)),
        (SeriesLabelPosition::LowerLeft, corner(true, false)),
    ];
    let clear = |b: &Bbox| {
        !points.iter().any(|&(x, y)| {
            b.overlaps(&Bbox {
                l: x - MARKER_HALF,
                t: y - MARKER_HALF,
                r: x + MARKER_HALF,
                b: y + MARKER_HALF,
            })
        })
    };
    corners
        .into_iter()
        .find(|(_, b)| clear(b))
        .unwrap_or((SeriesLabelPosition::UpperLeft, corner(true, true)))
}

/// Draws the placed labels on `root`, with a grey leader line from the point to each label
/// that sits away from it.
fn draw_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    points: &[(i32, i32)],
    labels: &[String],
    placed: &[Placed],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    for ((&(x, y), text), p) in points.iter().zip(labels).zip(placed) {
        let b = p.bbox;
        if p.away {
            let ex = match p.anchor {
                Anchor::Right => b.r + 2,
                _ => b.l - 2,
            };
            root.draw(&PathElement::new(
                vec![(x, y), (ex, (b.t + b.b) / 2)],
                RGBColor(110, 110, 110).stroke_width(1),
            ))
            .map_err(perr)?;
        }
        let (hpos, tx) = match p.anchor {
            Anchor::Left => (HPos::Left, b.l),
            Anchor::Right => (HPos::Right, b.r),
            Anchor::Center => (HPos::Center, (b.l + b.r) / 2),
        };
        let style = ("sans-serif", LABEL_PX)
            .into_font()
            .into_text_style(root)
            .pos(Pos::new(hpos, VPos::Top));
        root.draw(&Text::new(text.clone(), (tx, b.t + 1), style))
            .map_err(perr)?;
    }
    Ok(())
}

/// Grid lines: light grey at the ticks only.
const GRID: RGBColor = RGBColor(225, 225, 225);

/// The roofline (fp32 peak and DRAM bandwidth of the profile) with measured points, in
/// GFLOP/s against FLOP/byte.
pub fn roofline_svg(report: &ValidationReport) -> Result<String> {
    // Rates are plotted in GFLOP/s: the axis reads 50, 100, 200 instead of 1e11.
    let peak = report.peak_flops_per_s / 1e9;
    let bw = report.dram_bandwidth_bytes_per_s / 1e9;
    let ridge = peak / bw;
    let pts: Vec<(f64, f64, &str, bool)> = report
        .rows
        .iter()
        .filter_map(|r| {
            Some((
                r.arithmetic_intensity?,
                r.measured_flops_per_s? / 1e9,
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
    let roof_label = format!(
        "calibrated roof: {}, {}",
        tensorforge_core::units::rate(report.peak_flops_per_s, "FLOP"),
        tensorforge_core::units::bandwidth(report.dram_bandwidth_bytes_per_s)
    );
    let mut legend = vec![roof_label.clone(), "measured (p50)".to_string()];
    let violation_label = "CEILING VIOLATED: above the calibrated roof";
    if pts.iter().any(|p| p.3) {
        legend.push(violation_label.to_string());
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let threads = match report.threads {
            1 => "1 thread".to_string(),
            n => format!("{n} threads"),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Roofline of {} ({threads})", report.profile),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (x0..x1).log_scale().with_key_points(log_ticks(x0, x1)),
                (y0..y1).log_scale().with_key_points(log_ticks(y0, y1)),
            )
            .map_err(perr)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .x_label_formatter(&|v| number_tick(*v))
            .y_label_formatter(&|v| number_tick(*v))
            .x_desc("arithmetic intensity (FLOP / compulsory byte)")
            .y_desc("GFLOP/s")
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
            .label(roof_label)
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
                .label(violation_label)
                .legend(|(x, y)| Cross::new((x + 10, y), 6, BLACK.stroke_width(3)));
        }
        let (xr, yr) = chart.plotting_area().get_pixel_range();
        let area = Bbox {
            l: xr.start,
            t: yr.start,
            r: xr.end,
            b: yr.end,
        };
        let pixels: Vec<(i32, i32)> = pts
            .iter()
            .map(|&(x, y, ..)| chart.backend_coord(&(x, y)))
            .collect();
        let labels: Vec<String> = pts
            .iter()
            .map(|&(_, _, name, violated)| {
                if violated {
                    format!("{name} (CEILING VIOLATED)")
                } else {
                    name.to_string()
                }
            })
            .collect();
        let (corner, legend_box) = legend_place(area, &legend, &pixels);
        let placed = place_labels(&pixels, &labels, area, &[legend_box]);
        draw_labels(&root, &pixels, &labels, &placed)?;
        chart
            .configure_series_labels()
            .position(corner)
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
    let violation_label = "CEILING VIOLATED: measured below the roofline bound";
    let mut legend = vec!["y = x".to_string(), "roofline".to_string()];
    if report.rows.iter().any(|r| r.ceiling_violated) {
        legend.push(violation_label.to_string());
    }
    if !floor.is_empty() {
        legend.push("roofline + floor".to_string());
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (700, 700)).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Predicted vs measured (p50)", ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
                (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            )
            .map_err(perr)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .x_label_formatter(&|v| time_tick(*v))
            .y_label_formatter(&|v| time_tick(*v))
            .x_desc("predicted time")
            .y_desc("measured p50")
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
                .label(violation_label)
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
        let (xr, yr) = chart.plotting_area().get_pixel_range();
        let area = Bbox {
            l: xr.start,
            t: yr.start,
            r: xr.end,
            b: yr.end,
        };
        let pixels: Vec<(i32, i32)> = pure.iter().map(|p| chart.backend_coord(p)).collect();
        let labels: Vec<String> = report
            .rows
            .iter()
            .map(|r| {
                if r.ceiling_violated {
                    format!("{} (CEILING VIOLATED)", r.workload)
                } else {
                    r.workload.clone()
                }
            })
            .collect();
        // The floor variant's triangles are markers too: neither the legend nor a label may
        // cover them.
        let floor_pixels: Vec<(i32, i32)> = floor.iter().map(|p| chart.backend_coord(p)).collect();
        let every_marker: Vec<(i32, i32)> = pixels.iter().chain(&floor_pixels).copied().collect();
        let (corner, legend_box) = legend_place(area, &legend, &every_marker);
        let mut blocked = vec![legend_box];
        blocked.extend(floor_pixels.iter().map(|&(x, y)| Bbox {
            l: x - MARKER_HALF,
            t: y - MARKER_HALF,
            r: x + MARKER_HALF,
            b: y + MARKER_HALF,
        }));
        let placed = place_labels(&pixels, &labels, area, &blocked);
        draw_labels(&root, &pixels, &labels, &placed)?;
        chart
            .configure_series_labels()
            .position(corner)
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

    /// The text of every `<text>` element of an SVG.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    #[test]
    fn tick_labels_are_scaled_short_numbers() {
        let r = report(); // peak 100 GFLOP/s, 10 GB/s; times 100 µs to 3 ms
        for svg in [
            roofline_svg(&r).unwrap(),
            predicted_vs_measured_svg(&r).unwrap(),
        ] {
            for t in texts(&svg) {
                // No raw FLOP/s (`100000000000.0`) nor long decimals (`0.0001000`).
                let longest_digits = t
                    .split(|c: char| !c.is_ascii_digit())
                    .map(str::len)
                    .max()
                    .unwrap_or(0);
                assert!(longest_digits <= 5, "tick `{t}` in:\n{svg}");
            }
        }
        let roof = texts(&roofline_svg(&r).unwrap());
        // GFLOP/s on y: the 100 GFLOP/s peak is a tick `100`; FLOP/byte on x: the ridge 10.
        assert!(roof.iter().any(|t| t == "GFLOP/s"), "{roof:?}");
        assert!(
            roof.iter().any(|t| t == "100") && roof.iter().any(|t| t == "10"),
            "{roof:?}"
        );
        let time = texts(&predicted_vs_measured_svg(&r).unwrap());
        assert!(
            time.iter().any(|t| t == "1 ms") && time.iter().any(|t| t == "200 µs"),
            "{time:?}"
        );
    }

    #[test]
    fn log_ticks_are_one_two_five_or_decades() {
        assert_eq!(
            log_ticks(0.3, 300.0),
            [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
        );
        // Over three and a half decades: powers of ten only.
        assert_eq!(log_ticks(3e-6, 0.2), [1e-5, 1e-4, 1e-3, 1e-2, 0.1]);
        assert!(log_ticks(0.0, 1.0).is_empty());
        assert_eq!(number_tick(0.2), "0.2");
        assert_eq!(number_tick(20_000.0), "20,000");
        assert_eq!(number_tick(5e-5), "5e-5");
        assert_eq!(time_tick(2e-4), "200 µs");
        assert_eq!(time_tick(1.0), "1 s");
        assert_eq!(time_tick(1.5e-3), "1.5 ms");
        assert_eq!(time_tick(1e9), "1e9 s");
        // Thirteen decades: every second power of ten, at most eight ticks.
        assert_eq!(log_ticks(5e-5, 5e8), [1e-4, 1e-2, 1.0, 1e2, 1e4, 1e6, 1e8]);
    }

    #[test]
    fn crowded_labels_do_not_overlap_each_other_or_the_points() {
        // Twelve points within a few pixels of one another, and one at the area's edge.
        let area = Bbox {
            l: 0,
            t: 0,
            r: 600,
            b: 400,
        };
        let mut points: Vec<(i32, i32)> = (0..12).map(|i| (300 + i % 3, 200 + i)).collect();
        points.push((598, 2));
        let labels: Vec<String> = (0..points.len())
            .map(|i| format!("workload_{i}_{}", "x".repeat(i)))
            .collect();
        let legend = Bbox {
            l: 0,
            t: 0,
            r: 200,
            b: 60,
        };
        let placed = place_labels(&points, &labels, area, &[legend]);
        for (i, a) in placed.iter().enumerate() {
            assert!(a.bbox.inside(&area), "{i}: {a:?}");
            assert!(!a.bbox.overlaps(&legend), "{i}: {a:?}");
            for (j, b) in placed.iter().enumerate().skip(i + 1) {
                assert!(!a.bbox.overlaps(&b.bbox), "{i} {a:?} overlaps {j} {b:?}");
            }
            for &(x, y) in &points {
                let marker = Bbox {
                    l: x - 5,
                    t: y - 5,
                    r: x + 5,
                    b: y + 5,
                };
                assert!(!a.bbox.overlaps(&marker), "{i}: {a:?} covers ({x}, {y})");
            }
        }
        // The crowd is resolved by moving labels away from their points, with leaders.
        assert!(placed.iter().filter(|p| p.away).count() >= 6);
    }

    #[test]
    fn the_legend_takes_a_corner_without_points() {
        let area = Bbox {
            l: 0,
            t: 0,
            r: 600,
            b: 400,
        };
        let lines = vec!["calibrated roof: 1.00 FLOP/s, 1.00 B/s".to_string()];
        let (pos, b) = legend_place(area, &lines, &[(300, 200)]);
        assert!(matches!(pos, SeriesLabelPosition::UpperLeft), "{b:?}");
        assert_eq!((b.l, b.t), (0, 0));
        // Points in the upper left and the lower right corners: the upper right is free.
        let (pos, b) = legend_place(area, &lines, &[(20, 20), (590, 390)]);
        assert!(matches!(pos, SeriesLabelPosition::UpperRight), "{b:?}");
        assert_eq!((b.r, b.t), (600, 0));
    }
}
