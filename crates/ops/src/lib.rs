//! Policy evidence over measurements: a regression gate (baseline vs candidate under a TOML
//! policy, with Mann–Whitney U tests, seeded bootstrap intervals and Benjamini–Hochberg
//! control across the suite), an impact report (Markdown, self-contained HTML with inline
//! SVG, JSON) that adds the analytical model's roofline as labelled *context*, and the
//! history of one metric over runs with change points from a penalized step fit.
//!
//! Everything here works on plain `&[Record]` slices; reading files and the store is the
//! caller's job. The model context never changes a verdict: only measurements and the
//! policy decide.
//!
//! ```
//! use tensorforge_ops::stats::mann_whitney_greater;
//! // Every candidate sample exceeds every baseline sample: U = 3 · 3 = 9, and exactly one of
//! // the C(6, 3) = 20 equally likely rank splits is that extreme, so p = 1/20.
//! let r = mann_whitney_greater(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]);
//! assert_eq!(r.u, 9.0);
//! assert!((r.p_value - 0.05).abs() < 1e-12);
//! ```

pub mod compare;
pub mod date;
pub mod error;
pub mod gate;
pub mod history;
pub mod markup;
pub mod policy;
pub mod report;
/// The workspace's seeded generator lives in the Core; re-exported at its old path.
pub use tensorforge_core::rng;
pub mod stats;
pub mod svg;

pub use date::Date;
pub use error::OpsError;
pub use gate::{
    downgrade_timed_failures, gate, GateResult, MetricRow, Verdict, WorkloadComparison,
    GATE_SCHEMA_VERSION,
};
pub use history::{fit_steps, history, History, StepFit};
pub use policy::{
    CompareSettings, Direction, HistorySettings, IdentityRule, Metric, MetricPolicy, Policy,
    RoundOrder, Statistic, TestKind, Waiver, DEFAULT_POLICY_TOML,
};
pub use report::{
    render_html, render_html_with_lead, render_markdown, render_markdown_with_lead, HtmlBody,
    HtmlSection, Report,
};
