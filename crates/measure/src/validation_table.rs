//! The validation table as cells: one header list and one row of formatted cells per
//! holdout workload, shared by the terminal, Markdown and HTML renderers (each escapes for
//! its own format). It formats; it decides nothing.

use crate::validate::ValidationReport;
use tensorforge_core::units;

/// Column headers of the validation table.
pub const VALIDATION_HEADERS: [&str; 10] = [
    "workload",
    "predicted",
    "measured p50",
    "signed err",
    "APE",
    "measured/pred",
    "bound",
    "pred+floor",
    "APE+floor",
    "ceiling",
];

/// Cell of the `ceiling` column: `VIOLATED` (measured faster than its roof) or `ok`.
pub fn ceiling_cell(violated: bool) -> &'static str {
    if violated {
        "VIOLATED"
    } else {
        "ok"
    }
}

/// One line per ceiling violation (`ceiling violated: W ran at 211.4 % of its calibrated
/// roof (R); ...`), empty when every workload respected its roof.
pub fn ceiling_violation_lines(r: &ValidationReport) -> Vec<String> {
    r.ceiling_violations.iter().map(|v| v.message()).collect()
}

/// One row of cells per holdout workload, in [`VALIDATION_HEADERS`] order.
pub fn validation_rows(r: &ValidationReport) -> Vec<Vec<String>> {
    r.rows
        .iter()
        .map(|row| {
            vec![
                row.workload.clone(),
                units::time(row.predicted_s),
                units::time(row.measured_p50_s),
                format!("{:+.1} %", row.signed_error_pct),
                format!("{:.1} %", row.ape_pct),
                format!("{:.2}", row.ratio),
                row.predicted_bound.clone(),
                row.predicted_with_floor_s
                    .map(units::time)
                    .unwrap_or_else(|| "-".into()),
                row.ape_with_floor_pct
                    .map(|v| format!("{v:.1} %"))
                    .unwrap_or_else(|| "-".into()),
                ceiling_cell(row.ceiling_violated).into(),
            ]
        })
        .collect()
}
