//! Inline SVG plots drawn with plotters' SVG backend (the library `measure`'s validation
//! plots use too): empirical CDFs of latency samples, a log-log roofline with measured
//! points, and a metric's trend over runs with change points. Plotters escapes every text it
//! writes (titles, tick labels, legend entries). The plots are context for a reader; no
//! decision depends on them. Latency axes are logarithmic with 1-2-5 ticks in scaled units,
//! and an ECDF is drawn through at most a few hundred quantiles however many samples there
//! are. Left out: interactivity and colour-blind palettes beyond two high-contrast series.

use plotters::coord::Shift;
use plotters::prelude::*;
use tensorforge_core::units;

/// Width and height of every plot, pixels.
const SIZE: (u32, u32) = (560, 300);
const FONT: &str = "sans-serif";

type Plot<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// One plotted series: label, colour (CSS `#rrggbb` or `#rgb`, a trusted constant) and
/// values.
pub struct Series<'a> {
    /// Legend label (escaped by the SVG backend).
    pub label: &'a str,
    /// CSS colour, `#rrggbb` or `#rgb`; anything else draws black.
    pub color: &'a str,
    /// Values.
    pub values: &'a [f64],
}

/// A `#rrggbb` / `#rgb` CSS colour as a plotters colour (black when it is neither).
fn css_color(s: &str) -> RGBColor {
    let hex = s.strip_prefix('#').unwrap_or("");
    let digit = |i: usize, w: usize| u8::from_str_radix(hex.get(i..i + w)?, 16).ok();
    let parsed = match hex.len() {
        6 => (|| Some(RGBColor(digit(0, 2)?, digit(2, 2)?, digit(4, 2)?)))(),
        3 => (|| {
            Some(RGBColor(
                digit(0, 1)? * 17,
                digit(1, 1)? * 17,
                digit(2, 1)? * 17,
            ))
        })(),
        _ => None,
    };
    parsed.unwrap_or(BLACK)
}

/// Draw on a fresh SVG canvas; when plotters reports an error the plot is replaced by its
/// title and the error (still an SVG document, drawn by plotters).
fn render(title: &str, draw: impl FnOnce(&Plot<'_>) -> DrawResult) -> String {
    let mut svg = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
    };
    match result {
        Ok(()) => svg,
        Err(e) => {
            let mut svg = String::new();
            let fallback = {
                let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
                root.fill(&WHITE)
                    .and_then(|()| {
                        root.draw(&Text::new(
                            format!("{title}: plot unavailable ({e})"),
                            (10, 20),
                            (FONT, 13),
                        ))
                    })
                    .and_then(|()| root.present())
            };
            if fallback.is_ok() {
                svg
            } else {
                String::new()
            }
        }
    }
}

/// A legend marker: a small filled square in the series colour.
fn swatch(color: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 4), (x + 10, y + 4)], color.filled())
}

/// Most points drawn per ECDF series: the curve is drawn through this many evenly spaced
/// quantiles (plus the extremes), so a run of 100 000 samples costs a few KiB of SVG.
pub const ECDF_MAX_POINTS: usize = 400;

/// Tick values for a log axis over `[lo, hi]`: 1, 2 and 5 times each power of ten inside it
/// (only the powers of ten when that gives more than eight ticks).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && lo.is_finite() && hi.is_finite()) {
        return Vec::new();
    }
    let (e0, e1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mut all = Vec::new();
    let mut decades = Vec::new();
    for e in e0..=e1 {
        let p = 10f64.powi(e);
        for m in [1.0, 2.0, 5.0] {
            let v = m * p;
            if v >= lo && v <= hi {
                all.push(v);
                if m == 1.0 {
                    decades.push(v);
                }
            }
        }
    }
    if all.len() > 8 {
        return decades;
    }
    if all.len() < 3 {
        // A narrow range: every integer multiple of the powers of ten inside it.
        let mut fine = Vec::new();
        for e in e0..=e1 {
            let p = 10f64.powi(e);
            for m in 1..10 {
                let v = f64::from(m) * p;
                if v >= lo && v <= hi {
                    fine.push(v);
                }
            }
        }
        return fine;
    }
    all
}

/// A number with at most three significant digits and no trailing zeros (`0.5`, `20`,
/// `1.5k`), for tick labels.
pub fn compact(v: f64) -> String {
    let (x, suffix) = if v.abs() >= 1e9 {
        (v / 1e9, "G")
    } else if v.abs() >= 1e6 {
        (v / 1e6, "M")
    } else if v.abs() >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let t = format!("{x:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}{suffix}")
}

/// A nanosecond tick label with a scaled unit and no trailing zeros (`500 µs`, `2 ms`).
pub fn tick_ns(v: f64) -> String {
    let (x, unit) = if v >= 1e9 {
        (v / 1e9, "s")
    } else if v >= 1e6 {
        (v / 1e6, "ms")
    } else if v >= 1e3 {
        (v / 1e3, "µs")
    } else {
        (v, "ns")
    };
    format!("{} {unit}", compact(x))
}

/// The ECDF of positive finite `values` as step points `(x, F)`, through at most
/// [`ECDF_MAX_POINTS`] evenly spaced ranks (every sample when there are few).
fn ecdf_steps(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let k = n.min(ECDF_MAX_POINTS);
    let mut pts = Vec::with_capacity(2 * k + 1);
    pts.push((v[0], 0.0));
    for j in 0..k {
        let i = if k == n {
            j
        } else {
            j * (n - 1) / (k - 1).max(1)
        };
        pts.push((v[i], i as f64 / n as f64));
        pts.push((v[i], (i + 1) as f64 / n as f64));
    }
    pts
}

/// Empirical CDFs of several sample sets on a shared logarithmic latency axis (ns) with
/// 1-2-5 ticks in scaled units; each curve is drawn through at most [`ECDF_MAX_POINTS`]
/// quantiles; the legend sits in the lower right, below every curve.
pub fn ecdf_plot(title: &str, series: &[Series<'_>]) -> String {
    let (mut lo, mut hi) = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    if !lo.is_finite() {
        lo = 1.0;
        hi = 10.0;
    }
    if hi <= lo * 1.0001 {
        lo *= 0.9;
        hi *= 1.1;
    }
    let curves: Vec<_> = series
        .iter()
        .map(|s| (css_color(s.color), s.label, ecdf_steps(s.values)))
        .collect();
    render(title, |root| {
        let x = (lo..hi).log_scale().with_key_points(log_ticks(lo, hi));
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 15))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(36)
            .build_cartesian_2d(x, 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc("latency per iteration (log scale)")
            .y_desc("ECDF")
            .x_label_formatter(&|v| tick_ns(*v))
            .y_labels(3)
            .y_label_formatter(&|v| compact(*v))
            .label_style((FONT, 11))
            .light_line_style(WHITE)
            .draw()?;
        for (color, label, pts) in &curves {
            if pts.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(*label)
                .legend(swatch(*color));
        }
        // Lower right: an ECDF is near 1 at the right edge, so this corner stays empty.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 11))
            .border_style(BLACK.mix(0.4))
            .background_style(WHITE.mix(0.85))
            .draw()
    })
}

/// A measured point on the roofline: label, colour, arithmetic intensity (FLOP/byte) and
/// achieved FLOP/s.
pub struct RoofPoint<'a> {
    /// Label (escaped by the SVG backend).
    pub label: &'a str,
    /// CSS colour, `#rrggbb` or `#rgb`.
    pub color: &'a str,
    /// FLOP per byte.
    pub intensity: f64,
    /// FLOP/s achieved.
    pub flops_per_s: f64,
}

/// Colours of the bandwidth roofs, DRAM first (dark to light grey-blue).
const ROOF_COLORS: [RGBColor; 4] = [
    RGBColor(0x33, 0x33, 0x33),
    RGBColor(0x55, 0x66, 0x88),
    RGBColor(0x77, 0x88, 0xaa),
    RGBColor(0x99, 0xaa, 0xbb),
];

/// Log-log roofline `min(peak, AI · bandwidth)` for each bandwidth level, with points.
pub fn roofline_plot(
    title: &str,
    peak: f64,
    levels: &[(String, f64)],
    points: &[RoofPoint<'_>],
) -> String {
    let ais: Vec<f64> = points
        .iter()
        .map(|p| p.intensity)
        .filter(|v| *v > 0.0 && v.is_finite())
        .collect();
    let ridge = levels.first().map(|l| peak / l.1).unwrap_or(1.0);
    let x_lo = ais.iter().fold(ridge, |a, v| a.min(*v)) / 10.0;
    let x_hi = ais.iter().fold(ridge, |a, v| a.max(*v)) * 10.0;
    let y_hi = peak * 2.0;
    let y_lo = points
        .iter()
        .map(|p| p.flops_per_s)
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold(
            levels.first().map(|l| x_lo * l.1).unwrap_or(peak / 1e3),
            f64::min,
        )
        / 2.0;
    // A roof is three points: the bandwidth slope, the ridge (when inside the axis) and
    // the flat peak.
    let roofs: Vec<(&str, Vec<(f64, f64)>)> = levels
        .iter()
        .map(|(name, bw)| {
            let mut xs = vec![x_lo];
            let ridge = peak / bw;
            if ridge > x_lo && ridge < x_hi {
                xs.push(ridge);
            }
            xs.push(x_hi);
            let pts = xs
                .into_iter()
                .map(|ai| (ai, peak.min(ai * bw).max(y_lo)))
                .collect();
            (name.as_str(), pts)
        })
        .collect();
    render(title, |root| {
        let x = (x_lo..x_hi)
            .log_scale()
            .with_key_points(log_ticks(x_lo, x_hi));
        let y = (y_lo..y_hi)
            .log_scale()
            .with_key_points(log_ticks(y_lo, y_hi));
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 15))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(100)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity, FLOP/byte (log) vs FLOP/s (log)")
            .x_label_formatter(&|v| compact(*v))
            .y_label_formatter(&|v| units::rate(*v, "FLOP"))
            .label_style((FONT, 11))
            .light_line_style(WHITE)
            .draw()?;
        for (k, (name, pts)) in roofs.iter().enumerate() {
            let color = ROOF_COLORS[k.min(ROOF_COLORS.len() - 1)];
            chart
                .draw_series(DashedLineSeries::new(
                    pts.iter().copied(),
                    6,
                    3,
                    color.stroke_width(2),
                ))?
                .label(format!("{name} roof"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], color));
        }
        for p in points {
            if p.intensity > 0.0 && p.flops_per_s > 0.0 {
                let color = css_color(p.color);
                chart
                    .draw_series(std::iter::once(Circle::new(
                        (p.intensity, p.flops_per_s),
                        4,
                        color.filled(),
                    )))?
                    .label(p.label)
                    .legend(move |(x, y)| Circle::new((x + 5, y), 4, color.filled()));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 11))
            .border_style(BLACK.mix(0.4))
            .background_style(WHITE.mix(0.85))
            .draw()
    })
}

/// Trend of values over runs (run number on x, oldest first), segment means as horizontal
/// lines and change points as vertical dashed red lines before the first point of each new
/// segment. The value axis is labelled in `unit`, scaled (`1.30 µs`, `64.00 KiB`).
pub fn trend_plot(
    title: &str,
    unit: &str,
    values: &[f64],
    segments: &[(usize, usize, f64)],
    change_points: &[usize],
) -> String {
    let n = values.len().max(1);
    let (mut lo, mut hi) = values
        .iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    if !lo.is_finite() {
        lo = 0.0;
        hi = 1.0;
    }
    if hi <= lo {
        hi = lo + lo.abs().max(1.0) * 0.1;
        lo -= lo.abs().max(1.0) * 0.1;
    }
    // A margin so that the extreme points do not sit on the frame.
    let pad = (hi - lo) * 0.08;
    let (lo, hi) = (lo - pad, hi + pad);
    let series: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, v)| (i as f64, *v))
        .collect();
    let blue = RGBColor(0x1f, 0x77, 0xb4);
    let green = RGBColor(0x2c, 0xa0, 0x2c);
    let red = RGBColor(0xd6, 0x27, 0x28);
    render(title, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 15))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, lo..hi)?;
        chart
            .configure_mesh()
            .x_desc("run (time order, 1 = oldest)")
            // At most about ten ticks; only whole run numbers are labelled.
            .x_labels(n.min(10))
            .x_label_formatter(&|v| {
                if (v - v.round()).abs() < 1e-9 && *v >= 0.0 {
                    format!("{}", v.round() as i64 + 1)
                } else {
                    String::new()
                }
            })
            .y_labels(5)
            .y_label_formatter(&|v| crate::report::fmt_value(Some(*v), unit))
            .label_style((FONT, 11))
            .light_line_style(WHITE)
            .draw()?;
        if !series.is_empty() {
            chart
                .draw_series(LineSeries::new(series.iter().copied(), blue))?
                .label("value per run")
                .legend(swatch(blue));
            chart.draw_series(series.iter().map(|&p| Circle::new(p, 3, blue.filled())))?;
        }
        for (k, &(a, b, m)) in segments.iter().enumerate() {
            let line = LineSeries::new(
                [(a as f64 - 0.4, m), (b as f64 - 0.6, m)],
                green.stroke_width(2),
            );
            let drawn = chart.draw_series(line)?;
            if k == 0 {
                drawn.label("segment mean").legend(swatch(green));
            }
        }
        for (k, &c) in change_points.iter().enumerate() {
            let x = c as f64 - 0.5;
            let drawn = chart.draw_series(DashedLineSeries::new(
                [(x, lo), (x, hi)],
                5,
                3,
                red.stroke_width(1),
            ))?;
            if k == 0 {
                drawn.label("change point").legend(swatch(red));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 11))
            .border_style(BLACK.mix(0.4))
            .background_style(WHITE.mix(0.85))
            .draw()
    })
}

#[cfg(test)]
mod ecdf_tests {
    use super::*;

    /// Whether plotters wrote `text` as the whole content of a `<text>` element.
    fn has_text(svg: &str, text: &str) -> bool {
        svg.contains(&format!(">\n{text}\n</text>"))
    }

    #[test]
    fn ecdf_is_small_and_log_ticked() {
        let many: Vec<f64> = (1..=100_000).map(|i| 1000.0 + i as f64 * 0.1).collect();
        let svg = ecdf_plot(
            "t",
            &[Series {
                label: "b",
                color: "#000",
                values: &many,
            }],
        );
        // At most ECDF_MAX_POINTS steps of two points each: well under 20 KiB.
        assert!(svg.len() < 20_000, "{}", svg.len());
        // 1000..11000 ns: ticks at 1, 2, 5 and 10 µs.
        assert_eq!(log_ticks(1000.0, 11_000.0), vec![1e3, 2e3, 5e3, 1e4]);
        assert!(has_text(&svg, "2 µs") && has_text(&svg, "10 µs"), "{svg}");
        // 3..7 ms holds only the 5 ms tick of 1-2-5: every integer multiple instead.
        assert_eq!(log_ticks(3e6, 7e6), vec![3e6, 4e6, 5e6, 6e6, 7e6]);
        assert_eq!(tick_ns(2.5e6), "2.5 ms");
        assert_eq!(compact(1.68), "1.68");
        assert_eq!(compact(2000.0), "2k");
    }

    #[test]
    fn css_colours_parse() {
        assert_eq!(css_color("#1f77b4"), RGBColor(0x1f, 0x77, 0xb4));
        assert_eq!(css_color("#f00"), RGBColor(255, 0, 0));
        assert_eq!(css_color("red"), BLACK);
        assert_eq!(css_color("#12345g"), BLACK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markup::check_well_formed;

    #[test]
    fn plots_are_well_formed_and_escape_labels() {
        let hostile = "<script>alert(\"x\") & 'y'</script>";
        let escaped = "&lt;script&gt;alert(&quot;x&quot;) &amp; &apos;y&apos;&lt;/script&gt;";
        let e = ecdf_plot(
            hostile,
            &[Series {
                label: hostile,
                color: "#000",
                values: &[1.0, 2.0],
            }],
        );
        check_well_formed(&e).unwrap();
        assert!(!e.contains("<script>") && e.contains("&lt;script&gt;"));
        // Title and legend label, both escaped (quotes and apostrophes too).
        assert_eq!(e.matches(escaped).count(), 2, "{e}");
        assert!(e.starts_with("<svg") && e.trim_end().ends_with("</svg>"));
        assert!(e.contains("latency per iteration (log scale)") && e.contains("ECDF"));
        let r = roofline_plot(
            "r",
            1e12,
            &[("dram".into(), 1e11)],
            &[RoofPoint {
                label: "a&b",
                color: "#f00",
                intensity: 5.0,
                flops_per_s: 1e11,
            }],
        );
        check_well_formed(&r).unwrap();
        assert!(r.contains("a&amp;b") && r.contains("dram roof"), "{r}");
        // The measured point in its colour; FLOP/s ticks in scaled units.
        assert!(
            r.contains("fill=\"#FF0000\"") && r.contains("GFLOP/s"),
            "{r}"
        );
        assert!(r.contains("arithmetic intensity, FLOP/byte (log) vs FLOP/s (log)"));
        let t = trend_plot(
            "t",
            "ns",
            &[1.0, 1.0, 5.0, 5.0],
            &[(0, 2, 1.0), (2, 4, 5.0)],
            &[2],
        );
        check_well_formed(&t).unwrap();
        assert!(
            t.contains("change point") && t.contains("segment mean"),
            "{t}"
        );
        assert!(t.contains(" ns\n</text>"), "scaled value labels: {t}");
        let empty = trend_plot("t", "ns", &[], &[], &[]);
        check_well_formed(&empty).unwrap();
        assert!(empty.contains("</svg>"));
        check_well_formed(&ecdf_plot("none", &[])).unwrap();
        check_well_formed(&roofline_plot("none", 1e12, &[], &[])).unwrap();
    }
}
