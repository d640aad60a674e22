//! TensorForge's jobs as a library, composed from the model, measurement and policy crates
//! so that the command line only parses and prints:
//! - [`quickstart`]: the main job — calibrate, measure the embedded holdout suite, validate
//!   the model, gate the run against this machine's history, write the reports, record;
//! - [`compare`]: an interleaved A/B comparison of two commands in alternating rounds;
//! - [`two_builds`]: the main job's suite gated between two builds (`quickstart --baseline-bin`);
//! - [`baseline`]: what a gate compares a candidate with (a records file, a stored run, or
//!   the history of comparable runs), for the command line and the quickstart alike;
//! - [`serve_plot`]: the SVG plot of the serving view (tokens/s against batch).
//!
//! ```no_run
//! use tensorforge_job::quickstart::{run_quickstart, QuickstartOptions};
//! let opts = QuickstartOptions::new("/tmp/tf.sqlite".into(), "/tmp/report".into());
//! let outcome = run_quickstart(&opts, &mut |line| eprintln!("{line}")).unwrap();
//! println!("{} (exit {})", outcome.decision, outcome.exit_code);
//! ```

pub mod baseline;
pub mod compare;
pub mod error;
pub mod gpu_quickstart;
pub mod machine;
pub mod quickstart;
pub mod serve_plot;
pub mod two_builds;

pub use error::{JobError, Result};
