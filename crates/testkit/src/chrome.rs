//! The structural checker of Chrome Trace Event JSON (export tests, `xtask browser-check`).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use trace_record::schema::MemoryCategory;

/// One complete (`"ph":"X"`) event, times in integer nanoseconds.
#[derive(Debug, Clone)]
pub struct XEvent {
    /// The event's name.
    pub name: String,
    /// Its category (`span`, `op`, `step`, ...).
    pub cat: String,
    /// Its thread.
    pub tid: u64,
    /// Start, ns.
    pub start: u64,
    /// End (start + duration), ns.
    pub end: u64,
    /// Its `args` object (`null` when absent).
    pub args: Value,
}

/// What [`check_chrome`] found.
#[derive(Debug, Default)]
pub struct ChromeCheck {
    /// Every complete event, in file order.
    pub complete: Vec<XEvent>,
    /// Number of counter (`"ph":"C"`) samples.
    pub counters: usize,
    /// What the logical memory counters (`logical memory DEVICE CATEGORY`, one argument
    /// `bytes`) show: after each of their samples, in file order, the sample's device and
    /// time (ns) and the bytes of every category of that device then, as a viewer holds them
    /// (each category's last sample; a category without a sample yet is absent, 0).
    pub logical_memory: Vec<(String, u64, BTreeMap<String, u64>)>,
    /// Total duration of the outermost complete events of every thread, the step track
    /// (`cat == "step"`) left out: the time the spans and ops cover.
    pub outermost_ns: u64,
    /// Total duration of the ops per name: `op` events, and `span,op` events with the op's
    /// fields (an op that became a span).
    pub op_totals: BTreeMap<String, u64>,
    /// Every problem found, one line each; empty when the export is well formed.
    pub failures: Vec<String>,
}

/// `ts` or `dur` (µs, possibly with decimals) as integer ns; `None` when it is not a finite,
/// non-negative number.
pub fn ns(v: &Value) -> Option<u64> {
    v.as_f64()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| (x * 1000.0).round() as u64)
}

/// Checks a parsed Chrome trace: `displayTimeUnit` is `ns`, `traceEvents` is a non-empty
/// array, every event has a string name and integer pid, and an integer tid unless it is a
/// counter (counters are process counters), complete events have non-negative times and nest
/// per thread, counters carry finite values (memory counters never negative; a logical memory
/// counter is named `logical memory DEVICE CATEGORY`, a category of the schema, and carries
/// `bytes` alone), instant events have a scope, metadata events carry a name or a sort index.
/// Nothing panics: every problem is a line of [`ChromeCheck::failures`].
pub fn check_chrome(v: &Value) -> ChromeCheck {
    let mut check = ChromeCheck::default();
    let fail = |c: &mut ChromeCheck, m: String| c.failures.push(m);
    if v["displayTimeUnit"] != "ns" {
        fail(&mut check, "displayTimeUnit is not \"ns\"".to_string());
    }
    let Some(events) = v["traceEvents"].as_array() else {
        fail(&mut check, "traceEvents is not an array".to_string());
        return check;
    };
    if events.is_empty() {
        fail(&mut check, "no traceEvents".to_string());
    }
    let mut shown: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for e in events {
        let counter = e["ph"] == "C";
        let (Some(name), Some(_), Some(tid)) = (
            e["name"].as_str(),
            e["pid"].as_u64(),
            match &e["tid"] {
                Value::Null if counter => Some(0),
                t => t.as_u64(),
            },
        ) else {
            fail(&mut check, format!("event without name/pid/tid: {e}"));
            continue;
        };
        match e["ph"].as_str().unwrap_or("") {
            "X" => match (ns(&e["ts"]), ns(&e["dur"]), e["cat"].as_str()) {
                (Some(start), Some(dur), Some(cat)) => {
                    // An op that became a span is one `span,op` event carrying the op's fields.
                    if cat == "op" || (cat == "span,op" && e["args"]["dtype"].is_string()) {
                        let total = check.op_totals.entry(name.to_string()).or_default();
                        *total = total.saturating_add(dur);
                    }
                    check.complete.push(XEvent {
                        name: name.to_string(),
                        cat: cat.to_string(),
                        tid,
                        start,
                        end: start.saturating_add(dur),
                        args: e["args"].clone(),
                    });
                }
                _ => fail(
                    &mut check,
                    format!("complete event without ts/dur/cat: {e}"),
                ),
            },
            "C" => {
                check.counters += 1;
                let memory = name.contains("memory");
                let ok = ns(&e["ts"]).is_some()
                    && e["args"].as_object().is_some_and(|a| {
                        !a.is_empty()
                            && a.values().all(|v| {
                                v.as_f64()
                                    .is_some_and(|x| x.is_finite() && (!memory || x >= 0.0))
                            })
                    });
                if !ok {
                    fail(&mut check, format!("bad, empty or negative counter: {e}"));
                }
                if let Some(device_category) = name.strip_prefix("logical memory ") {
                    let parts = device_category.rsplit_once(' ');
                    let bytes = e["args"]["bytes"].as_u64();
                    let alone = e["args"].as_object().is_some_and(|a| a.len() == 1);
                    match (parts, bytes, ns(&e["ts"])) {
                        (Some((device, category)), Some(b), Some(ts))
                            if alone
                                && MemoryCategory::ALL.iter().any(|c| c.as_str() == category) =>
                        {
                            let now = shown.entry(device.to_string()).or_default();
                            now.insert(category.to_string(), b);
                            check
                                .logical_memory
                                .push((device.to_string(), ts, now.clone()));
                        }
                        _ => fail(
                            &mut check,
                            format!(
                                "logical memory counter not of one device and category with bytes alone: {e}"
                            ),
                        ),
                    }
                }
            }
            "i" => {
                if ns(&e["ts"]).is_none() || !matches!(e["s"].as_str(), Some("g" | "p" | "t")) {
                    fail(
                        &mut check,
                        format!("instant event without ts or scope: {e}"),
                    );
                }
            }
            "M" => {
                if !e["args"]["name"].is_string() && !e["args"]["sort_index"].is_u64() {
                    fail(&mut check, format!("metadata event without name: {e}"));
                }
            }
            other => fail(&mut check, format!("unexpected phase {other:?}: {e}")),
        }
    }
    let (nesting, outermost) = nesting(&check.complete);
    check.failures.extend(nesting);
    check.outermost_ns = outermost;
    check
}

/// The nesting problems of complete events: on each thread, sorted by start (longer first),
/// each event must lie within the innermost enclosing one that has not ended. Empty when all
/// nest.
pub fn nesting_failures(xs: &[XEvent]) -> Vec<String> {
    nesting(xs).0
}

/// Nesting failures, and the total time of the outermost events (step track left out).
fn nesting(xs: &[XEvent]) -> (Vec<String>, u64) {
    let mut failures = Vec::new();
    let mut outermost = 0u64;
    let mut by_tid: HashMap<u64, Vec<&XEvent>> = HashMap::new();
    for x in xs {
        by_tid.entry(x.tid).or_default().push(x);
    }
    let mut tids: Vec<_> = by_tid.into_iter().collect();
    tids.sort_by_key(|(tid, _)| *tid);
    for (tid, mut list) in tids {
        list.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut stack: Vec<&XEvent> = Vec::new();
        for x in list {
            // Anything that ended by x's start is not an ancestor of x (a zero-length event
            // at a boundary is inside either way).
            while stack.last().is_some_and(|top| top.end <= x.start) {
                stack.pop();
            }
            match stack.last() {
                Some(top) if x.start < top.start || x.end > top.end => failures.push(format!(
                    "thread {tid}: {} [{}, {}] ns sticks out of {} [{}, {}] ns",
                    x.name, x.start, x.end, top.name, top.start, top.end
                )),
                Some(_) => {}
                None if x.cat != "step" => outermost = outermost.saturating_add(x.end - x.start),
                None => {}
            }
            stack.push(x);
        }
    }
    (failures, outermost)
}
