//! `tensorforge`: a thin command line over the TensorForge libraries. It parses arguments,
//! reads files, calls a library and prints; every model computation lives in
//! `tensorforge-core`. Errors print one line and exit with status 2; usage errors print
//! clap's message with its tips and usage line, also with status 2.

mod cmd;
mod fmt;
mod render;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: tensorforge_measure::alloc::CountingAlloc =
    tensorforge_measure::alloc::CountingAlloc;

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
    /// Serving view of a decoder model: prefill and decode time bounds, tokens/s, memory per
    /// device and the largest batch, over batch sizes and contexts, on one or more devices.
    Serve(cmd::serve::ServeArgs),
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
    /// Fuse a graph (JSON or ONNX): kernels, reasons, DRAM traffic before and after.
    Fuse(cmd::graph::FuseArgs),
    /// Plan the static memory of a graph's fused program.
    PlanMemory(cmd::graph::PlanMemoryArgs),
    /// Execute a graph on the CPU, fused or unfused.
    Run(cmd::graph::RunArgs),
    /// Write the generated source of a graph's fused kernels (C, as the JIT compiles it).
    Codegen(cmd::graph::CodegenArgs),
    /// DRAM traffic of RMSNorm -> SwiGLU, unfused vs fused (seed accounting and full accounting).
    MemoryTraffic(cmd::graph::MemoryTrafficArgs),
    /// Time workloads on this machine's CPU and optionally record them.
    Bench(cmd::measure::BenchArgs),
    /// Measure this CPU's ceilings (bandwidth, FMA peak, GEMM) and write a device profile.
    Calibrate(cmd::measure::CalibrateArgs),
    /// Predict a holdout suite from a calibrated profile and compare with measurement.
    Validate(cmd::measure::ValidateArgs),
    /// Records in the embedded store: list, show, export, import.
    Records(cmd::records::RecordsArgs),
    /// Convert benchmark results measured elsewhere into records.
    Ingest(cmd::records::IngestArgs),
    /// Regression gate: baseline vs candidate under a policy (exit 0 pass, 1 fail, 2 error, 3 inconclusive).
    Gate(cmd::ops::GateArgs),
    /// Impact report (Markdown, HTML, JSON) for a baseline/candidate pair.
    Report(cmd::ops::ReportArgs),
    /// A metric's history over runs, with change points.
    History(cmd::ops::HistoryArgs),
    /// The main job: calibrate, measure a holdout suite, record, validate, gate, report.
    Quickstart(cmd::quickstart::QuickstartArgs),
    /// Interleaved A/B: run a baseline and a candidate command in alternating rounds and
    /// decide per round (exit 0 pass, 1 regression, 2 error, 3 inconclusive).
    Compare(cmd::compare::CompareArgs),
    /// Internal: the child process that callgrind counts (`bench --instructions`).
    #[command(name = "__count-instructions", hide = true)]
    CountInstructions(cmd::measure::CountArgs),
}

/// Let every command take negative numbers as values, so that `--m -5` is reported as an
/// invalid value of `--m` instead of an unexpected argument `-5`.
fn allow_negatives(c: clap::Command) -> clap::Command {
    let c = c.allow_negative_numbers(true);
    let names: Vec<String> = c
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names
        .iter()
        .fold(c, |c, n| c.mut_subcommand(n, allow_negatives))
}

/// clap's whole message for a usage error: the error, its context (the missing arguments, a
/// "similar" subcommand or flag), the usage line and the pointer to `--help`. clap quotes
/// the offending argument as typed, so a control character in it (a newline in a value)
/// would split the message and could forge a line; the message is then the one clap gives
/// for the same arguments with those characters escaped (`\n`), as every other error shows
/// user strings.
fn usage_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if !args.iter().any(|a| a.chars().any(char::is_control)) {
        return text.trim_end().to_string();
    }
    let escaped = args.iter().map(|a| tensorforge_ops::markup::one_line(a));
    match allow_negatives(Cli::command())
        .try_get_matches_from(escaped)
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Err(e) => e.render().to_string().trim_end().to_string(),
        // Escaping made the arguments valid: say what clap said, on one line.
        Ok(_) => tensorforge_ops::markup::one_line(text.trim_end()),
    }
}

/// The passwords any `postgres://` argument or `$TENSORFORGE_STORE` carries (for
/// [`tensorforge_store::location::scrub`]).
fn store_secrets() -> Vec<String> {
    std::env::args_os()
        .chain(std::env::var_os("TENSORFORGE_STORE"))
        .filter_map(|a| a.to_str().map(str::to_string))
        .filter(|a| a.contains("://"))
        .flat_map(|a| {
            let url = a.split_once('=').map_or(a.as_str(), |(k, v)| {
                if k.starts_with("--") {
                    v
                } else {
                    a.as_str()
                }
            });
            tensorforge_store::location::secrets_in(url)
        })
        .collect()
}

fn main() -> ExitCode {
    use clap::error::ErrorKind;
    // Usage errors print clap's whole message (the error, its tips and the usage line) and
    // exit 2, like every other error; help and version print as clap writes them, exit 0.
    let parsed = allow_negatives(Cli::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            eprintln!("{}", usage_message(&e));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Analyze(a) => cmd::analyze::run(a).map(|()| None),
        Command::Explore(a) => cmd::explore::run(a).map(|()| None),
        Command::Roofline(a) => cmd::roofline::run(a).map(|()| None),
        Command::Serve(a) => cmd::serve::run(a).map(|()| None),
        Command::Hw { command } => cmd::hw::run(command).map(|()| None),
        Command::Workloads { command } => cmd::workloads::run(command).map(|()| None),
        Command::VerifyOverflow(a) => cmd::kernels::run_verify_overflow(a).map(|()| None),
        Command::VerifyQuant(a) => cmd::kernels::run_verify_quant(a).map(|()| None),
        Command::Kernel(a) => cmd::kernels::run_kernel(a).map(|()| None),
        Command::Fuse(a) => cmd::graph::run_fuse(a).map(|()| None),
        Command::PlanMemory(a) => cmd::graph::run_plan_memory(a).map(|()| None),
        Command::Run(a) => cmd::graph::run_graph(a).map(|()| None),
        Command::Codegen(a) => cmd::graph::run_codegen(a).map(|()| None),
        Command::MemoryTraffic(a) => cmd::graph::run_memory_traffic(a).map(|()| None),
        Command::Bench(a) => cmd::measure::run_bench(a).map(|()| None),
        Command::Calibrate(a) => cmd::measure::run_calibrate(a).map(|()| None),
        Command::Validate(a) => cmd::measure::run_validate(a).map(|()| None),
        Command::Ingest(a) => cmd::records::run_ingest(a).map(|()| None),
        Command::Report(a) => cmd::ops::run_report(a).map(|()| None),
        Command::History(a) => cmd::ops::run_history(a).map(|()| None),
        // `records sync` exits 2 when it refused a run (each listed, the rest copied).
        Command::Records(a) => cmd::records::run_records(a),
        // These choose their own exit status (0 pass, 1 fail, 3 inconclusive; 2 error).
        Command::Gate(a) => cmd::ops::run_gate(a).map(Some),
        Command::Quickstart(a) => cmd::quickstart::run_quickstart(a).map(Some),
        Command::Compare(a) => cmd::compare::run(a).map(Some),
        Command::CountInstructions(a) => cmd::measure::run_count(a).map(|()| None),
    };
    match result {
        Ok(Some(code)) => ExitCode::from(code),
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            // One line whatever the message holds: a newline in a user string (a tensor
            // or benchmark name, a policy value) is shown as `\n`, never a new line.
            // And never a password: every message shows a store URL redacted already; this
            // scrubs any password a store argument carries from the line as a last defence.
            eprintln!(
                "error: {}",
                tensorforge_store::location::scrub(
                    &tensorforge_ops::markup::one_line(&format!("{e:#}")),
                    &store_secrets()
                )
            );
            ExitCode::from(2)
        }
    }
}
