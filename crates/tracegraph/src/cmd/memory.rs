//! `tracegraph memory`: live logical memory per device and category, the peak and what was
//! live at it, possible leaks, physical samples beside.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{Allocation, memory_report};
use trace_record::schema::MemoryCategory;

use super::{Status, Table, bytesu, load, nsu, print_json, write_stdout};

/// Arguments of `tracegraph memory`.
#[derive(clap::Args, Debug)]
pub(crate) struct MemoryArgs {
    /// The trace file (JSON Lines).
    pub(crate) trace: PathBuf,
    /// Print JSON (schema `tracegraph.memory/1`, timeline included) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

fn alloc_table(list: &[Allocation]) -> String {
    let mut t = Table::new(&[
        "storage",
        "tensor",
        "label",
        "shape",
        "category",
        ">bytes",
        ">allocated at",
    ]);
    for a in list {
        t.row(vec![
            a.storage.to_string(),
            a.tensor.map_or("-".into(), |x| x.to_string()),
            a.label.clone().unwrap_or_else(|| "-".into()),
            a.shape.clone().unwrap_or_else(|| "-".into()),
            a.category.as_str().to_string(),
            bytesu(a.bytes),
            nsu(a.allocated_at_ns),
        ]);
    }
    t.render()
}

/// Live bytes over time as a row of block characters: each of `width` columns of equal time
/// shows the most live in it (live bytes carry over between events). Columns outside every
/// recorded step (`windows`, when the trace has steps) stay blank: a gap, not a zero.
fn sparkline(
    points: &[trace_analyze::TimelinePoint],
    width: usize,
    windows: &[(u64, u64)],
) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return String::new();
    };
    let span = (last.t_ns - first.t_ns).max(1);
    let max = points
        .iter()
        .map(|p| p.live_bytes)
        .max()
        .unwrap_or(0)
        .max(1);
    let col_of = |t: u64| {
        ((((t - first.t_ns) as u128) * (width as u128 - 1)) / span as u128).min(width as u128 - 1)
            as usize
    };
    let mut cols: Vec<Option<u64>> = vec![None; width];
    for p in points {
        let slot = &mut cols[col_of(p.t_ns)];
        *slot = Some(slot.map_or(p.live_bytes, |v| v.max(p.live_bytes)));
    }
    let mut recorded = vec![windows.is_empty(); width];
    for &(a, b) in windows {
        if b < first.t_ns || a > last.t_ns {
            continue;
        }
        let (ca, cb) = (col_of(a.max(first.t_ns)), col_of(b.min(last.t_ns)));
        for r in &mut recorded[ca..=cb] {
            *r = true;
        }
    }
    let mut carry = 0u64;
    cols.into_iter()
        .zip(recorded)
        .map(|(c, rec)| {
            let v = c.unwrap_or(carry);
            carry = v;
            if rec || c.is_some() {
                BLOCKS[((v as u128 * 7) / max as u128) as usize]
            } else {
                ' '
            }
        })
        .collect()
}

/// Runs `tracegraph memory`.
pub(crate) fn run(args: &MemoryArgs) -> anyhow::Result<Status> {
    let trace = load(&args.trace, false)?;
    let report = memory_report(&trace);
    if args.json {
        match &report {
            Some(r) => print_json("memory", r)?,
            None => print_json(
                "memory",
                &serde_json::json!({ "absent": true, "reason": "the trace has no memory events" }),
            )?,
        }
        return Ok(Status::Ok);
    }
    let Some(r) = report else {
        write_stdout("memory: absent (the trace has no memory events)")?;
        return Ok(Status::Ok);
    };
    let windows: Vec<(u64, u64)> = trace.steps.iter().map(|s| (s.start_ns, s.end_ns)).collect();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "logical bytes (shape x dtype size), never mixed with the physical samples"
    );
    for d in &r.devices {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "device {}: {} allocs, {} frees{}; peak {} at {}, {} allocation(s) live",
            d.device,
            d.allocs,
            d.frees,
            if d.unmatched_frees > 0 {
                format!(" ({} without allocation)", d.unmatched_frees)
            } else {
                String::new()
            },
            bytesu(d.peak_bytes),
            nsu(d.peak_at_ns),
            d.peak_live_allocations
        );
        if d.saturated {
            let _ = writeln!(
                o,
                "  note: live bytes exceeded 2^64 - 1 (16 EiB); figures that did are shown capped at that value"
            );
        }
        if d.timeline.len() > 1 {
            let _ = writeln!(
                o,
                "live over time  {}  ({} .. {}, max {})",
                sparkline(&d.timeline, 60, &windows),
                nsu(d.timeline[0].t_ns),
                nsu(d.timeline[d.timeline.len() - 1].t_ns),
                bytesu(d.peak_bytes)
            );
        }
        let mut t = Table::new(&["category", ">at peak", ">at end"]);
        for c in MemoryCategory::ALL {
            let (p, e) = (d.peak_by_category.get(c), d.end_by_category.get(c));
            if p > 0 || e > 0 {
                t.row(vec![c.as_str().to_string(), bytesu(p), bytesu(e)]);
            }
        }
        t.row(vec![
            "total".into(),
            bytesu(d.peak_bytes),
            bytesu(d.end_bytes),
        ]);
        let _ = writeln!(o, "{}", t.render());
        if !d.peak_allocations.is_empty() {
            let _ = writeln!(o, "\nlargest allocations live at the peak");
            let _ = writeln!(o, "{}", alloc_table(&d.peak_allocations));
        }
        if d.possible_leak_count > 0 {
            let _ = writeln!(
                o,
                "\npossible leaks: {} allocation(s), {} live at the end outside parameters and optimizer state",
                d.possible_leak_count,
                bytesu(d.possible_leak_bytes)
            );
            let _ = writeln!(o, "{}", alloc_table(&d.possible_leaks));
        } else {
            let _ = writeln!(
                o,
                "\nno possible leaks: only parameters and optimizer state live at the end"
            );
        }
        match &d.physical {
            Some(p) => {
                let _ = writeln!(
                    o,
                    "physical (reported by the device, {} samples): max used {}, max reserved {}, min free {}",
                    p.samples,
                    p.max_used_bytes.map_or("unknown".into(), bytesu),
                    p.max_reserved_bytes.map_or("unknown".into(), bytesu),
                    p.min_free_bytes.map_or("unknown".into(), bytesu)
                );
            }
            None => {
                let _ = writeln!(o, "physical: absent (no device_memory samples)");
            }
        }
    }
    write_stdout(o.trim_end())?;
    Ok(Status::Ok)
}
