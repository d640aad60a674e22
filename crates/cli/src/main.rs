//! `tensorforge`: a thin command line over the TensorForge libraries. It parses arguments,
//! reads files, calls a library and prints; every model computation lives in
//! `tensorforge-core`. Errors print one line and exit with status 2.

mod cmd;
mod fmt;
mod render;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Make accelerator performance reasoning explicit: model, measure, gate.
#[derive(Parser, Debug)]
#[command(name = "tensorforge", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Analyze a workload on a chip: op counts, bytes, roofline, PE mapping, SRAM fit, schedules.
    Analyze(cmd::analyze::AnalyzeArgs),
    /// Rank user-supplied tile / PE / schedule candidates (bounded design-space exploration).
    Explore(cmd::explore::ExploreArgs),
    /// Place a (FLOPs, bytes) point on a chip's roofline.
    Roofline(cmd::roofline::RooflineArgs),
    /// Hardware presets and files.
    Hw {
        #[command(subcommand)]
        command: cmd::hw::HwCommand,
    },
    /// Check the overflow-safe kernels against a double-double reference at the edges of the number line.
    VerifyOverflow(cmd::kernels::VerifyArgs),
    /// Check the saturating quantizer against the exact ONNX QuantizeLinear definition.
    VerifyQuant(cmd::kernels::VerifyArgs),
    /// Run one kernel on NumPy .npy files.
    Kernel(cmd::kernels::KernelArgs),
    /// Named workload presets.
    Workloads {
        #[command(subcommand)]
        command: cmd::workloads::WorkloadsCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(a) => cmd::analyze::run(a),
        Command::Explore(a) => cmd::explore::run(a),
        Command::Roofline(a) => cmd::roofline::run(a),
        Command::Hw { command } => cmd::hw::run(command),
        Command::Workloads { command } => cmd::workloads::run(command),
        Command::VerifyOverflow(a) => cmd::kernels::run_verify_overflow(a),
        Command::VerifyQuant(a) => cmd::kernels::run_verify_quant(a),
        Command::Kernel(a) => cmd::kernels::run_kernel(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
