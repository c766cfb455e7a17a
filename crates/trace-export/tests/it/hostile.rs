//! Hostile traces export in linear size.
//!
//! 20,000-deep nesting and 40,000 never-ended root spans, folded and Chrome.

use trace_export::{DEEPER_FRAMES, MAX_FOLDED_FRAMES, folded_stacks};
use trace_record::{ReadOptions, TraceReader};

use crate::common::{check_structure, chrome_with};

fn folded(trace: &[u8]) -> trace_export::FoldedStacks {
    let mut reader = TraceReader::new(trace, ReadOptions::default()).unwrap();
    folded_stacks(&mut reader, None).unwrap()
}

#[test]
fn deep_nesting_folds_into_capped_stacks_that_keep_every_nanosecond() {
    let depth = 20_000u64;
    let trace = testkit::deep_nesting(depth);
    let f = folded(&trace);
    // One line per depth up to the cap, one `[deeper frames]` line, one op line at most.
    assert!(
        f.lines.len() <= MAX_FOLDED_FRAMES as usize + 1,
        "{}",
        f.lines.len()
    );
    let bytes: usize = f.lines.iter().map(|(s, _)| s.len()).sum();
    assert!(bytes < 2_000_000, "{bytes} bytes of stacks");
    for (s, _) in &f.lines {
        assert!(s.split(';').count() <= MAX_FOLDED_FRAMES as usize, "{s}");
    }
    let deeper: Vec<_> = f
        .lines
        .iter()
        .filter(|(s, _)| s.ends_with(DEEPER_FRAMES))
        .collect();
    assert_eq!(deeper.len(), 1);
    assert!(f.truncated > 0);
    // Self times still add up to the root span's duration: the outermost span runs from
    // ts 1 to ts depth + 1 + 10 + (depth - 1).
    assert_eq!(f.total_self_ns, (depth + 1 + 10 + depth - 1) - 1);
}

#[test]
fn deep_nesting_chrome_export_has_bounded_paths() {
    let trace = testkit::deep_nesting(20_000);
    let (v, summary) = chrome_with(&trace, None, trace_export::ArgsMode::Compact);
    assert_eq!(summary.spans, 20_000);
    let text = v.to_string();
    assert!(
        text.len() < 20_000 * 1_000,
        "{} bytes for 20,000 spans",
        text.len()
    );
    let x = check_structure(&v);
    assert!(x.len() >= 20_000);
    // A deep span's path is elided in the middle.
    assert!(text.contains(" more…"), "no elided path");
}

#[test]
fn never_ended_root_spans_export_in_linear_size() {
    let n = 40_000u64;
    let trace = testkit::unended_roots(n);
    let f = folded(&trace);
    let bytes: usize = f.lines.iter().map(|(s, _)| s.len()).sum();
    assert!(bytes < 5_000_000, "{bytes} bytes of stacks");
    assert_eq!(f.adjustments.spans_left_open, n);
    let (v, summary) = chrome_with(&trace, None, trace_export::ArgsMode::Compact);
    assert_eq!(summary.spans, n);
    let text = v.to_string();
    assert!(text.len() < (n as usize) * 1_000, "{} bytes", text.len());
    check_structure(&v);
}

#[test]
fn an_empty_name_is_a_named_frame_not_an_empty_stack() {
    let trace = testkit::hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"","kind":"function","thread":1,"ts":0}"#,
        r#"{"type":"op","span":1,"name":"","in":[],"out":[],"shape":[],"dtype":"f32","ts":1,"dur":5,"out_b":4}"#,
        r#"{"type":"span_end","id":1,"ts":30}"#,
    ]);
    let f = folded(&trace);
    let stacks: Vec<&str> = f.lines.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(stacks, ["[empty name]", "[empty name];[empty name]"]);
}
