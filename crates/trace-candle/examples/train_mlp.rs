//! Trains a 3-layer MLP on synthetic data with capture on and prints where the trace went.
//!
//! `cargo run --release -p trace-candle --example train_mlp [TRACE_PATH]`

use trace_candle::demo::{MlpDemoConfig, run_mlp_demo};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = match std::env::args_os().nth(1) {
        Some(path) => MlpDemoConfig::new(path),
        None => MlpDemoConfig::default(),
    };
    println!(
        "training a {}-{}-{}-{} MLP (candle-nn, AdamW) for {} steps on the CPU, seed {}",
        trace_candle::demo::FEATURES,
        trace_candle::demo::HIDDEN,
        trace_candle::demo::HIDDEN,
        trace_candle::demo::CLASSES,
        config.steps,
        config.seed
    );
    let report = run_mlp_demo(&config)?;
    for (step, loss) in report.losses.iter().enumerate() {
        let mark = if report.recorded_steps.contains(&(step as u64)) {
            "  (recorded)"
        } else {
            ""
        };
        println!("step {step:>3}  loss {loss:.4}{mark}");
    }
    println!(
        "loss {:.4} -> {:.4}, training accuracy {:.1}%",
        report.first_loss,
        report.last_loss,
        100.0 * report.accuracy
    );
    println!(
        "trace: {} ({} events, {} bytes, steps {:?} recorded)",
        report.trace_path.display(),
        report.summary.counts.total(),
        report.summary.bytes,
        report.recorded_steps
    );
    Ok(())
}
