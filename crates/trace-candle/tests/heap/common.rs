//! What the heap test binaries share: turns, captures, span paths, replays, the truth check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use trace_candle::Capture;
use trace_record::schema::{AllocKind, Event};
use trace_record::{ParsedTrace, Run, TraceSession};

/// One tracker per process: the tests take turns.
static TURN: Mutex<()> = Mutex::new(());

pub(crate) fn turn() -> MutexGuard<'static, ()> {
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn new_capture(run: Run) -> (Capture, trace_record::MemorySink) {
    let (session, sink) = TraceSession::in_memory(run);
    (Capture::new(Arc::new(session)), sink)
}

/// Span id → its path of names from the root (`#k` suffixes kept).
pub(crate) fn span_paths(trace: &ParsedTrace) -> HashMap<u64, String> {
    let mut paths: HashMap<u64, String> = HashMap::new();
    for e in &trace.events {
        if let Event::SpanStart(s) = &e.event {
            let path = match s.parent.and_then(|p| paths.get(&p)) {
                Some(p) => format!("{p}/{}", s.name),
                None => s.name.clone(),
            };
            paths.insert(s.id, path);
        }
    }
    paths
}

/// Replays the tracked allocations and frees in file order: the peak's live set as
/// (bytes, span path) per allocation, and the peak in bytes.
pub(crate) fn live_at_peak(trace: &ParsedTrace) -> (u64, Vec<(u64, String)>) {
    let paths = span_paths(trace);
    let mut live: HashMap<u64, (u64, String)> = HashMap::new();
    let (mut now, mut peak) = (0u64, 0u64);
    let mut at_peak = Vec::new();
    for e in &trace.events {
        match &e.event {
            Event::HeapAlloc(a) => {
                let path = a
                    .span
                    .and_then(|s| paths.get(&s).cloned())
                    .unwrap_or_default();
                live.insert(a.id, (a.bytes, path));
                now += a.bytes;
                if now > peak {
                    peak = now;
                    at_peak = live.values().cloned().collect();
                }
            }
            Event::HeapFree(f) => {
                let (bytes, _) = live.remove(&f.id).expect("a free of a live allocation");
                now -= bytes;
            }
            _ => {}
        }
    }
    (peak, at_peak)
}

/// The most logical bytes live at once (the `memory` lines' replay): what the capture saw.
pub(crate) fn logical_peak(trace: &ParsedTrace) -> u64 {
    let (mut live, mut peak) = (0i128, 0i128);
    for e in &trace.events {
        if let Event::Memory(m) = &e.event {
            match m.kind {
                AllocKind::Alloc => live += i128::from(m.bytes),
                AllocKind::Free => live -= i128::from(m.bytes),
            }
            peak = peak.max(live);
        }
    }
    u64::try_from(peak).unwrap_or(0)
}

/// The process's resident high-water mark (Linux `VmHWM`), bytes.
pub(crate) fn resident_peak() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The truth check of the three views: what the capture declared (logical) is at most what
/// the allocator handed out for it (tracked), which is at most what was resident.
pub(crate) fn assert_between(what: &str, trace: &ParsedTrace, tracked: u64) {
    let logical = logical_peak(trace);
    assert!(logical > 0, "{what}: no logical bytes");
    assert!(
        logical <= tracked,
        "{what}: logical {logical} > tracked {tracked}"
    );
    if let Some(rss) = resident_peak() {
        assert!(
            tracked <= rss,
            "{what}: tracked {tracked} > resident peak {rss}"
        );
    }
}
