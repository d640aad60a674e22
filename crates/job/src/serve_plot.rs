//! The serving view's plot: decode tokens per second against batch size, one line per context
//! length, drawn with plotters' SVG backend (the library the other plots use). A point whose
//! weights and KV cache do not fit in one device's memory is drawn hollow, and a dashed
//! vertical line in the context's colour marks the largest batch that fits (its value is in
//! the legend, also when it lies outside the plotted batches). It draws a Core result
//! ([`ServeReport`]) and computes nothing; the numbers are model lower bounds, as the report
//! says. Left out: prefill (a table in the report), interactivity, and more than eight
//! distinguishable context colours (further contexts reuse them).

use plotters::coord::Shift;
use plotters::prelude::*;
use tensorforge_core::serve::ServeReport;
use tensorforge_ops::svg::{compact, log_ticks};

/// Width and height of the plot, pixels.
const SIZE: (u32, u32) = (640, 360);
const FONT: &str = "sans-serif";
/// One colour per context, in order.
const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x7f, 0x7f, 0x7f),
];

type Plot<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Draw on a fresh SVG canvas; when plotters reports an error the plot is replaced by its
/// title and the error (still an SVG document).
fn render(title: &str, draw: impl FnOnce(&Plot<'_>) -> DrawResult) -> String {
    let mut svg = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
    };
    if result.is_ok() {
        return svg;
    }
    let message = format!(
        "{title}: plot unavailable ({})",
        result.err().map(|e| e.to_string()).unwrap_or_default()
    );
    let mut svg = String::new();
    let fallback = {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| root.draw(&Text::new(message, (10, 20), (FONT, 13))))
            .and_then(|()| root.present())
    };
    if fallback.is_ok() {
        svg
    } else {
        String::new()
    }
}

/// The plot's title: model, chip and split.
pub fn title(r: &ServeReport) -> String {
    let p = &r.parallelism;
    format!(
        "{} on {} ({}, tp {} pp {} ep {} dp {}): decode tokens/s, lower bound",
        r.model, r.hardware, r.dtype, p.tp, p.pp, p.ep, p.dp
    )
}

/// Tokens per second against batch (both axes logarithmic), one line per context; hollow
/// points do not fit in memory; dashed verticals mark the largest batch that fits.
pub fn serve_svg(r: &ServeReport) -> String {
    let title = title(r);
    let pts = r
        .decode
        .iter()
        .filter(|d| d.tokens_per_s.is_finite() && d.tokens_per_s > 0.0);
    let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (f64::MAX, 0.0f64, f64::MAX, 0.0f64);
    for d in pts {
        x_lo = x_lo.min(d.batch as f64);
        x_hi = x_hi.max(d.batch as f64);
        y_lo = y_lo.min(d.tokens_per_s);
        y_hi = y_hi.max(d.tokens_per_s);
    }
    if !(x_hi > 0.0 && y_hi > 0.0) {
        return render(&title, |root| {
            root.draw(&Text::new(
                format!("{title}: no decode points"),
                (10, 20),
                (FONT, 13),
            ))
        });
    }
    // Pad the ranges so that single points and the edges stay visible.
    let (x_lo, x_hi) = (x_lo / 1.5, x_hi * 1.5);
    let (y_lo, y_hi) = (y_lo / 1.5, y_hi * 1.5);
    render(&title, |root| {
        let x = (x_lo..x_hi)
            .log_scale()
            .with_key_points(log_ticks(x_lo, x_hi));
        let y = (y_lo..y_hi)
            .log_scale()
            .with_key_points(log_ticks(y_lo, y_hi));
        let mut chart = ChartBuilder::on(root)
            .caption(&title, (FONT, 13))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(60)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc("batch, sequences per replica (log); hollow: does not fit; dashed: largest batch that fits")
            .y_desc("output tokens/s (log)")
            .x_label_formatter(&|v| compact(*v))
            .y_label_formatter(&|v| compact(*v))
            .label_style((FONT, 11))
            .light_line_style(WHITE)
            .draw()?;
        for (k, lb) in r.largest_batch.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let line: Vec<(f64, f64)> = r
                .decode
                .iter()
                .filter(|d| d.context == lb.context && d.tokens_per_s > 0.0)
                .map(|d| (d.batch as f64, d.tokens_per_s))
                .collect();
            let limit = match lb.largest_batch {
                Some(0) => "nothing fits".to_string(),
                Some(n) => format!("fits ≤ {n}"),
                None => "memory unknown".to_string(),
            };
            chart
                .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(2)))?
                .label(format!("context {} ({limit})", lb.context))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], color));
            let marks = r
                .decode
                .iter()
                .filter(|d| d.context == lb.context && d.tokens_per_s > 0.0)
                .map(move |d| {
                    let style = if d.fits == Some(false) {
                        color.stroke_width(2)
                    } else {
                        color.filled()
                    };
                    Circle::new((d.batch as f64, d.tokens_per_s), 4, style)
                });
            chart.draw_series(marks)?;
            if let Some(n) = lb.largest_batch.filter(|n| {
                let n = *n as f64;
                n >= x_lo && n <= x_hi
            }) {
                chart.draw_series(DashedLineSeries::new(
                    [(n as f64, y_lo), (n as f64, y_hi)],
                    6,
                    4,
                    color.stroke_width(1),
                ))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_core::parallel::Parallelism;
    use tensorforge_core::serve::{serve, ServeOptions};
    use tensorforge_core::transformer::{decoder_from_hf_config, Phase};
    use tensorforge_core::{presets, DType};

    /// The keys of Llama-3-8B's config.json that the model reads (inline: a crate packages
    /// only its own files).
    const LLAMA3: &str = r#"{"hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 32,
        "vocab_size": 128256, "hidden_act": "silu", "model_type": "llama",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": false}"#;

    fn report(batches: &[u64]) -> ServeReport {
        let m = decoder_from_hf_config(LLAMA3, "llama3_8b", 1, 1, Phase::Decode, 0, DType::Bf16)
            .unwrap();
        let o = ServeOptions {
            parallelism: Parallelism::default(),
            batches: batches.to_vec(),
            contexts: vec![2048, 8192],
        };
        serve(&m, &presets::hardware("nvidia_h100_sxm").unwrap(), &o).unwrap()
    }

    #[test]
    fn draws_one_line_per_context_and_marks_the_memory_limit() {
        // Largest batches on one H100 (core::serve's hand check): 238 at context 2048 and
        // ⌊63 939 477 504 / 1 073 872 896⌋ = 59 at 8192; both inside 1..512.
        let r = report(&[1, 8, 32, 64, 128, 256, 512]);
        assert_eq!(r.largest_batch[0].largest_batch, Some(238));
        assert_eq!(r.largest_batch[1].largest_batch, Some(59));
        let svg = serve_svg(&r);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("context 2048 (fits ≤ 238)"), "{svg}");
        assert!(svg.contains("context 8192 (fits ≤ 59)"));
        assert!(svg.contains("llama3_8b on nvidia_h100_sxm"));
        // Two dashed limit lines: plotters draws dashes as many short segments in the
        // context's colour; each context's colour appears in the drawing.
        assert!(svg.contains("#1F77B4") || svg.contains("#1f77b4"));
        assert!(svg.contains("#D62728") || svg.contains("#d62728"));
    }

    #[test]
    fn one_point_still_draws() {
        let svg = serve_svg(&report(&[1]));
        assert!(svg.contains("context 2048"), "{svg}");
        assert!(!svg.contains("plot unavailable"));
    }
}
