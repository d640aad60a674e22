//! Hand-written inline SVG plots: empirical CDFs of latency samples, a log-log roofline with
//! measured points, and a metric's trend over runs with change points. Every text argument
//! is escaped here. The plots are context for a reader; no decision depends on them. Latency
//! axes are logarithmic with 1-2-5 ticks in scaled units, and an ECDF is drawn through at
//! most a few hundred quantiles however many samples there are. Left out: interactivity and
//! colour-blind palettes beyond two high-contrast series.

use crate::markup::escape;

const W: f64 = 520.0;
const H: f64 = 260.0;
const L: f64 = 70.0;
const R: f64 = 20.0;
const T: f64 = 28.0;
const B: f64 = 40.0;

/// One plotted series: label, colour (CSS, trusted constant) and values.
pub struct Series<'a> {
    /// Legend label (escaped here).
    pub label: &'a str,
    /// CSS colour.
    pub color: &'a str,
    /// Values.
    pub values: &'a [f64],
}

fn frame(title: &str, x_lo: &str, x_hi: &str, y_lo: &str, y_hi: &str, x_name: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\">\
<title>{t}</title><text x=\"{L}\" y=\"16\" font-size=\"13\">{t}</text>\
<rect x=\"{L}\" y=\"{T}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\
<text x=\"{L}\" y=\"{xl}\" font-size=\"11\">{xlo}</text><text x=\"{xr}\" y=\"{xl}\" font-size=\"11\" text-anchor=\"end\">{xhi}</text>\
<text x=\"{xm}\" y=\"{xn}\" font-size=\"11\" text-anchor=\"middle\">{xname}</text>\
<text x=\"{yl}\" y=\"{yb}\" font-size=\"11\" text-anchor=\"end\">{ylo}</text><text x=\"{yl}\" y=\"{yt}\" font-size=\"11\" text-anchor=\"end\">{yhi}</text>",
        t = escape(title),
        pw = W - L - R,
        ph = H - T - B,
        xl = H - B + 14.0,
        xr = W - R,
        xlo = escape(x_lo),
        xhi = escape(x_hi),
        xm = L + (W - L - R) / 2.0,
        xn = H - 6.0,
        xname = escape(x_name),
        yl = L - 4.0,
        yb = H - B,
        yt = T + 10.0,
        ylo = escape(y_lo),
        yhi = escape(y_hi),
    )
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

/// Empirical CDFs of several sample sets on a shared logarithmic latency axis (ns) with
/// 1-2-5 ticks in scaled units; each curve is drawn through at most [`ECDF_MAX_POINTS`]
/// quantiles; the legend sits in the lower right, below every curve.
pub fn ecdf_plot(title: &str, series: &[Series<'_>]) -> String {
    let all: Vec<f64> = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let (mut lo, mut hi) = all
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    if !lo.is_finite() {
        lo = 1.0;
        hi = 10.0;
    }
    if hi <= lo * 1.0001 {
        lo *= 0.9;
        hi *= 1.1;
    }
    let (llo, lhi) = (lo.ln(), hi.ln());
    let px = |v: f64| L + (v.max(lo).ln() - llo) / (lhi - llo) * (W - L - R);
    let py = |f: f64| H - B - f * (H - T - B);
    let mut s = frame(
        title,
        "",
        "",
        "0",
        "1",
        "latency per iteration (log scale), ECDF",
    );
    for t in log_ticks(lo, hi) {
        let x = px(t);
        s.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{yb}\" stroke=\"#ddd\"/><text x=\"{x:.1}\" y=\"{ty}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            escape(&tick_ns(t)),
            yb = H - B,
            ty = H - B + 14.0
        ));
    }
    for se in series {
        let mut v: Vec<f64> = se
            .values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            continue;
        }
        // Step points at evenly spaced ranks (every sample when there are few).
        let k = n.min(ECDF_MAX_POINTS);
        let mut pts = format!("{:.1},{:.1}", px(v[0]), py(0.0));
        for j in 0..k {
            let i = if k == n {
                j
            } else {
                j * (n - 1) / (k - 1).max(1)
            };
            let x = px(v[i]);
            pts.push_str(&format!(
                " {x:.1},{:.1} {x:.1},{:.1}",
                py(i as f64 / n as f64),
                py((i + 1) as f64 / n as f64)
            ));
        }
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{pts}\"/>",
            se.color
        ));
    }
    // Lower right: an ECDF is near 1 at the right edge, so this corner stays empty.
    for (k, se) in series.iter().enumerate() {
        let x = W - R - 110.0;
        let y = H - B - 10.0 - 14.0 * (series.len() - 1 - k) as f64;
        s.push_str(&format!(
            "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{y}\" font-size=\"11\">{}</text>",
            y - 9.0,
            se.color,
            x + 14.0,
            escape(se.label)
        ));
    }
    s.push_str("</svg>");
    s
}

/// A measured point on the roofline: label, colour, arithmetic intensity (FLOP/byte) and
/// achieved FLOP/s.
pub struct RoofPoint<'a> {
    /// Label (escaped here).
    pub label: &'a str,
    /// CSS colour.
    pub color: &'a str,
    /// FLOP per byte.
    pub intensity: f64,
    /// FLOP/s achieved.
    pub flops_per_s: f64,
}

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
    let ys: Vec<f64> = points
        .iter()
        .map(|p| p.flops_per_s)
        .filter(|v| *v > 0.0 && v.is_finite())
        .collect();
    let y_hi = peak * 2.0;
    let y_lo = ys.iter().fold(
        levels.first().map(|l| x_lo * l.1).unwrap_or(peak / 1e3),
        |a, v| a.min(*v),
    ) / 2.0;
    let lx = |v: f64| L + (v.ln() - x_lo.ln()) / (x_hi.ln() - x_lo.ln()) * (W - L - R);
    let ly =
        |v: f64| H - B - (v.max(y_lo).ln() - y_lo.ln()) / (y_hi.ln() - y_lo.ln()) * (H - T - B);
    let mut s = frame(
        title,
        "",
        "",
        "",
        "",
        "arithmetic intensity, FLOP/byte (log) vs FLOP/s (log)",
    );
    for t in log_ticks(x_lo, x_hi) {
        let x = lx(t);
        s.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{yb}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{ty}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            escape(&compact(t)),
            yb = H - B,
            ty = H - B + 14.0
        ));
    }
    for t in log_ticks(y_lo, y_hi) {
        let y = ly(t);
        s.push_str(&format!(
            "<line x1=\"{L}\" y1=\"{y:.1}\" x2=\"{xr}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{xl}\" y=\"{yt:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            escape(&tensorforge_core::units::rate(t, "FLOP")),
            xr = W - R,
            xl = L - 4.0,
            yt = y + 3.0
        ));
    }
    for (name, bw) in levels {
        let mut pts = String::new();
        for k in 0..=40 {
            let ai = (x_lo.ln() + (x_hi.ln() - x_lo.ln()) * k as f64 / 40.0).exp();
            pts.push_str(&format!("{:.1},{:.1} ", lx(ai), ly(peak.min(ai * bw))));
        }
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"#444\" stroke-dasharray=\"4 2\" points=\"{}\"><title>{}</title></polyline>",
            pts.trim_end(),
            escape(name)
        ));
    }
    for p in points {
        if p.intensity > 0.0 && p.flops_per_s > 0.0 {
            s.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{}\"><title>{}</title></circle>",
                lx(p.intensity),
                ly(p.flops_per_s),
                p.color,
                escape(p.label)
            ));
        }
    }
    s.push_str("</svg>");
    s
}

/// Trend of values over runs (index on x), segment means as horizontal lines and change
/// points as vertical red lines before the first point of each new segment.
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
    let px = |i: f64| L + (i + 0.5) / n as f64 * (W - L - R);
    let py = |v: f64| H - B - (v - lo) / (hi - lo) * (H - T - B);
    let mut s = frame(
        title,
        "first run",
        "last run",
        &format!("{lo:.4e} {unit}"),
        &format!("{hi:.4e} {unit}"),
        "run (time order)",
    );
    let pts: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{:.1},{:.1}", px(i as f64), py(*v)))
        .collect();
    s.push_str(&format!(
        "<polyline fill=\"none\" stroke=\"#1f77b4\" points=\"{}\"/>",
        pts.join(" ")
    ));
    for (i, v) in values.iter().enumerate() {
        s.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#1f77b4\"/>",
            px(i as f64),
            py(*v)
        ));
    }
    for (a, b, m) in segments {
        s.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#2ca02c\" stroke-width=\"2\"/>",
            px(*a as f64 - 0.4),
            px(*b as f64 - 0.6),
            y = py(*m)
        ));
    }
    for c in change_points {
        let x = px(*c as f64 - 0.5);
        s.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#d62728\" stroke-dasharray=\"3 2\"><title>change point</title></line>",
            H - B
        ));
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod ecdf_tests {
    use super::*;

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
        assert!(svg.contains(">2 µs<") && svg.contains(">10 µs<"), "{svg}");
        // 3..7 ms holds only the 5 ms tick of 1-2-5: every integer multiple instead.
        assert_eq!(log_ticks(3e6, 7e6), vec![3e6, 4e6, 5e6, 6e6, 7e6]);
        assert_eq!(tick_ns(2.5e6), "2.5 ms");
        assert_eq!(compact(1.68), "1.68");
        assert_eq!(compact(2000.0), "2k");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markup::check_well_formed;

    #[test]
    fn plots_are_well_formed_and_escape_labels() {
        let e = ecdf_plot(
            "<b>",
            &[Series {
                label: "<script>",
                color: "#000",
                values: &[1.0, 2.0],
            }],
        );
        check_well_formed(&e).unwrap();
        assert!(!e.contains("<script>") && e.contains("&lt;script&gt;"));
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
        let t = trend_plot(
            "t",
            "ns",
            &[1.0, 1.0, 5.0, 5.0],
            &[(0, 2, 1.0), (2, 4, 5.0)],
            &[2],
        );
        check_well_formed(&t).unwrap();
        check_well_formed(&trend_plot("t", "ns", &[], &[], &[])).unwrap();
    }
}
