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
        // Flight-recorder dumps (each has a `dump` line) are listed; other traces together
        // are the ranks of one run.
        if let Some(dumps) = dump_records(&paths)? {
            if args.json {
                print_json("dumps", &DumpList { dumps })?;
            } else {
                write_stdout(&render_dumps(&dumps))?;
            }
            return Ok(Status::Ok);
        }
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

/// The dumps of `summary DIR` (JSON schema `tracegraph.dumps/1`).
#[derive(serde::Serialize)]
struct DumpList {
    /// Each dump's path and `dump` line, in path order.
    dumps: Vec<DumpEntry>,
}

/// One dump of a [`DumpList`].
#[derive(serde::Serialize)]
struct DumpEntry {
    path: String,
    #[serde(flatten)]
    record: trace_record::schema::DumpRecord,
}

/// The `dump` line of every trace in `paths` when every one is a flight-recorder dump (read
/// up to its first event only); `None` when any is not.
fn dump_records(paths: &[PathBuf]) -> anyhow::Result<Option<Vec<DumpEntry>>> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let mut reader = trace_record::TraceReader::open(p, trace_record::ReadOptions::default())
            .map_err(|error| trace_analyze::AnalyzeError::Read {
            file: p.display().to_string(),
            error,
        })?;
        // The dump line is line 2: read with the first event after it.
        let _ = reader.next_event();
        let Some(record) = reader.dump().cloned() else {
            return Ok(None);
        };
        out.push(DumpEntry {
            path: p.display().to_string(),
            record,
        });
    }
    Ok(Some(out))
}

/// The dumps as a table: trigger, triggering step, steps held, path.
fn render_dumps(dumps: &[DumpEntry]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} flight-recorder dump(s)", dumps.len());
    let _ = writeln!(o);
    let mut t = Table::new(&[">#", "trigger", ">at step", ">steps", "evidence", "dump"]);
    for d in dumps {
        let r = &d.record;
        let e = &r.evidence;
        let evidence = match (e.step_ns, e.median_ns) {
            (Some(s), Some(m)) => format!("{} vs median {}", nsu(s), nsu(m)),
            _ => e
                .value
                .clone()
                .or_else(|| e.param.clone())
                .or_else(|| e.reason.clone())
                .or_else(|| e.path.clone())
                .unwrap_or_default(),
        };
        t.row(vec![
            r.seq.to_string(),
            r.trigger.to_string(),
            r.trigger_step.to_string(),
            format!("{}–{}", r.first_step, r.last_step),
            evidence,
            d.path.clone(),
        ]);
    }
    o.push_str(&t.render());
    o
}

/// The `dump` lines of a flight-recorder dump: trigger, evidence, steps, and the triggering
/// step beside the median of the dump's other steps.
fn render_dump(o: &mut String, s: &Summary, d: &trace_record::schema::DumpRecord) {
    let e = &d.evidence;
    let mut why = Vec::new();
    if let (Some(step), Some(median)) = (e.step_ns, e.median_ns) {
        why.push(format!(
            "step took {} against a running median of {}{}",
            nsu(step),
            nsu(median),
            match (e.factor, e.window) {
                (Some(f), Some(w)) => format!(" (fires above {f}x the last {w} steps)"),
                _ => String::new(),
            }
        ));
    }
    if let Some(v) = &e.value {
        why.push(format!("loss {v}"));
    }
    if let Some(p) = &e.param {
        why.push(format!("gradient of {p} non-finite"));
    }
    if let Some(r) = &e.reason {
        why.push(format!("\"{r}\""));
    }
    if let Some(p) = &e.path {
        why.push(format!("trigger file {p}"));
    }
    let _ = writeln!(
        o,
        "dump      #{} by {} at step {}{}; steps {}–{}",
        d.seq,
        d.trigger,
        d.trigger_step,
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join("; "))
        },
        d.first_step,
        d.last_step
    );
    match (s.dump_trigger_step_ns, s.dump_median_other_ns) {
        (Some(t), Some(m)) => {
            let _ = writeln!(
                o,
                "          step {} took {} against a median of {} over the dump's other steps{}",
                d.trigger_step,
                nsu(t),
                nsu(m),
                if s.dump_slowest_step == Some(d.trigger_step) {
                    "; the slowest step of the dump"
                } else {
                    ""
                }
            );
        }
        (Some(t), None) => {
            let _ = writeln!(o, "          step {} took {}", d.trigger_step, nsu(t));
        }
        _ => {}
    }
    if d.suppressed > 0 || d.cut_lines > 0 {
        let _ = writeln!(
            o,
            "          {} trigger(s) refused before it by the recorder's limits; {} line(s) of older or unfinished spans, allocations and accounts cut to make it a trace of its own",
            d.suppressed, d.cut_lines
        );
    }
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
    if let Some(d) = &s.dump {
        render_dump(&mut o, s, d);
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
                        "          {} physical ({} samples, reported by the device): max used {}, max reserved {}; includes the profiler's own memory (its share is not recorded: see `tracegraph memory`)",
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
            "graph     {} step(s): {}{}",
            g.steps,
            g.verdict,
            // No fingerprint when the last step had no ops: the empty graph's names nothing.
            g.last_fingerprint
                .as_deref()
                .map_or(String::new(), |f| format!("; last fingerprint {f}"))
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
