//! The demo training run: the loss goes down, the run is deterministic, the trace validates.

use trace_candle::demo::{MlpDemoConfig, run_mlp_demo};

#[test]
fn demo_loss_goes_down_and_prints() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_mlp_demo(&MlpDemoConfig::new(dir.path().join("demo.jsonl"))).unwrap();
    eprintln!("{:?}", report.losses);
    assert_eq!(report.losses.len(), 50);
    assert!(report.last_loss < 0.8 * report.first_loss, "{report:?}");
}
