//! A flight recorder over a long training loop: an injected slow step and a NaN loss, each
//! written to disk as a dump, then `tracegraph summary` on each.
//!
//! ```text
//! cargo run -p trace-record --example flight_recorder -- [DIR [STEPS]]
//! tracegraph summary DIR/<dump>.jsonl
//! ```
//!
//! Records `STEPS` steps (default 2,000, about 1 ms each in a release build) of a few ops
//! and spans into a 256 KiB ring, with the slow-step trigger (10x the median of the last 64
//! steps), the non-finite loss trigger and SIGUSR2 (`kill -USR2 PID`) on, 4 steps before each
//! trigger and 2 after. Step 600 is slowed down (a 50 ms
//! sleep) and step 1,400 records a NaN loss. Prints the dumps written.

use std::time::Duration;

use trace_record::schema::{Phase, SpanKind};
use trace_record::{FlightConfig, OpRecord, Run, TraceSession};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "flight-dumps".into());
    let steps: u64 = args.next().map_or(Ok(2_000), |s| s.parse())?;
    let session = TraceSession::flight(
        Run::new("examples::flight_recorder", Phase::Train, "cpu"),
        FlightConfig::new(&dir)
            .ring_bytes(256 << 10)
            .before(4)
            .after(2)
            .slow_step(10.0, 64)
            .on_signal()
            .min_interval(Duration::ZERO),
    )?;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..steps {
        {
            let _fwd = session.span("forward", SpanKind::Module, None);
            for layer in 0..4u64 {
                let start = session.now_ns();
                // The program's work: a few rounds of a xorshift.
                for _ in 0..200_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                session.record_op(&OpRecord {
                    name: "matmul",
                    inputs: &[layer, layer + 1],
                    outputs: &[layer + 2],
                    shape: &[64, 64],
                    dtype: "f32",
                    device: "cpu",
                    start_ns: start,
                    dur_ns: session.now_ns() - start,
                    in_bytes: 32_768,
                    out_bytes: 16_384,
                    category: None,
                    flops: Some(524_288),
                });
            }
            if step == 600 {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let loss = if step == 1_400 {
            f64::NAN
        } else {
            1.0 / (step as f64 + 1.0)
        };
        session.record_loss(loss);
        session.step();
    }
    session.finish()?;
    let stats = session.flight_stats().ok_or("not a flight recorder")?;
    println!(
        "{} dump(s), {} bytes; {} trigger(s) refused; ring {} steps, {} bytes; {} steps evicted; checksum {x:x}",
        stats.dumps.len(),
        stats.dump_bytes,
        stats.suppressed,
        stats.ring_steps,
        stats.ring_bytes,
        stats.evicted_steps
    );
    for d in &stats.dumps {
        println!("{}", d.display());
    }
    Ok(())
}
