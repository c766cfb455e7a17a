//! The report's tracked-heap view: live heap bytes over time, what was live at the peak, spans.
//!
//! From trace-analyze's [`heap_report`] only (heap bytes from a tracking allocator, never
//! summed with the memory section's logical bytes); absent without heap lines.

use serde_json::{Value, json};
use trace_analyze::{HeapReport, Trace, format_bytes, format_ns, heap_report};

use crate::model::{HeapData, TableData, bar, col};

/// Span paths listed per table (largest first); the rest are counted in the caps.
pub(crate) const MAX_HEAP_ROWS: usize = 200;
/// Allocations listed per span path at the peak.
const MAX_PEAK_SIZES: usize = 8;

fn b(v: u64) -> String {
    format_bytes(v as f64)
}

/// The sizes of a span path's allocations at the peak, largest first, equal ones counted.
fn sizes(list: &[trace_analyze::PeakAllocation]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < list.len() && parts.len() < MAX_PEAK_SIZES {
        let bytes = list[i].bytes;
        let same = list[i..].iter().take_while(|a| a.bytes == bytes).count();
        parts.push(match same {
            1 => format!("{} ({bytes} B)", b(bytes)),
            k => format!("{} ({bytes} B) ×{k}", b(bytes)),
        });
        i += same;
    }
    if i < list.len() {
        parts.push(format!("+{} more", list.len() - i));
    }
    parts.join(", ")
}

fn peak_table(h: &HeapReport, caps: &mut Vec<String>) -> TableData {
    let mut t = TableData::new(vec![
        col("span path", "name").explained("the innermost span open when the block was allocated"),
        bar("bytes", "bytes").explained("heap bytes live at the peak"),
        col("allocations", "int"),
        col("sizes", "text").explained("each allocation live at the peak, largest first"),
    ]);
    t.total_rows = h.peak_by_span.len();
    t.empty = "Nothing tracked was live at the peak.".to_string();
    for p in h.peak_by_span.iter().take(MAX_HEAP_ROWS) {
        t.rows.push(vec![
            json!(p.path),
            json!(p.bytes),
            json!(p.allocations.len()),
            json!(sizes(&p.allocations)),
        ]);
    }
    if h.peak_by_span.len() > MAX_HEAP_ROWS {
        caps.push(format!(
            "heap at the peak: the {MAX_HEAP_ROWS} span paths with the most bytes of {}",
            h.peak_by_span.len()
        ));
    }
    t
}

fn spans_table(h: &HeapReport, caps: &mut Vec<String>) -> TableData {
    let mut t = TableData::new(vec![
        col("span path", "name"),
        col("allocations", "int").explained("tracked allocations made in the span path"),
        bar("allocated", "bytes"),
        col("freed", "bytes"),
        col("temporary", "bytes").explained("freed before the span that made them ended"),
        col("outlived", "bytes")
            .explained("still live when the span that made them ended, or never freed"),
        col("at peak", "bytes"),
        col("small", "bytes").explained("allocations below the threshold, counted, not tracked"),
    ]);
    t.total_rows = h.spans.len();
    t.sortable = true;
    t.filter = true;
    t.empty = "No tracked allocation.".to_string();
    for r in h.spans.iter().take(MAX_HEAP_ROWS) {
        t.rows.push(vec![
            json!(r.path),
            json!(r.allocs),
            json!(r.alloc_bytes),
            json!(r.freed_bytes),
            json!(r.temporary_bytes),
            json!(r.activation_bytes),
            json!(r.peak_bytes),
            json!(r.small_bytes),
        ]);
    }
    if h.spans.len() > MAX_HEAP_ROWS {
        caps.push(format!(
            "heap per span path: the {MAX_HEAP_ROWS} with the most bytes allocated of {}",
            h.spans.len()
        ));
    }
    t
}

/// The tracked-heap view of `trace`; `None` without heap lines.
pub(crate) fn heap_data(trace: &Trace, caps: &mut Vec<String>) -> Option<HeapData> {
    let h = heap_report(trace)?;
    let mut stats = vec![
        ("peak".to_string(), b(h.peak_bytes)),
        ("peak at".to_string(), format_ns(h.peak_at_ns as f64)),
        (
            "live allocations at peak".to_string(),
            h.peak_live_allocations.to_string(),
        ),
        (
            "allocations".to_string(),
            format!("{} ({})", h.allocs, b(h.alloc_bytes)),
        ),
        (
            "frees".to_string(),
            format!("{} ({})", h.frees, b(h.freed_bytes)),
        ),
        ("live at end".to_string(), b(h.live_at_end_bytes)),
        (
            "below the threshold".to_string(),
            format!("{} ({})", h.small_allocs, b(h.small_bytes)),
        ),
    ];
    if let Some(t) = h.threshold {
        stats.insert(0, ("threshold".to_string(), b(t)));
    }
    for (what, v) in [
        ("lost by the tracker (figures incomplete)", h.lost),
        ("frees of untracked blocks", h.unmatched_frees),
        ("contradicting lines ignored", h.invalid),
    ] {
        if v > 0 {
            stats.push((what.to_string(), v.to_string()));
        }
    }
    let peak: Value = json!({ "t_ns": h.peak_at_ns, "bytes": h.peak_bytes });
    Some(HeapData {
        bytes_kind: "heap (tracked)",
        note: "Heap bytes the program asked the allocator for, from the tracking allocator \
               (allocations at or above the threshold one by one with their frees, smaller \
               ones counted per span). They are not logical bytes: the two views are never \
               summed. The line is live tracked bytes; the peak is the true one (every \
               tracked allocation and free replayed)."
            .to_string(),
        t_ns: h.timeline.iter().map(|p| p.t_ns).collect(),
        live: h.timeline.iter().map(|p| p.live_bytes).collect(),
        peak,
        stats,
        peak_by_span: peak_table(&h, caps),
        spans: spans_table(&h, caps),
    })
}
