//! One module per subcommand; shared argument groups live here.

pub mod analyze;
pub mod compare;
pub mod explore;
pub mod graph;
pub mod hw;
pub mod kernels;
pub mod measure;
pub mod ops;
pub mod quickstart;
pub mod records;
pub mod roofline;
pub mod serve;
pub mod workloads;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use tensorforge_core::{presets, HardwareSpec};

/// Default chip when neither `--hw` nor `--hw-file` is given.
pub const DEFAULT_HW: &str = "balanced";

/// Which chip: a preset name or a hardware file.
#[derive(Args, Debug, Clone)]
pub struct HwArgs {
    /// Hardware preset (see `tensorforge hw list`); default `balanced`.
    #[arg(long, conflicts_with = "hw_file")]
    pub hw: Option<String>,
    /// Hardware file (TOML or JSON, same fields as `tensorforge hw show NAME --json`).
    #[arg(long, value_name = "FILE")]
    pub hw_file: Option<String>,
}

impl HwArgs {
    /// Resolve to a validated spec.
    pub fn load(&self) -> Result<HardwareSpec> {
        match (&self.hw, &self.hw_file) {
            (_, Some(f)) => load_hw_file(f),
            (Some(n), None) => Ok(presets::hardware(n)?),
            (None, None) => Ok(presets::hardware(DEFAULT_HW)?),
        }
    }
}

/// Read and validate a hardware file; TOML unless the extension is `.json`.
pub fn load_hw_file(path: &str) -> Result<HardwareSpec> {
    Ok(HardwareSpec::from_file_text(&read_text(path)?, path)?)
}

/// Read a UTF-8 text file, naming it in the error.
pub fn read_text(path: &str) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{path}: cannot read file"))?;
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{path}: file is not valid UTF-8"))
}

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v)?;
    println!("{s}");
    Ok(())
}

/// Parse `RxC` (e.g. `32x32`) into (rows, cols).
pub fn parse_pe(s: &str) -> Result<(u64, u64)> {
    let parts: Vec<&str> = s.split(['x', 'X', '×']).collect();
    let err = || {
        anyhow::anyhow!("invalid value for `--pe`: `{s}` (expected ROWSxCOLS with positive integers, e.g. 32x32)")
    };
    if parts.len() != 2 {
        return Err(err());
    }
    let r: u64 = parts[0].trim().parse().map_err(|_| err())?;
    let c: u64 = parts[1].trim().parse().map_err(|_| err())?;
    if r == 0 || c == 0 {
        return Err(err());
    }
    Ok((r, c))
}

/// Parse a comma-separated list with `f`, naming `flag` in errors.
pub fn parse_list<T>(s: &str, flag: &str, f: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .collect();
    if items.is_empty() {
        bail!("invalid value for `{flag}`: `{s}` is an empty list");
    }
    items
        .into_iter()
        .map(|x| f(x).with_context(|| format!("in `{flag}`")))
        .collect()
}

/// Parse a positive integer, naming `flag` in errors.
pub fn parse_positive(s: &str, flag: &str) -> Result<u64> {
    match s.trim().parse::<u64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => bail!("invalid value for `{flag}`: `{s}` (expected a positive integer)"),
    }
}
