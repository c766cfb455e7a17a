//! The profile_llama example run and asserted on through the analyses and the CLI.
//!
//! A tiny random-weight candle-transformers Llama: prefill, 20 decode steps with the KV cache,
//! 4 training steps.
//!
//! Its own test binary: the example installs a global `tracing` subscriber, once per process.
//! Candle comes through the `demo` feature's dependencies (on by default).

#![cfg(feature = "demo")]

#[path = "../../../trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

#[path = "../common/steps.rs"]
mod steps;

#[path = "../common/cli.rs"]
mod cli;
use cli::cli;

use std::path::Path;

use trace_analyze::{
    GradientVerdict, LoadOptions, gradient_report, graph_report, load_path, memory_report,
    new_step_cache, span_tree,
};
use trace_record::schema::MemoryCategory;
use trace_record::{ReadOptions, TraceReader};

fn check(path: &Path) {
    let trace = load_path(path, LoadOptions { strict: true }).unwrap();
    let p = path.to_str().unwrap();

    // Steps: step 0 (the prefill) is a step; no phantom step after the last `step()`.
    let steps = profile_llama::DECODE + 1 + profile_llama::TRAIN_STEPS;
    assert_eq!(trace.steps.len(), steps, "{:?}", trace.steps);
    assert_eq!(trace.steps[0].index, 0);
    for (i, s) in trace.steps.iter().enumerate() {
        assert_eq!(s.index, i as u64);
        assert_eq!(
            trace.step_ops(i).len(),
            1,
            "step {i} has one llama.forward op"
        );
        assert!(s.duration_ns() > 0);
    }

    // Every command and export numbers them alike: the Chrome steps track has a bar for the
    // prefill (step 0), `export --step 0` works, and nothing is drawn after the last step.
    let agreed = steps::assert_steps_agree(path);
    assert_eq!(agreed, (0..steps as u64).collect::<Vec<_>>());

    // Graph identity sees shapes: prefill [1,16] and decode [1,1] differ, and graph says how.
    let graphs = graph_report(&trace, &new_step_cache()).unwrap();
    let fp = |i: usize| graphs.steps[i].fingerprint.clone();
    assert_ne!(fp(0), fp(1), "prefill and decode steps must differ");
    assert_eq!(fp(1), fp(2), "decode steps share a graph");
    let diff = graphs.steps[1].diff.as_ref().unwrap();
    assert_eq!(diff.what, "input 0 shape [1, 16] → [1, 1]");

    // The span tree holds block / attn / mlp per layer with distinct names, under the op.
    let tree = span_tree(&trace);
    let paths: Vec<&str> = tree.nodes.iter().map(|n| n.path.as_str()).collect();
    for layer in 0..2 {
        // A span alone among its siblings has no `#0`; numbered siblings keep theirs.
        for part in ["attn", "mlp"] {
            let want = format!("llama.forward/block#{layer}/{part}");
            assert!(
                paths.contains(&want.as_str()),
                "{want} missing from {paths:?}"
            );
        }
        for k in 0..4 {
            let want = format!("llama.forward/block#{layer}/attn/linear#{k}");
            assert!(
                paths.contains(&want.as_str()),
                "{want} missing from {paths:?}"
            );
        }
    }
    assert!(
        !paths.iter().any(|p| p.starts_with("block")),
        "no model span at the root"
    );

    // Memory: parameters, the KV cache and the autograd graph's activations, no false leak.
    let mem = memory_report(&trace).unwrap();
    let cpu = &mem.devices[0];
    assert_eq!(cpu.possible_leak_count, 0, "{:?}", cpu.possible_leaks);
    assert_eq!(cpu.unmatched_frees, 0);
    assert!(cpu.peak_by_category.parameter > 1_000_000);
    let kinds = |cat: MemoryCategory| {
        trace
            .memory
            .iter()
            .filter(move |m| m.alloc && m.category == cat)
    };
    assert!(
        kinds(MemoryCategory::Other).count() > profile_llama::DECODE,
        "KV cache per step"
    );
    assert!(!trace.autograd.is_empty(), "autograd tensors recorded");
    let autograd_alloc = trace.memory.iter().any(|m| {
        m.alloc
            && m.category == MemoryCategory::Activation
            && m.tensor
                .and_then(|t| trace.tensors.get(&t))
                .and_then(|i| i.label)
                .is_some_and(|l| trace.str(l) == trace_analyze::AUTOGRAD_LABEL)
    });
    assert!(autograd_alloc, "autograd activations allocated");
    assert!(!trace.physical.is_empty(), "process RSS sampled");

    // Gradients: every parameter has facts in each training step; the never-trained ones lead.
    let grads = gradient_report(&trace);
    assert_eq!(grads.steps.len(), profile_llama::TRAIN_STEPS);
    assert!(
        grads
            .params
            .iter()
            .any(|g| g.param == "lm_head.weight" && g.verdict == GradientVerdict::Ok)
    );
    assert_eq!(grads.params[0].verdict, GradientVerdict::Never);
    assert_eq!(grads.autograd.len(), profile_llama::TRAIN_STEPS);

    // The folded export never sums to more than the recorded wall time of the steps.
    let file = std::fs::File::open(path).unwrap();
    let mut reader =
        TraceReader::new(std::io::BufReader::new(file), ReadOptions::default()).unwrap();
    let folded = trace_export::folded_stacks(&mut reader, None).unwrap();
    let wall: u64 = trace
        .steps
        .iter()
        .map(trace_analyze::Step::duration_ns)
        .sum();
    assert!(
        folded.total_self_ns <= wall,
        "{} > {wall}",
        folded.total_self_ns
    );

    // The forward op is one region with its span: spans and ops agree on its total and its
    // self time (the time its child spans leave), the folded stacks give it the same self
    // time and, summed over its stacks, the same total, and the Chrome export draws it once
    // with nothing adjusted.
    let forward = tree.node("llama.forward").expect("the forward op's span");
    let ops = trace_analyze::op_table(&trace, &trace_analyze::OpTableOptions::default());
    let op = ops
        .rows
        .iter()
        .find(|r| r.name == "llama.forward")
        .expect("the forward op's row");
    assert_eq!((op.count, op.total_ns), (forward.count, forward.total_ns));
    assert_eq!(op.self_ns, forward.self_ns);
    let at = tree.nodes.iter().position(|m| m.path == "llama.forward");
    let children: u64 = tree
        .nodes
        .iter()
        .filter(|n| n.parent == at)
        .map(|n| n.total_ns)
        .sum();
    assert_eq!(forward.self_ns, forward.total_ns - children);
    assert!(forward.self_ns > 0 && forward.self_ns < forward.total_ns);
    assert_eq!(folded.adjustments.total(), 0, "{:?}", folded.adjustments);
    let weight = |prefix: &str| -> u64 {
        folded
            .lines
            .iter()
            .filter(|(s, _)| s == prefix || s.starts_with(&format!("{prefix};")))
            .map(|(_, w)| w)
            .sum()
    };
    let own: u64 = folded
        .lines
        .iter()
        .filter(|(s, _)| s == "llama.forward")
        .map(|(_, w)| w)
        .sum();
    assert_eq!(own, op.self_ns);
    assert_eq!(weight("llama.forward"), op.total_ns);
    let file = std::fs::File::open(path).unwrap();
    let mut reader =
        TraceReader::new(std::io::BufReader::new(file), ReadOptions::default()).unwrap();
    let mut json = Vec::new();
    let summary = trace_export::write_chrome(
        &mut reader,
        &mut json,
        &trace_export::ChromeOptions::default(),
    )
    .unwrap();
    assert_eq!(summary.adjustments.total(), 0, "{:?}", summary.adjustments);
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let chrome = testkit::check_chrome(&v);
    assert!(chrome.failures.is_empty(), "{:?}", chrome.failures);
    let drawn: Vec<_> = chrome
        .complete
        .iter()
        .filter(|x| x.name == "llama.forward")
        .collect();
    assert_eq!(drawn.len() as u64, op.count, "drawn once per call");
    assert!(
        drawn
            .iter()
            .all(|x| x.cat == "span,op" && x.args["dtype"] == "f32")
    );
    assert_eq!(chrome.op_totals.get("llama.forward"), Some(&op.total_ns));

    // `validate --strict` passes; the other commands run.
    let (code, out) = cli(&["validate", "--strict", p]);
    assert_eq!(code, 0, "{out}");
    for cmd in ["summary", "spans", "memory", "graph", "gradients"] {
        let (code, out) = cli(&[cmd, p]);
        assert_eq!(code, 0, "{cmd}: {out}");
        if cmd == "summary" {
            assert!(!out.contains("saw no spans"), "the layer saw spans: {out}");
        }
        if std::env::var_os("PROFILE_LLAMA_SHOW").is_some() {
            println!("$ tracegraph {cmd}\n{out}");
        }
    }
}

#[test]
fn profile_llama_example_trace_is_right() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama.jsonl");
    profile_llama::run(&path).unwrap();
    check(&path);
}
