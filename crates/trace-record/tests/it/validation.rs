//! Structural validation: every issue kind, with its line.

use trace_record::{Issue, IssueKind, read_trace_bytes};

use crate::common::{issues, trace_text};

fn check(lines: &[&str], expected: &[(u64, IssueKind)]) {
    let trace = read_trace_bytes(trace_text(lines).as_bytes()).unwrap();
    let got = issues(&trace);
    let want: Vec<Issue> = expected
        .iter()
        .map(|(line, kind)| Issue {
            line: *line,
            kind: kind.clone(),
        })
        .collect();
    assert_eq!(got, want, "{lines:#?}");
    assert_eq!(trace_record::validate(&trace), want);
}

fn start(id: u64, parent: Option<u64>, ts: u64) -> String {
    match parent {
        Some(p) => format!(
            r#"{{"type":"span_start","id":{id},"parent":{p},"name":"s","kind":"function","thread":1,"ts":{ts}}}"#
        ),
        None => format!(
            r#"{{"type":"span_start","id":{id},"name":"s","kind":"function","thread":1,"ts":{ts}}}"#
        ),
    }
}

fn end(id: u64, ts: u64) -> String {
    format!(r#"{{"type":"span_end","id":{id},"ts":{ts}}}"#)
}

fn mem(action: &str, storage: u64, span: Option<u64>) -> String {
    let span = span.map(|s| format!(r#","span":{s}"#)).unwrap_or_default();
    format!(
        r#"{{"type":"memory","action":"{action}","storage":{storage},"tensor":1,"bytes":8,"cat":"activation"{span},"ts":5}}"#
    )
}

#[test]
fn a_well_formed_trace_has_no_issues() {
    let lines = [
        start(1, None, 0),
        start(2, Some(1), 1),
        mem("alloc", 7, Some(2)),
        mem("free", 7, Some(2)),
        mem("alloc", 7, None),
        end(2, 9),
        end(1, 9),
        mem("free", 7, None),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    check(&refs, &[]);
}

#[test]
fn span_issues() {
    let (s1, s1b, e1, e1b) = (start(1, None, 0), start(1, None, 3), end(1, 10), end(1, 11));
    check(
        &[&s1, &s1b, &e1],
        &[(
            3,
            IssueKind::DuplicateSpan {
                id: 1,
                first_line: 2,
            },
        )],
    );
    check(&[&e1], &[(2, IssueKind::SpanEndWithoutStart { id: 1 })]);
    check(
        &[&s1, &e1, &e1b],
        &[(4, IssueKind::DuplicateSpanEnd { id: 1 })],
    );
    check(&[&s1], &[(2, IssueKind::SpanLeftOpen { id: 1 })]);
    let (late, early_end) = (start(5, None, 20), end(5, 10));
    check(
        &[&late, &early_end],
        &[(3, IssueKind::SpanEndsBeforeStart { id: 5 })],
    );
    // Child ends after its parent.
    let (p, c, pe, ce) = (
        start(1, None, 0),
        start(2, Some(1), 2),
        end(1, 5),
        end(2, 6),
    );
    check(
        &[&p, &c, &pe, &ce],
        &[(5, IssueKind::ChildOutsideParent { id: 2, parent: 1 })],
    );
    // Child starts before its parent.
    let (p, c, ce, pe) = (
        start(1, None, 4),
        start(2, Some(1), 2),
        end(2, 5),
        end(1, 6),
    );
    check(
        &[&p, &c, &ce, &pe],
        &[(4, IssueKind::ChildOutsideParent { id: 2, parent: 1 })],
    );
    // Unknown parent.
    let (c, ce) = (start(2, Some(99), 2), end(2, 5));
    check(&[&c, &ce], &[(2, IssueKind::UnknownSpan { id: 99 })]);
}

#[test]
fn memory_issues() {
    let (a, f, a2) = (
        mem("alloc", 7, None),
        mem("free", 7, None),
        mem("alloc", 7, None),
    );
    check(&[&f], &[(2, IssueKind::FreeWithoutAlloc { storage: 7 })]);
    check(
        &[&a, &f, &f],
        &[(4, IssueKind::FreeWithoutAlloc { storage: 7 })],
    );
    check(
        &[&a, &a2],
        &[(
            3,
            IssueKind::DuplicateAlloc {
                storage: 7,
                first_line: 2,
            },
        )],
    );
}

#[test]
fn events_referring_to_unknown_spans() {
    let op = r#"{"type":"op","span":42,"name":"a","in":[],"out":[],"shape":[],"dtype":"f32","ts":0,"dur":0}"#;
    let marker = r#"{"type":"marker","name":"m","span":43,"ts":0}"#;
    let tensor = r#"{"type":"tensor","id":1,"shape":[],"dtype":"f32","grad":false,"bytes":1,"cat":"input","span":44}"#;
    let m = mem("alloc", 1, Some(45));
    check(
        &[op, marker, tensor, &m],
        &[
            (2, IssueKind::UnknownSpan { id: 42 }),
            (3, IssueKind::UnknownSpan { id: 43 }),
            (4, IssueKind::UnknownSpan { id: 44 }),
            (5, IssueKind::UnknownSpan { id: 45 }),
        ],
    );
    // A reference before the span's start line (another thread's block) is fine.
    let (s, e) = (start(42, None, 0), end(42, 1));
    check(&[op, &s, &e], &[]);
}

#[test]
fn validate_file_streams_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.jsonl");
    let (s, m) = (start(1, None, 0), mem("free", 3, Some(1)));
    std::fs::write(&path, trace_text(&[&s, &m])).unwrap();
    let v = trace_record::validate_file(&path, Default::default()).unwrap();
    assert!(v.incomplete);
    assert_eq!(v.counts.span_start, 1);
    assert_eq!(v.counts.memory, 1);
    assert_eq!(v.issues.len(), 2);
    assert_eq!(v.issues[0].to_string(), "line 2: span 1 never ended");
    assert_eq!(
        v.issues[1].to_string(),
        "line 3: free of storage 3 that is not allocated"
    );
}

/// 250,000 spans and allocations with ids `i << 40` (structure in the high bits only)
/// validate correctly; the id maps' hasher spreading such ids over buckets is checked in
/// `validate.rs`'s unit tests (a multiplicative hasher made this quadratic).
#[test]
fn structured_ids_validate() {
    use trace_record::Validator;
    use trace_record::schema::{
        AllocKind, Event, MemoryCategory, MemoryEvent, SpanEnd, SpanKind, SpanStart,
    };
    let n = 250_000u64;
    let mut v = Validator::new();
    let mut line = 1;
    let mut check = |v: &mut Validator, e: Event| {
        line += 1;
        v.check(line, &e);
        line
    };
    let memory = |kind, i: u64| {
        Event::Memory(MemoryEvent {
            kind,
            storage: i << 40,
            tensor: i,
            bytes: 4,
            device: "cpu".into(),
            category: MemoryCategory::Activation,
            span: Some(i << 40),
            ts: 2 * i,
        })
    };
    for i in 0..n {
        let id = i << 40;
        check(
            &mut v,
            Event::SpanStart(SpanStart {
                id,
                parent: None,
                name: "s".into(),
                kind: SpanKind::Function,
                step: None,
                thread: 1,
                ts: 2 * i,
            }),
        );
        check(&mut v, memory(AllocKind::Alloc, i));
        check(&mut v, Event::SpanEnd(SpanEnd { id, ts: 2 * i + 1 }));
    }
    // Free every other allocation; then one free too many and one duplicate allocation.
    for i in (0..n).step_by(2) {
        check(&mut v, memory(AllocKind::Free, i));
    }
    let double_free = check(&mut v, memory(AllocKind::Free, 0));
    let double_alloc = check(&mut v, memory(AllocKind::Alloc, 1));
    assert_eq!(v.events(), 3 * n + n / 2 + 2);
    assert_eq!(
        v.finish(),
        [
            Issue {
                line: double_free,
                kind: IssueKind::FreeWithoutAlloc { storage: 0 },
            },
            Issue {
                line: double_alloc,
                kind: IssueKind::DuplicateAlloc {
                    storage: 1 << 40,
                    first_line: 6,
                },
            },
        ]
    );
}

#[test]
fn issues_display_and_serialize_with_their_message() {
    let issue = Issue {
        line: 7,
        kind: IssueKind::SpanLeftOpen { id: 3 },
    };
    assert_eq!(issue.kind.to_string(), "span 3 never ended");
    assert_eq!(issue.to_string(), "line 7: span 3 never ended");
    assert_eq!(
        serde_json::to_string(&issue).unwrap(),
        r#"{"line":7,"message":"span 3 never ended"}"#
    );
}

fn heap_alloc(id: u64, span: Option<u64>, ts: u64) -> String {
    let span = span.map(|s| format!(r#","span":{s}"#)).unwrap_or_default();
    format!(r#"{{"type":"heap_alloc","id":{id},"bytes":8192,"thread":1,"ts":{ts}{span}}}"#)
}

fn heap_free(id: u64, ts: u64) -> String {
    format!(r#"{{"type":"heap_free","id":{id},"ts":{ts}}}"#)
}

#[test]
fn heap_issues() {
    let lines = [
        start(1, None, 0),
        heap_alloc(1, Some(1), 2),
        heap_free(1, 3),
        // Line 5: freed again.
        heap_free(1, 4),
        // Line 6: never allocated.
        heap_free(9, 4),
        // Line 7: an id allocated before, though freed since.
        heap_alloc(1, None, 5),
        heap_alloc(2, None, 6),
        // Line 9: a second allocation of a live id.
        heap_alloc(2, None, 7),
        // Line 10: freed before it was allocated.
        heap_free(2, 1),
        // Line 11: a span that never started.
        heap_alloc(3, Some(77), 8),
        r#"{"type":"heap_small","step":0,"span":78,"count":1,"bytes":8}"#.to_string(),
        r#"{"type":"heap_account","step":0,"threshold":4096,"lost":0,"unmatched_frees":0,"ts":0,"dur":9}"#.to_string(),
        end(1, 9),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    check(
        &refs,
        &[
            (
                5,
                IssueKind::HeapDoubleFree {
                    id: 1,
                    first_line: 4,
                },
            ),
            (6, IssueKind::HeapFreeWithoutAlloc { id: 9 }),
            (
                7,
                IssueKind::DuplicateHeapAlloc {
                    id: 1,
                    first_line: 3,
                },
            ),
            (
                9,
                IssueKind::DuplicateHeapAlloc {
                    id: 2,
                    first_line: 8,
                },
            ),
            (10, IssueKind::HeapFreeBeforeAlloc { id: 2 }),
            (11, IssueKind::UnknownSpan { id: 77 }),
            (12, IssueKind::UnknownSpan { id: 78 }),
        ],
    );
    assert_eq!(
        IssueKind::HeapDoubleFree {
            id: 1,
            first_line: 4
        }
        .to_string(),
        "heap allocation 1 freed twice (first at line 4)"
    );
}
