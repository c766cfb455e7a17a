//! A run killed before its sampler stopped keeps raw stacks and the module map; its stacks
//! are symbolized at read time from the binaries on disk and give the same `hot` and
//! `ops --sampled` tables, and the same folded-samples export, as the stacks the sampler
//! resolved at finish.
//!
//! The recording (the tiny Llama with the sampler on) runs in a child process of this binary;
//! the "killed" trace is that trace cut where the sampler began writing its resolved `frame`
//! and `stack` lines, exactly what a SIGKILL at that moment leaves.

use std::path::Path;
use std::process::Command;

use trace_analyze::{
    HotBy, HotOptions, LoadOptions, SampledOpOptions, hot_report, load_path, sampled_op_table,
};

#[test]
fn stacks_resolved_at_read_time_give_the_tables_resolved_at_finish() {
    if crate::in_llama_child() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.jsonl");
    crate::record_sampled_llama(
        module_path!(),
        "stacks_resolved_at_read_time_give_the_tables_resolved_at_finish",
        &whole,
    );

    // Cut before the first resolved `frame` or `stack` line: every `samples`, `module` and
    // `raw_stack` line before it is kept, as a kill there would keep them.
    let text = std::fs::read_to_string(&whole).unwrap();
    let cut = text
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| {
            let rest = &text[i..];
            rest.starts_with(r#"{"type":"frame""#) || rest.starts_with(r#"{"type":"stack""#)
        })
        .expect("the sampler wrote resolved stacks at finish");
    assert!(
        text[..cut].contains(r#""type":"raw_stack""#),
        "raw stacks precede them"
    );
    let killed = dir.path().join("killed.jsonl");
    std::fs::write(&killed, &text[..cut]).unwrap();

    let a = load_path(&whole, LoadOptions { strict: true }).unwrap();
    let b = load_path(&killed, LoadOptions { strict: false }).unwrap();
    assert!(a.sampled.read_time.is_none());
    let rt = b
        .sampled
        .read_time
        .as_ref()
        .expect("symbolized at read time");
    assert!(rt.stacks > 0);
    assert!(rt.unresolved.is_empty(), "{}", rt.note());
    assert!(
        a.sampled.samples.iter().map(|r| r.n).sum::<u64>() > 0,
        "samples were taken"
    );

    for by in [HotBy::Function, HotBy::Crate, HotBy::Phase, HotBy::Span] {
        let opts = HotOptions {
            by,
            ..HotOptions::default()
        };
        let (ha, hb) = (hot_report(&a, &opts), hot_report(&b, &opts));
        let rows = |h: &trace_analyze::HotReport| -> Vec<String> {
            h.rows
                .iter()
                .map(|r| serde_json::to_string(r).unwrap())
                .collect()
        };
        let (ra, rb) = (rows(&ha), rows(&hb));
        let only_a: Vec<&String> = ra.iter().filter(|r| !rb.contains(r)).take(4).collect();
        let only_b: Vec<&String> = rb.iter().filter(|r| !ra.contains(r)).take(4).collect();
        assert!(
            ra == rb,
            "hot --by {by:?}: at finish only {only_a:#?}\nat read time only {only_b:#?}"
        );
        assert_eq!(
            (ha.samples, ha.waiting, ha.profiler),
            (hb.samples, hb.waiting, hb.profiler)
        );
    }
    let opts = SampledOpOptions::default();
    assert_eq!(
        serde_json::to_value(sampled_op_table(&a, &opts)).unwrap(),
        serde_json::to_value(sampled_op_table(&b, &opts)).unwrap(),
        "ops --sampled"
    );

    // `export --format folded-samples` (which streams the trace) resolves them too: the same
    // lines, the same waiting and profiler marks, and its note says it symbolized them.
    let (fa, note_a) = folded_samples(&whole, &dir.path().join("whole.folded"));
    let (fb, note_b) = folded_samples(&killed, &dir.path().join("killed.folded"));
    assert!(!fa.is_empty());
    assert!(!fa.contains("[unknown stack]"), "{fa}");
    assert_eq!(
        fa, fb,
        "folded-samples: resolved at finish, then at read time"
    );
    assert!(!note_a.contains("symbolized at read time"), "{note_a}");
    assert!(note_b.contains("symbolized at read time"), "{note_b}");

    // Moved to a machine without the binary: frames are module+offset, and the note says so.
    let moved = text[..cut].replace(
        &format!(r#""path":"{}""#, std::env::current_exe().unwrap().display()),
        r#""path":"/nonexistent/tracegraph-test-binary""#,
    );
    let gone = dir.path().join("gone.jsonl");
    std::fs::write(&gone, moved).unwrap();
    let c = load_path(&gone, LoadOptions { strict: false }).unwrap();
    let rt = c.sampled.read_time.as_ref().unwrap();
    assert!(
        rt.unresolved
            .iter()
            .any(|u| u.path == "/nonexistent/tracegraph-test-binary" && u.reason == "missing"),
        "{}",
        rt.note()
    );
    assert!(rt.note().contains("module+offset"), "{}", rt.note());
}

/// `tracegraph export --format folded-samples TRACE -o OUT`: the folded lines and stderr.
fn folded_samples(trace: &Path, out: &Path) -> (String, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(["export", "--format", "folded-samples"])
        .arg(trace)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    (
        std::fs::read_to_string(out).unwrap(),
        String::from_utf8(run.stderr).unwrap(),
    )
}
