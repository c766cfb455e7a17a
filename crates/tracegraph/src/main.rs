//! tracegraph: the command-line tool that profiles Candle runs and analyses their traces.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
#[cfg(feature = "demo")]
mod demo;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure (a file could not be read or written, the demo failed, ...)
  2  usage error (unknown command or option, bad argument)
  3  invalid trace: not JSON, not the trace schema, or an unsupported version
     (the message names the file, line and field)
  4  `validate` found problems (structural issues; with --strict also an incomplete
     trace or trailer counts that do not match)
  5  `compare --fail-on-regression PCT`: the step time, an op or a span is slower by
     more than PCT percent (median per step) and outside its 95% bootstrap interval

A truncated trace (no trailer: a crash or kill -9) is analysed up to its last complete
line and flagged incomplete; it is not an error. The step it ends in is listed as
partial and left out of step times, graph stability and comparisons (`partial_step`,
`partial` in JSON).

JSON (--json): one object per command whose `schema` field names it and its version
(`tracegraph.summary/1`, `tracegraph.ops/1`, ...). Field names are stable within a
version: durations end in `_ns` (nanoseconds), sizes in `_bytes` (logical bytes,
shape x dtype size), spreads are {count, mean, stddev, min, max}; a figure the trace
has no evidence for is omitted, never written as 0. Durations are host time unless
`timing` is `device_synchronized`.";

/// Profile Candle programs and analyse their traces: where did the time go, where did the
/// memory go, did the graph change between steps, what changed between two runs.
#[derive(Parser, Debug)]
#[command(name = "tracegraph", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a small Candle MLP on CPU with capture, write its trace and print the summary.
    #[cfg(feature = "demo")]
    Demo(cmd::demo::DemoArgs),
    /// Not in this build (built without the `demo` feature): says so.
    #[cfg(not(feature = "demo"))]
    #[command(hide = true)]
    Demo(NoDemoArgs),
    /// Header, health, step times, top ops, memory peak by category, graph stability.
    Summary(cmd::summary::SummaryArgs),
    /// The op table: count, total, self, mean, min, max, p95, output bytes, share of step
    /// (`--sampled`: the Candle ops CPU samples ran inside, per span path).
    Ops(cmd::ops::OpsArgs),
    /// The span tree: total and self time per span path, mean and spread over steps.
    Spans(cmd::spans::SpansArgs),
    /// Live logical memory per device and category: peak, what was live there, leaks.
    Memory(cmd::memory::MemoryArgs),
    /// Per-step execution graphs: fingerprints, stability, first differing op.
    Graph(cmd::graph::GraphArgs),
    /// Sampled CPU hot spots (trace recorded with the sampler): by function, crate group, phase, span or Candle op.
    Hot(cmd::hot::HotArgs),
    /// Gradients per parameter and step: never trained first, non-finite flagged; autograd memory.
    Gradients(cmd::gradients::GradientsArgs),
    /// Compare two traces: median time per step per span and op with bootstrap intervals, memory, graph equality.
    Compare(cmd::compare::CompareArgs),
    /// Check a trace: schema, structure (spans, allocations), completeness.
    Validate(cmd::validate::ValidateArgs),
    /// Export a trace as Chrome trace JSON (Perfetto) or folded stacks.
    Export(cmd::export::ExportArgs),
    /// Write a self-contained HTML report of a trace.
    Report(cmd::report::ReportArgs),
}

/// Whatever follows `tracegraph demo` in a build without the `demo` feature.
#[cfg(not(feature = "demo"))]
#[derive(clap::Args, Debug)]
struct NoDemoArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<std::ffi::OsString>,
}

/// What `tracegraph demo` says in a build without the `demo` feature.
#[cfg(not(feature = "demo"))]
const NO_DEMO: &str = "this tracegraph was built without the `demo` feature (no Candle), so \
    it has no `demo` command; install it with default features (`cargo install tracegraph`) \
    to train the demo MLP";

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match &cli.command {
        #[cfg(feature = "demo")]
        Command::Demo(a) => cmd::demo::run(a),
        #[cfg(not(feature = "demo"))]
        Command::Demo(_) => {
            eprintln!("tracegraph: error: {NO_DEMO}");
            return ExitCode::from(2);
        }
        Command::Summary(a) => cmd::summary::run(a),
        Command::Ops(a) => cmd::ops::run(a),
        Command::Spans(a) => cmd::spans::run(a),
        Command::Memory(a) => cmd::memory::run(a),
        Command::Graph(a) => cmd::graph::run(a),
        Command::Hot(a) => cmd::hot::run(a),
        Command::Gradients(a) => cmd::gradients::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Export(a) => cmd::export::run(a).map(|()| cmd::Status::Ok),
        Command::Report(a) => cmd::report::run(a).map(|()| cmd::Status::Ok),
    };
    match result {
        Ok(cmd::Status::Ok) => ExitCode::SUCCESS,
        Ok(cmd::Status::Problems) => ExitCode::from(4),
        Ok(cmd::Status::Regressed) => ExitCode::from(5),
        Err(e) => {
            eprintln!("tracegraph: error: {}", error_text(&e));
            ExitCode::from(cmd::exit_code(&e))
        }
    }
}

/// The error and its causes joined by `: `, each said once: a cause whose text the message
/// already contains (an error that prints its source, e.g. an OS error) is not repeated.
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}
