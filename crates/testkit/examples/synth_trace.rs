//! Writes a synthetic trace to a file.
//!
//! `cargo run --release -p testkit --example synth_trace -- OUT.jsonl [OPS] [OPS_PER_STEP]`.

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: synth_trace OUT.jsonl [OPS] [OPS_PER_STEP]")?;
    let ops: usize = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let per: usize = args.next().map_or(Ok(1000), |s| s.parse())?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&out)?);
    let n = testkit::write_synthetic(
        &mut w,
        &testkit::SynthConfig {
            ops,
            ops_per_step: per,
            ..Default::default()
        },
    )?;
    w.flush()?;
    println!("wrote {out}: {ops} ops, {n} events");
    Ok(())
}
