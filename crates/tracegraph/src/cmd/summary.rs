//! `tracegraph summary`: header, health, step times, top ops, memory peak by category, graph
//! stability.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::new_step_cache;
use trace_analyze::{Summary, summarize};
use trace_record::schema::MemoryCategory;

use trace_analyze::format_ns;

use super::{Status, Table, bytesu, load, nsu, print_json, timing_text, write_stdout};

/// Arguments of `tracegraph summary`.
#[derive(clap::Args, Debug)]
pub(crate) struct SummaryArgs {
    /// The trace file (JSON Lines, or zstd-compressed). Several traces, or a directory of
    /// them (its `*.jsonl` and `*.jsonl.zst` files), are the ranks of one distributed run:
    /// then the summary puts them side by side (per-rank step times and memory peaks, the
    /// slowest rank of each step, clocks aligned on the headers' wall-clock starts).
    #[arg(required = true, num_args = 1..)]
    pub(crate) trace: Vec<PathBuf>,
    /// Print JSON (schema `tracegraph.summary/1`, or `tracegraph.ranks/1` for several traces)
    /// instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tracegraph summary`.
pub(crate) fn run(args: &SummaryArgs) -> anyhow::Result<Status> {
    let paths = super::trace_paths(&args.trace)?;
    if paths.len() > 1 {
        return super::ranks::run(&paths, args.json);
    }
    let Some(path) = paths.first() else {
        anyhow::bail!("no trace given");
    };
    let trace = load(path, false)?;
    let cache = new_step_cache();
    let s = summarize(&trace, &cache)?;
    if args.json {
        print_json("summary", &s)?;
    } else {
        // Then the sampled-CPU hints (`hot`'s known-cost rules), when the trace was sampled.
        write_stdout(&(render(&s) + &super::hot::summary_hints(&trace)))?;
    }
    Ok(Status::Ok)
}

/// The summary as text.
pub(crate) fn render(s: &Summary) -> String {
    let mut o = String::new();
    let r = &s.run;
    let _ = writeln!(o, "trace     {}", s.source);
    let _ = writeln!(
        o,
        "run       {} ({}, {}) on {}, schema {} v{}",
        r.entrypoint, r.phase, r.run_id, r.device, r.schema, r.version
    );
    let _ = writeln!(o, "timing    {}", timing_text(s.timing));
    let h = &s.health;
    let _ = writeln!(
        o,
        "health    {}; {} lines, {} events, {} dropped, {} issue(s){}{}",
        h.outcome.describe(),
        h.lines,
        h.events.total(),
        h.dropped,
        h.issue_count,
        match h.events.unknown {
            0 => String::new(),
            n => format!("; {n} line(s) of unknown event type skipped"),
        },
        match h.counts_match_trailer {
            Some(false) => "; trailer counts do not match the events read",
            _ => "",
        }
    );
    for i in &h.issues {
        let _ = writeln!(o, "          {i}");
    }
    let _ = writeln!(
        o,
        "content   {} ops, {} spans, {} steps",
        s.op_count, s.span_count, s.steps.count
    );
    if s.tracing_spans == Some(0) {
        let _ = writeln!(o, "tracing   {}", trace_analyze::TRACING_LAYER_SAW_NO_SPANS);
    }
    let _ = writeln!(o);
    match &s.steps.spread {
        Some(sp) => {
            let _ = writeln!(
                o,
                "steps     {} steps, mean {} ± {}, min {}, p95 {}, max {}",
                s.steps.count,
                format_ns(sp.mean),
                format_ns(sp.stddev),
                nsu(sp.min),
                nsu(s.steps.p95_ns.unwrap_or(sp.max)),
                nsu(sp.max)
            );
        }
        None if s.steps.partial_step.is_none() => {
            let _ = writeln!(o, "steps     none recorded (no step events)");
        }
        None => {}
    }
    if let Some(oh) = &s.overhead {
        let per_step = match (oh.per_step_ns, oh.share_of_steps) {
            (Some(n), Some(f)) => format!("{} per step ({:.1}% of step time)", nsu(n), f * 100.0),
            (Some(n), None) => format!("{} per step", nsu(n)),
            _ => format!("{} in all", nsu(oh.total_ns)),
        };
        let _ = writeln!(
            o,
            "profiler  its own recording took about {per_step} (estimated at finish: each kind of work timed, times how often it ran; a floor)"
        );
    }
    if let Some(k) = s.steps.partial_step {
        let _ = writeln!(
            o,
            "          step {k} left out: the trace ends inside it (incomplete)"
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "top ops by self time ({})", timing_text(s.timing));
    let mut t = Table::new(&["op", ">calls", ">total", ">self", ">mean", ">p95", ">share"]);
    for row in &s.top_ops {
        t.row(vec![
            row.name.clone(),
            row.count.to_string(),
            nsu(row.total_ns),
            nsu(row.self_ns),
            format_ns(row.mean_ns),
            nsu(row.p95_ns),
            row.share_of_step
                .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
        ]);
    }
    if t.is_empty() {
        let _ = writeln!(o, "  (no ops)");
    } else {
        let _ = writeln!(o, "{}", t.render());
    }
    if !s.backward_kernels.is_empty() {
        let kernels: Vec<String> = s
            .backward_kernels
            .iter()
            .map(|k| {
                format!(
                    "{} {:.0}% ({} samples{})",
                    trace_analyze::short_func(&k.name, 60),
                    k.self_share * 100.0,
                    k.self_samples,
                    k.self_est_ns
                        .map_or(String::new(), |n| format!(", ≈{} CPU", nsu(n)))
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "backward  top kernels by sampled CPU (estimates; `tracegraph hot --by phase`): {}",
            kernels.join("; ")
        );
    }
    let _ = writeln!(o);
    match &s.memory {
        None => {
            let _ = writeln!(o, "memory    absent (the trace has no memory events)");
        }
        Some(devs) => {
            let _ = writeln!(
                o,
                "memory peak (logical bytes, shape x dtype size, of the tensors the capture saw)"
            );
            // Categories that are zero on every device are left out of the table.
            let cats: Vec<MemoryCategory> = MemoryCategory::ALL
                .into_iter()
                .filter(|&c| devs.iter().any(|d| d.peak_by_category.get(c) > 0))
                .collect();
            let names: Vec<String> = cats.iter().map(|c| format!(">{}", c.as_str())).collect();
            let mut cols = vec!["device", ">peak"];
            cols.extend(names.iter().map(String::as_str));
            cols.push(">live at end");
            let mut t = Table::new(&cols);
            for d in devs {
                let mut row = vec![d.device.clone(), bytesu(d.peak_bytes)];
                for &c in &cats {
                    row.push(bytesu(d.peak_by_category.get(c)));
                }
                row.push(bytesu(d.end_bytes));
                t.row(row);
            }
            let _ = writeln!(o, "{}", t.render());
            for d in devs {
                if d.possible_leak_bytes > 0 {
                    let _ = writeln!(
                        o,
                        "          {}: {} still live at the end outside parameters and optimizer state (possible leak)",
                        d.device,
                        bytesu(d.possible_leak_bytes)
                    );
                }
                if let Some(p) = &d.physical {
                    let _ = writeln!(
                        o,
                        "          {} physical ({} samples, reported by the device): max used {}, max reserved {}",
                        d.device,
                        p.samples,
                        p.max_used_bytes.map_or("unknown".into(), bytesu),
                        p.max_reserved_bytes.map_or("unknown".into(), bytesu)
                    );
                }
            }
        }
    }
    let _ = writeln!(o);
    let g = &s.graph;
    if g.steps == 0 {
        let _ = writeln!(o, "graph     no steps, no step graphs");
    } else {
        let _ = writeln!(
            o,
            "graph     {} step(s): {}; last fingerprint {}",
            g.steps,
            g.verdict,
            g.last_fingerprint.as_deref().unwrap_or("-")
        );
        // Step times per graph when the steps ran more than one: pooled they mean nothing.
        if g.groups.len() > 1 {
            for gr in &g.groups {
                let t = &gr.step_time;
                let _ = writeln!(
                    o,
                    "          {} {}: {} step(s), step time {} ± {} (min {}, max {})",
                    gr.label,
                    gr.signature,
                    t.count,
                    format_ns(t.mean),
                    format_ns(t.stddev),
                    nsu(t.min),
                    nsu(t.max)
                );
            }
        }
        for c in &g.changed_steps {
            let arrow = match (&c.from, &c.to) {
                (Some(a), Some(b)) => format!(" ({a} → {b})"),
                _ => String::new(),
            };
            let times = match c.times {
                1 => String::new(),
                n => format!(" [{n} times]"),
            };
            match &c.diff {
                Some(d) => {
                    let _ = writeln!(
                        o,
                        "          step {}{arrow} differs from step {} at op #{} ({}): {} -> {}{times}",
                        c.step,
                        d.against_step,
                        d.op_index,
                        d.what,
                        d.before.as_deref().unwrap_or("(none)"),
                        d.after.as_deref().unwrap_or("(none)")
                    );
                }
                None => {
                    let _ = writeln!(o, "          step {}{arrow} changed{times}", c.step);
                }
            }
        }
        let _ = writeln!(
            o,
            "          step analyses: {} computed, {} reused from the cache",
            g.cache.misses, g.cache.hits
        );
    }
    if let Some(gr) = &s.gradients {
        let _ = writeln!(
            o,
            "gradients {} present, {} missing, {} zero, {} non-finite",
            gr.present, gr.missing, gr.zero, gr.non_finite
        );
    } else if s.backward_without_parameters {
        let _ = writeln!(
            o,
            "gradients {}",
            trace_analyze::no_gradient_facts_reason(true)
        );
    }
    o.trim_end().to_string()
}
