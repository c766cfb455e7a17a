//! `tracegraph memory`: live logical memory per device and category, the peak and what was
//! live at it, possible leaks, physical samples beside; the tracked heap apart. Of several
//! traces (the ranks of one run), each rank's peak by category side by side.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{Allocation, HeapReport, RankMemory, heap_report, memory_report, rank_memory};
use trace_record::schema::{DECLARED_BUFFER_BIT, MemoryCategory};

use super::{Status, Table, bytesu, load, nsu, print_json, write_stdout};

/// Arguments of `tracegraph memory`.
#[derive(clap::Args, Debug)]
pub(crate) struct MemoryArgs {
    /// The trace file (JSON Lines, or zstd-compressed). Several traces, or a directory of
    /// them (its `*.jsonl` and `*.jsonl.zst` files), are the ranks of one distributed run:
    /// then each rank's logical peak per device and category side by side (its tracked-heap
    /// peak beside, when recorded) and which rank peaks highest, by how much over the median
    /// rank.
    #[arg(required = true, num_args = 1..)]
    pub(crate) trace: Vec<PathBuf>,
    /// Print JSON (schema `tracegraph.memory/1`, timeline included; with a `heap` object when
    /// the trace has tracked-heap lines; `tracegraph.memory_ranks/1` for several traces)
    /// instead of text.
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
    // A buffer declared by shape has no Candle tensor: its id is a made-up number.
    let id = |x: u64| {
        if x & DECLARED_BUFFER_BIT != 0 && x < 1 << 53 {
            "declared".to_string()
        } else {
            x.to_string()
        }
    };
    for a in list {
        t.row(vec![
            id(a.storage),
            a.tensor.map_or("-".into(), id),
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
fn sparkline(points: &[(u64, u64)], width: usize, windows: &[(u64, u64)]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return String::new();
    };
    let (first, last) = (first.0, last.0);
    let span = (last - first).max(1);
    let max = points.iter().map(|p| p.1).max().unwrap_or(0).max(1);
    let col_of = |t: u64| {
        ((u128::from(t - first) * (width as u128 - 1)) / u128::from(span)).min(width as u128 - 1)
            as usize
    };
    let mut cols: Vec<Option<u64>> = vec![None; width];
    for &(t, v) in points {
        let slot = &mut cols[col_of(t)];
        *slot = Some(slot.map_or(v, |w| w.max(v)));
    }
    let mut recorded = vec![windows.is_empty(); width];
    for &(a, b) in windows {
        if b < first || a > last {
            continue;
        }
        let (ca, cb) = (col_of(a.max(first)), col_of(b.min(last)));
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
                BLOCKS[((u128::from(v) * 7) / u128::from(max)) as usize]
            } else {
                ' '
            }
        })
        .collect()
}

/// What a physical figure (a device's used bytes, the process's resident memory) holds of
/// the profiler's own: the trace records no share of it, so the figure is said to include
/// it, naming the parts of the profiler that ran (the recorder always; the CPU sampler's
/// frames and symbols, the heap tracker's tables when the trace shows they ran). One
/// sentence, for `memory` and `summary`.
pub(crate) fn physical_includes_profiler(trace: &trace_analyze::Trace) -> String {
    let mut parts = vec!["the recorder's buffers"];
    if !trace.sampled.steps.is_empty() {
        parts.push("the CPU sampler's stacks and symbol tables");
    }
    if !trace.heap.is_empty() {
        parts.push("the heap tracker's tables");
    }
    let last = parts.pop().unwrap_or_default();
    let list = if parts.is_empty() {
        last.to_string()
    } else {
        format!("{} and {last}", parts.join(", "))
    };
    format!(
        "includes the profiler's own memory ({list}); its share is not recorded, so not all of it is the model's"
    )
}

/// Runs `tracegraph memory`.
pub(crate) fn run(args: &MemoryArgs) -> anyhow::Result<Status> {
    let paths = super::trace_paths(&args.trace)?;
    if paths.len() > 1 {
        let traces = super::ranks::load_all(&paths)?;
        return run_ranks(&rank_memory(&traces), args.json);
    }
    let Some(path) = paths.first() else {
        anyhow::bail!("no trace given");
    };
    let trace = load(path, false)?;
    let report = memory_report(&trace);
    let heap = heap_report(&trace);
    if args.json {
        let mut v = match &report {
            Some(r) => serde_json::to_value(r)?,
            None => {
                serde_json::json!({ "absent": true, "reason": "the trace has no memory events" })
            }
        };
        if let (Some(h), serde_json::Value::Object(m)) = (&heap, &mut v) {
            m.insert("heap".into(), serde_json::to_value(h)?);
        }
        // The physical figures hold the profiler's own memory: said beside them.
        let physical = report
            .as_ref()
            .is_some_and(|r| r.devices.iter().any(|d| d.physical.is_some()));
        if let (true, serde_json::Value::Object(m)) = (physical, &mut v) {
            m.insert(
                "physical_note".into(),
                serde_json::Value::String(format!(
                    "physical {}",
                    physical_includes_profiler(&trace)
                )),
            );
        }
        print_json("memory", &v)?;
        return Ok(Status::Ok);
    }
    let windows: Vec<(u64, u64)> = trace.steps.iter().map(|s| (s.start_ns, s.end_ns)).collect();
    let mut o = String::new();
    let Some(r) = report else {
        o.push_str("memory: absent (the trace has no memory events)");
        if let Some(h) = &heap {
            heap_section(&mut o, h, &windows);
        }
        write_stdout(o.trim_end())?;
        return Ok(Status::Ok);
    };
    let _ = writeln!(
        o,
        "logical bytes (shape x dtype size) of the tensors the capture saw: parameters, captured \
         op and module outputs, declared buffers, the autograd graph and gradients (not the \
         intermediates inside an uncaptured library forward); never mixed with the physical \
         samples"
    );
    if let Some(a) = &r.autograd {
        let _ = writeln!(o, "{}", a.describe());
    }
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
                sparkline(
                    &d.timeline
                        .iter()
                        .map(|p| (p.t_ns, p.live_bytes))
                        .collect::<Vec<_>>(),
                    60,
                    &windows
                ),
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
                let _ = writeln!(o, "  the figure {}", physical_includes_profiler(&trace));
            }
            None => {
                let _ = writeln!(o, "physical: absent (no device_memory samples)");
            }
        }
    }
    if let Some(h) = &heap {
        heap_section(&mut o, h, &windows);
    }
    write_stdout(o.trim_end())?;
    Ok(Status::Ok)
}

/// `tracegraph memory` of several ranks: per rank and device its logical peak by category,
/// the tracked heap's peak beside, and the rank that peaks highest.
fn run_ranks(v: &RankMemory, json: bool) -> anyhow::Result<Status> {
    if json {
        print_json("memory_ranks", v)?;
        return Ok(Status::Ok);
    }
    use super::ranks::{label, preamble};
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} rank(s): logical memory peak (shape x dtype size of the tensors the capture saw) per rank and device, by category at the peak",
        v.ranks.len()
    );
    preamble(&mut o, &v.ranks, &v.notes);
    match &v.highest {
        Some(h) => {
            let _ = writeln!(
                o,
                "highest peak: rank {}, {} against the median rank's {} (+{})",
                v.ranks
                    .get(h.column)
                    .map_or_else(|| h.rank.to_string(), label),
                bytesu(h.peak_bytes),
                trace_analyze::format_bytes(h.median_bytes),
                trace_analyze::format_bytes(h.excess_bytes)
            );
        }
        None => {
            let _ = writeln!(o, "memory: absent (no trace has memory events)");
        }
    }
    let heap = v.rows.iter().any(|r| r.heap_peak_bytes.is_some());
    let names: Vec<String> = v
        .categories
        .iter()
        .map(|c| format!(">{}", c.as_str()))
        .collect();
    let mut cols = vec![">rank", "device", ">peak", ">at"];
    cols.extend(names.iter().map(String::as_str));
    cols.push(">live at end");
    if heap {
        cols.push(">heap peak (tracked)");
    }
    let mut t = Table::new(&cols);
    for r in &v.rows {
        let rank = v
            .ranks
            .get(r.column)
            .map_or_else(|| r.rank.to_string(), label);
        let heap_cell = || r.heap_peak_bytes.map_or("-".into(), bytesu);
        if r.devices.is_empty() {
            let mut row = vec![rank.clone(), "-".into(), "absent".into(), "-".into()];
            row.extend(v.categories.iter().map(|_| "-".to_string()));
            row.push("-".into());
            if heap {
                row.push(heap_cell());
            }
            t.row(row);
        }
        for (k, d) in r.devices.iter().enumerate() {
            let mut row = vec![
                rank.clone(),
                d.device.clone(),
                bytesu(d.peak_bytes),
                nsu(d.peak_at_ns),
            ];
            row.extend(
                v.categories
                    .iter()
                    .map(|&c| bytesu(d.peak_by_category.get(c))),
            );
            row.push(bytesu(d.end_bytes));
            if heap {
                // The tracked heap is the process's, not a device's: on its first row.
                row.push(if k == 0 { heap_cell() } else { String::new() });
            }
            t.row(row);
        }
    }
    let _ = writeln!(o);
    o.push_str(&t.render());
    if heap {
        o.push_str("\n(heap bytes asked of the allocator, never summed with logical bytes)");
    }
    write_stdout(&o)?;
    Ok(Status::Ok)
}

/// Allocations listed per span path at the peak, and span paths and steps listed.
const HEAP_ROWS: usize = 20;

/// The "heap (tracked)" section: heap bytes from a tracking allocator, apart from (and never
/// summed with) the logical bytes above.
fn heap_section(o: &mut String, h: &HeapReport, windows: &[(u64, u64)]) {
    let _ = writeln!(o);
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "heap (tracked): bytes asked of the allocator{}, never summed with logical bytes",
        h.threshold.map_or(String::new(), |t| format!(
            " (allocations of {} and more one by one, smaller ones counted)",
            bytesu(t)
        ))
    );
    let _ = writeln!(
        o,
        "{} allocs ({}), {} frees ({}); peak {} at {}, {} allocation(s) live; {} live at the end",
        h.allocs,
        bytesu(h.alloc_bytes),
        h.frees,
        bytesu(h.freed_bytes),
        bytesu(h.peak_bytes),
        nsu(h.peak_at_ns),
        h.peak_live_allocations,
        bytesu(h.live_at_end_bytes)
    );
    if h.small_allocs > 0 {
        let _ = writeln!(
            o,
            "below the threshold: {} allocs ({}), counted per span, their frees not seen",
            h.small_allocs,
            bytesu(h.small_bytes)
        );
    }
    if h.lost > 0 {
        let _ = writeln!(
            o,
            "  note: the tracker lost {} entries (its buffer was full): figures are incomplete, live bytes an upper bound",
            h.lost
        );
    }
    if h.unmatched_frees > 0 {
        let _ = writeln!(
            o,
            "  note: {} frees of blocks allocated before tracking (or outside a recorded window) are not counted",
            h.unmatched_frees
        );
    }
    if h.invalid > 0 {
        let _ = writeln!(
            o,
            "  note: {} heap lines contradict the others and were ignored (`tracegraph validate` names them)",
            h.invalid
        );
    }
    if h.saturated {
        let _ = writeln!(
            o,
            "  note: heap sums exceeded 2^64 - 1 (16 EiB); figures that did are shown capped at that value"
        );
    }
    if h.timeline.len() > 1 {
        let points: Vec<(u64, u64)> = h.timeline.iter().map(|p| (p.t_ns, p.live_bytes)).collect();
        let _ = writeln!(
            o,
            "live over time  {}  ({} .. {}, max {})",
            sparkline(&points, 60, windows),
            nsu(points[0].0),
            nsu(points[points.len() - 1].0),
            bytesu(h.peak_bytes)
        );
    }
    if !h.peak_by_span.is_empty() {
        let _ = writeln!(
            o,
            "
live at the heap peak, by span path"
        );
        let mut t = Table::new(&[
            "span path",
            ">bytes",
            ">allocs",
            "allocations (largest first)",
        ]);
        for p in h.peak_by_span.iter().take(HEAP_ROWS) {
            let mut sizes: Vec<String> = Vec::new();
            let mut i = 0;
            while i < p.allocations.len() && sizes.len() < 6 {
                let b = p.allocations[i].bytes;
                let n = p.allocations[i..]
                    .iter()
                    .take_while(|a| a.bytes == b)
                    .count();
                sizes.push(if n > 1 {
                    format!("{} ({b} B) x{n}", bytesu(b))
                } else {
                    format!("{} ({b} B)", bytesu(b))
                });
                i += n;
            }
            if i < p.allocations.len() {
                sizes.push(format!("+{} more", p.allocations.len() - i));
            }
            t.row(vec![
                p.path.clone(),
                bytesu(p.bytes),
                p.allocations.len().to_string(),
                sizes.join(", "),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
        if h.peak_by_span.len() > HEAP_ROWS {
            let _ = writeln!(o, "({} more span paths)", h.peak_by_span.len() - HEAP_ROWS);
        }
    }
    if !h.spans.is_empty() {
        let _ = writeln!(
            o,
            "
heap per span path (temporary: freed before its span ended; outlived: alive past it)"
        );
        let mut t = Table::new(&[
            "span path",
            ">allocs",
            ">allocated",
            ">freed",
            ">temporary",
            ">outlived",
            ">at peak",
            ">small",
        ]);
        for r in h.spans.iter().take(HEAP_ROWS) {
            t.row(vec![
                r.path.clone(),
                r.allocs.to_string(),
                bytesu(r.alloc_bytes),
                bytesu(r.freed_bytes),
                bytesu(r.temporary_bytes),
                bytesu(r.activation_bytes),
                bytesu(r.peak_bytes),
                format!("{} in {}", bytesu(r.small_bytes), r.small_allocs),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
        if h.spans.len() > HEAP_ROWS {
            let _ = writeln!(o, "({} more span paths)", h.spans.len() - HEAP_ROWS);
        }
    }
    if !h.steps.is_empty() {
        let _ = writeln!(
            o,
            "
heap per step"
        );
        let mut t = Table::new(&[
            ">step",
            ">allocs",
            ">allocated",
            ">freed",
            ">peak",
            ">small",
        ]);
        for st in h.steps.iter().take(HEAP_ROWS) {
            t.row(vec![
                st.step.to_string(),
                st.allocs.to_string(),
                bytesu(st.alloc_bytes),
                bytesu(st.freed_bytes),
                st.peak_bytes.map_or("-".into(), bytesu),
                format!("{} in {}", bytesu(st.small_bytes), st.small_allocs),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
        if h.steps.len() > HEAP_ROWS {
            let _ = writeln!(o, "({} more steps)", h.steps.len() - HEAP_ROWS);
        }
    }
}
