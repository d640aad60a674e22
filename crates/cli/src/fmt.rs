//! Human-readable units for the command line: the Core's one formatter
//! (`tensorforge_core::units`), re-exported under the name the commands use.

pub use tensorforge_core::units::*;
