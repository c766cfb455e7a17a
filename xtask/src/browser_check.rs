//! `cargo xtask browser-check`.
//!
//! The demo's exports in speedscope and its HTML reports, in headless Chromium from disk.
//!
//! `tracegraph` is `cargo run --release -p tracegraph --`, or the binary `$TRACEGRAPH` names.
//!
//! Steps: build the demo's trace (`tracegraph demo --out target/browser-check`) and the Llama
//! demo's (`--model llama`: a candle-transformers model whose forward op became a span around
//! the model's own spans), write two
//! reports (`report.html`, and `report-compare.html` with the same run as its baseline so the
//! comparison section renders too), then for each page:
//!
//! 1. `chromium --headless ... --dump-dom file://...` with a fresh `--user-data-dir` and
//!    `--enable-logging=stderr`: every console message the page or the browser produces
//!    (script errors, `console.*` calls, blocked loads, CSP violations) is a `CONSOLE` line on
//!    stderr, and the check fails on any of them (the report logs nothing when it is fine);
//! 2. the dumped DOM must carry the report's own verdict: `data-tg-status="ok"` on `<html>`
//!    (set as the last statement of its script), an empty `#tg-errors` (its `window.onerror`,
//!    `unhandledrejection` and `console.error` hooks write there), and the op table, memory
//!    chart and span tree rendered with rows / an SVG;
//! 3. a screenshot (`--screenshot`) is saved next to the page (`report.png`);
//! 4. every table is measured in the page at 1280 and 1920 px windows ([`TABLE_WIDTHS_PX`]): a
//!    copy of the page with a measuring script after the report's own ([`MEASURE_TABLES_JS`])
//!    is loaded at that window size and, for each drawn `table.data`, compares each key
//!    column's header (`th[data-key]`; every column when the table declares none) with the
//!    visible box of its scrolling container. The check fails when a key column's right edge
//!    lies beyond that box (off-screen until the reader scrolls sideways), naming the table,
//!    its width, the box's and the columns.
//!
//! The Llama demo is recorded with the CPU sampler too, and its report (`report-llama.html`)
//! gets the same checks plus the flame graph's: no bar of a thread's start (`_start`, libc,
//! `std::rt::lang_start`: stacks start at the thread's entry) and waiting drawn apart (a
//! `[waiting]` bar in its own colour). Every page checked is of a sampled run, so each must draw
//! the sampled op table beside its flame graph (`#flame-ops`, with a Candle op's row). The Llama
//! report is written beside testkit's torch.profiler run of the same model (`--against-torch`),
//! so it must draw the torch section (`#torch-kinds` with rows, `#torch-diagnoses`); the other
//! pages must hide it. Each flame section must show as many hints (`#flame-hints`) as
//! `tracegraph hot --json` gives for its trace, and the comparison must state what its
//! intervals cover (`#comparison-caveat`, the caveat `tracegraph compare` prints).
//!
//! **speedscope.** The demo's Chrome export (`demo.trace.json`, default args), its folded
//! stacks, the same two for the Llama demo (`llama.trace.json`, `llama.folded`) and a
//! synthetic 20,000-step Chrome export are imported by speedscope from the npm
//! registry (`$SPEEDSCOPE`, else `target/npm/node_modules/speedscope`, installed by `.ci/run`)
//! the way its own CLI does it: a script calling `speedscope.loadFileFromBase64(NAME, DATA)`
//! given as `index.html#localProfilePath=...&view=sandwich`. A prelude in that script records
//! every `console.*` call and uncaught error of the page in a hidden `<pre>`; the check fails on
//! any warning or error, on the wrong importer (a `*.trace.json` must be read as Trace Event
//! Format, folded stacks as collapsed stacks), and unless the Sandwich table lists exactly one
//! `backward` frame for the MLP and one `llama.forward` frame for the Llama (frames
//! aggregated, not one per call; the op drawn once, as its span). Chromium's own console lines on
//! stderr must be speedscope's known informational ones (version, WebGL renderer, importer,
//! import time) or the software renderer's "GPU stall due to ReadPixels" performance note.
//!
//! Before the pages, the demo's exports are checked: the Chrome trace JSON (every event has
//! its required fields, complete events nest per thread, memory counters are never negative,
//! op totals per name equal `tracegraph ops --json`, no nesting adjustment was needed) and
//! the folded stacks (weights sum to the time of the outermost Chrome events, and to the root
//! spans of `tracegraph spans --json`), and the self time per frame name computed from the
//! nested Chrome events equals the folded weights per frame within 1 µs, for both demos.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The speedscope release the check installs (`.ci/run`) and expects.
const SPEEDSCOPE_VERSION: &str = "1.25.0";

/// Flags the issue asks for, plus logging of console messages to stderr. Software WebGL
/// (speedscope draws with WebGL) is opted into explicitly: Chromium otherwise warns that the
/// automatic fallback is deprecated.
const CHROMIUM_FLAGS: &[&str] = &[
    "--enable-unsafe-swiftshader",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
];

/// How long one Chromium run may take before it is killed.
const CHROMIUM_TIMEOUT: Duration = Duration::from_mins(2);

/// The window widths at which the report's tables are measured (a laptop's, a desktop's).
const TABLE_WIDTHS_PX: [u32; 2] = [1280, 1920];

/// The measuring script appended to a copy of a report (after the report's own script, so
/// every table is drawn). For each drawn `table.data` (its container shown), it writes one
/// record into a hidden `<pre id="tg-widths">` as JSON: the table's name (its section's
/// heading and the nearest `h3` before it), the table's scroll width, the width of its
/// container's visible box (clipped to the window), whether the table declares key columns
/// (`th[data-key]`), and the key columns whose header's right edge lies beyond the visible
/// box (every column is key when none is declared).
const MEASURE_TABLES_JS: &str = r#"(function () {
  "use strict";
  var vw = document.documentElement.clientWidth, out = [];
  function name(t) {
    var sec = t.closest("section"), h2 = sec ? sec.querySelector("h2") : null;
    var h = null;
    Array.prototype.forEach.call(sec ? sec.querySelectorAll("h3") : [], function (x) {
      if (x.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING) h = x;
    });
    return (h2 ? h2.textContent : "page") + (h ? " / " + h.textContent : "");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.data"), function (t) {
    var wrap = t.parentElement;
    if (!wrap || wrap.clientWidth === 0) return;
    var box = wrap.getBoundingClientRect();
    var right = Math.min(box.left + wrap.clientLeft + wrap.clientWidth, vw);
    var ths = Array.prototype.slice.call(t.querySelectorAll("thead th"));
    var keys = ths.filter(function (th) { return th.hasAttribute("data-key"); });
    var declared = keys.length > 0;
    if (!declared) keys = ths;
    var off = keys.filter(function (th) { return th.getBoundingClientRect().right > right + 0.5; })
      .map(function (th) { return th.textContent; });
    out.push({ table: name(t), table_px: Math.round(t.scrollWidth), box_px: Math.round(right - box.left),
      declared: declared, keys: keys.length, off: off });
  });
  var pre = document.createElement("pre");
  pre.id = "tg-widths"; pre.hidden = true;
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"#;

/// Runs the check from the workspace root `root`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        bail!("browser-check takes no arguments (got `{a}`)");
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let out = target.join("browser-check");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let chromium = find_chromium()?;

    let mut demo = tracegraph(root);
    // Sampled, so the report's flame graph of sampled stacks is drawn and checked too.
    demo.arg("demo").arg("--out").arg(&out).arg("--sample");
    super::run(demo)?;
    let trace = newest_trace(&out)?;
    eprintln!("xtask: demo trace {}", trace.display());
    let mut failures = export_checks(root, &trace, &out, "demo")?;
    // A real library model: its forward op became a span around the model's own spans.
    let llama_dir = out.join("llama");
    let mut llama = tracegraph(root);
    llama
        .arg("demo")
        .arg("--model")
        .arg("llama")
        .arg("--out")
        .arg(&llama_dir)
        // Sampled too (the example's switch), so its report's flame graph is checked.
        .env("PROFILE_LLAMA_SAMPLE", "1");
    super::run(llama)?;
    let llama_trace = newest_trace(&llama_dir)?;
    eprintln!("xtask: llama demo trace {}", llama_trace.display());
    failures.extend(export_checks(root, &llama_trace, &out, "llama")?);
    failures.extend(speedscope_checks(root, &chromium, &target, &out)?);

    let page = out.join("report.html");
    let mut report = tracegraph(root);
    report.arg("report").arg(&trace).arg("-o").arg(&page);
    super::run(report)?;

    let compare_page = out.join("report-compare.html");
    let mut compare = tracegraph(root);
    compare
        .arg("report")
        .arg(&trace)
        .arg("--baseline")
        .arg(&trace)
        .arg("-o")
        .arg(&compare_page);
    super::run(compare)?;

    let llama_page = out.join("report-llama.html");
    let mut report = tracegraph(root);
    report
        .arg("report")
        .arg(&llama_trace)
        .arg("--against-torch")
        .arg(root.join("crates/testkit/data/torch/llama.trace.json.gz"))
        .arg("-o")
        .arg(&llama_page);
    super::run(report)?;

    // Waiting is drawn apart when the sampled run waited at all (`hot --json`'s count); the
    // flame section shows as many hints as `hot --json` gives.
    let hot_hints = |t: &Path| -> Result<usize> {
        let v: Value = serde_json::from_str(&tracegraph_stdout(
            root,
            &["hot", "--json", &t.to_string_lossy()],
        )?)
        .context("`tracegraph hot --json` is not JSON")?;
        Ok(v["hints"].as_array().map_or(0, Vec::len))
    };
    let (mlp_hints, llama_hints) = (hot_hints(&trace)?, hot_hints(&llama_trace)?);
    let waited = |t: &Path| -> Result<bool> {
        let v: Value = serde_json::from_str(&tracegraph_stdout(
            root,
            &["hot", "--json", &t.to_string_lossy()],
        )?)
        .context("`tracegraph hot --json` is not JSON")?;
        let n = v["waiting"].as_u64().unwrap_or(0);
        if n == 0 {
            eprintln!(
                "xtask: note: {} has no waiting samples; its flame graph's waiting bar is not checked this time",
                t.display()
            );
        }
        Ok(n > 0)
    };
    let (mlp_waited, llama_waited) = (waited(&trace)?, waited(&llama_trace)?);
    // The sampler cuts its handler's frames (the handler, the ring it records into, the
    // unwinder, the trampoline) from every stack: in this release build (line tables only,
    // functions named without their path) as in a debug one. (The driving thread runs the
    // sampler's other code, arming its clocks at steps, and may be sampled there.)
    for t in [&trace, &llama_trace] {
        let v: Value = serde_json::from_str(&tracegraph_stdout(
            root,
            &["hot", "--json", &t.to_string_lossy()],
        )?)
        .context("`tracegraph hot --json` is not JSON")?;
        let own: Vec<&str> = v["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .filter(|n| n.contains("on_sigprof") || n.contains("trace-sampler/src/ring.rs"))
            .collect();
        if !own.is_empty() {
            failures.push(format!(
                "{}: the sampler's signal-handler frames in sampled stacks: {}",
                t.display(),
                own.join(", ")
            ));
        }
    }
    for (page, needs_comparison, waiting, beside_torch, hints) in [
        (&page, false, mlp_waited, false, mlp_hints),
        (&compare_page, true, mlp_waited, false, mlp_hints),
        (&llama_page, false, llama_waited, true, llama_hints),
    ] {
        let html =
            std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
        failures.extend(
            static_checks(&html)
                .into_iter()
                .map(|f| format!("{}: {f}", page.display())),
        );
        let dom = load_page(&chromium, page, &out)?;
        failures.extend(
            dom_checks(&dom, needs_comparison)
                .into_iter()
                .chain(flame_checks(&dom, waiting))
                .chain(sampled_ops_checks(&dom))
                .chain(torch_checks(&dom, beside_torch))
                .chain(hints_checks(&dom, hints))
                .map(|f| format!("{}: {f}", page.display())),
        );
    }

    // Every table's key columns on screen at a laptop's and a desktop's window width.
    let mut measured = 0usize;
    for page in [&page, &compare_page, &llama_page] {
        for width in TABLE_WIDTHS_PX {
            let (n, f) = table_width_checks(&chromium, page, &out, width)?;
            measured += n;
            failures.extend(f.into_iter().map(|f| format!("{}: {f}", page.display())));
        }
    }

    // Screenshots for review: the report at 1280 and 1920 px, the comparison and the Llama
    // report beside torch at 1280 px.
    let mut shots = Vec::new();
    for (page, name, width) in [
        (&page, "report.png", 1280),
        (&page, "report-1920.png", 1920),
        (&compare_page, "report-compare.png", 1280),
        (&llama_page, "report-llama.png", 1280),
    ] {
        let shot = out.join(name);
        screenshot(&chromium, page, &shot, &out, width)?;
        let size = std::fs::metadata(&shot)
            .with_context(|| format!("no screenshot at {}", shot.display()))?
            .len();
        if size < 10_000 {
            failures.push(format!(
                "{}: screenshot is only {size} bytes (blank page?)",
                shot.display()
            ));
        }
        shots.push(shot.display().to_string());
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("browser-check: FAIL {f}");
        }
        bail!("browser check failed ({} problems)", failures.len());
    }
    println!(
        "browser-check: ok: speedscope imported the MLP and Llama demos' Chrome exports and folded stacks (self time per frame agreeing) and a 20,000-step export without warnings, frames aggregated; {}, {} and {} (beside torch) rendered in {} without console messages; {measured} drawn tables measured at {:?} px windows, every key column on screen; screenshots {}",
        page.display(),
        compare_page.display(),
        llama_page.display(),
        chromium.display(),
        TABLE_WIDTHS_PX,
        shots.join(", ")
    );
    Ok(())
}

/// Runs `tracegraph ARGS` and returns its stdout.
fn tracegraph_stdout(root: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = tracegraph(root);
    cmd.args(args).stderr(Stdio::inherit());
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed with {}", out.status);
    }
    String::from_utf8(out.stdout).context("tracegraph printed non-UTF-8")
}

/// µs with three decimals (a JSON number) as integer ns.
/// Exports the demo trace as Chrome JSON and folded stacks and checks both (see the module
/// documentation). Returns the failures.
fn export_checks(root: &Path, trace: &Path, out: &Path, name: &str) -> Result<Vec<String>> {
    let mut failures = Vec::new();
    let t = trace.to_string_lossy().to_string();
    // `*.trace.json`: speedscope routes `*.chrome.json` to its Chrome *timeline* importer.
    let chrome_path = out.join(format!("{name}.trace.json"));
    let folded_path = out.join(format!("{name}.folded"));
    tracegraph_stdout(
        root,
        &[
            "export",
            &t,
            "--format",
            "chrome",
            "-o",
            &chrome_path.to_string_lossy(),
        ],
    )?;
    tracegraph_stdout(
        root,
        &[
            "export",
            &t,
            "--format",
            "folded",
            "-o",
            &folded_path.to_string_lossy(),
        ],
    )?;
    let chrome: Value = serde_json::from_str(
        &std::fs::read_to_string(&chrome_path)
            .with_context(|| format!("reading {}", chrome_path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", chrome_path.display()))?;
    let ops: Value = serde_json::from_str(&tracegraph_stdout(root, &["ops", &t, "--json"])?)
        .context("`tracegraph ops --json` is not JSON")?;
    let spans: Value = serde_json::from_str(&tracegraph_stdout(root, &["spans", &t, "--json"])?)
        .context("`tracegraph spans --json` is not JSON")?;

    let mut fail = |m: String| failures.push(format!("{}: {m}", chrome_path.display()));
    // Fields, nesting per thread, counters: testkit's checker, the one the export tests use.
    let check = testkit::check_chrome(&chrome);
    for f in &check.failures {
        fail(f.clone());
    }
    let adjusted = &chrome["otherData"]["summary"]["adjustments"];
    if adjusted
        .as_object()
        .is_none_or(|m| m.values().any(|v| v.as_u64() != Some(0)))
    {
        fail(format!(
            "the demo's spans and ops needed adjustments: {adjusted}"
        ));
    }
    if check.counters == 0 {
        fail("no memory counters".to_string());
    }
    let op_totals = &check.op_totals;
    let roots = check.outermost_ns;
    let table: std::collections::BTreeMap<String, u64> = ops["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["name"].as_str()?.to_string(), r["total_ns"].as_u64()?)))
        .collect();
    if table.is_empty() || &table != op_totals {
        fail(format!(
            "op totals differ from `tracegraph ops --json`: export {op_totals:?}, ops {table:?}"
        ));
    }

    let folded = std::fs::read_to_string(&folded_path)
        .with_context(|| format!("reading {}", folded_path.display()))?;
    let mut sum = 0u64;
    for line in folded.lines() {
        match line
            .rsplit_once(' ')
            .and_then(|(_, w)| w.parse::<u64>().ok())
        {
            Some(w) if w > 0 => sum += w,
            _ => failures.push(format!("{}: bad line `{line}`", folded_path.display())),
        }
    }
    // Self time per frame name agrees between the two exports (as a viewer computes it
    // from the nested Chrome events, and as the folded weights give it).
    let chrome_self = self_by_name(&check.complete);
    let mut folded_self: std::collections::BTreeMap<String, u64> = Default::default();
    for line in folded.lines() {
        if let Some((stack, w)) = line.rsplit_once(' ')
            && let Ok(w) = w.parse::<u64>()
        {
            let frame = stack.rsplit(';').next().unwrap_or(stack);
            *folded_self.entry(frame.to_string()).or_default() += w;
        }
    }
    let names: std::collections::BTreeSet<&String> =
        chrome_self.keys().chain(folded_self.keys()).collect();
    for n in names {
        let (c, f) = (
            chrome_self.get(n).copied().unwrap_or(0),
            folded_self.get(n).copied().unwrap_or(0),
        );
        if c.abs_diff(f) > 1_000 {
            failures.push(format!(
                "{}: self time of `{n}` is {c} ns in the Chrome export and {f} ns in the folded stacks",
                folded_path.display()
            ));
        }
    }
    let span_roots: u64 = spans["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["depth"] == 0)
        .filter_map(|n| n["total_ns"].as_u64())
        .sum();
    if sum != roots || sum != span_roots {
        failures.push(format!(
            "{}: weights sum to {sum} ns; the outermost Chrome events last {roots} ns and the root spans {span_roots} ns",
            folded_path.display()
        ));
    }
    eprintln!(
        "xtask: exports checked: {} Chrome events ({} complete, {} counters), {} folded stacks summing to {sum} ns",
        chrome["traceEvents"].as_array().map_or(0, Vec::len),
        check.complete.len(),
        check.counters,
        folded.lines().count()
    );
    Ok(failures)
}

/// The speedscope `index.html` to load: `$SPEEDSCOPE/dist/release/index.html`, else the copy
/// `.ci/run` installs under `target/npm`.
fn speedscope_index(target: &Path) -> Result<PathBuf> {
    let dir = std::env::var_os("SPEEDSCOPE")
        .map_or_else(|| target.join("npm/node_modules/speedscope"), PathBuf::from);
    let index = dir.join("dist/release/index.html");
    if !index.is_file() {
        bail!(
            "speedscope is not installed at {} (no dist/release/index.html); install it with \
             `npm install --prefix {} speedscope@{SPEEDSCOPE_VERSION}` (as .ci/run does) or set SPEEDSCOPE",
            dir.display(),
            target.join("npm").display()
        );
    }
    let version = std::fs::read_to_string(dir.join("package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_string))
        .unwrap_or_default();
    if version != SPEEDSCOPE_VERSION {
        eprintln!(
            "xtask: note: speedscope {version} at {} (the check is written against {SPEEDSCOPE_VERSION})",
            dir.display()
        );
    }
    Ok(index)
}

/// The script speedscope loads through `#localProfilePath=`: a prelude that records every
/// console call and uncaught error of the page in a hidden `<pre id="tg-console">` (one
/// `LEVEL: text` line each), then the profile, as speedscope's CLI hands it over.
fn speedscope_loader(name: &str, data: &[u8]) -> String {
    const PRELUDE: &str = r#"(function () {
  var host = document.createElement("pre");
  host.id = "tg-console"; host.hidden = true;
  document.documentElement.appendChild(host);
  function rec(level, args) {
    var text = Array.prototype.map.call(args, function (a) {
      try { return typeof a === "string" ? a : JSON.stringify(a); } catch (e) { return String(a); }
    }).join(" ");
    host.appendChild(document.createTextNode(level + ": " + text.replace(/\n/g, " ") + "\n"));
  }
  ["log", "info", "warn", "error", "debug", "trace"].forEach(function (l) {
    var orig = console[l];
    console[l] = function () { rec(l, arguments); return orig.apply(console, arguments); };
  });
  window.addEventListener("error", function (e) { rec("uncaught", [e.message]); });
  window.addEventListener("unhandledrejection", function (e) { rec("unhandled", [String(e.reason)]); });
})();
"#;
    let mut js = String::with_capacity(PRELUDE.len() + data.len() * 4 / 3 + 64);
    js.push_str(PRELUDE);
    js.push_str("speedscope.loadFileFromBase64(");
    js.push_str(&Value::String(name.to_string()).to_string());
    js.push_str(", \"");
    base64_into(data, &mut js);
    js.push_str("\");\n");
    js
}

/// Standard base64 with padding (xtask keeps its dependencies minimal).
fn base64_into(data: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
}

/// Self time per event name of the complete events (the step track left out): each event's
/// duration less its direct children's on its thread, as a flame-graph viewer computes it.
fn self_by_name(events: &[testkit::XEvent]) -> std::collections::BTreeMap<String, u64> {
    let mut xs: Vec<&testkit::XEvent> = events.iter().filter(|x| x.cat != "step").collect();
    xs.sort_by_key(|x| (x.tid, x.start, std::cmp::Reverse(x.end)));
    let mut selfs: Vec<u64> = xs.iter().map(|x| x.end - x.start).collect();
    let mut stack: Vec<usize> = Vec::new();
    for i in 0..xs.len() {
        while let Some(&top) = stack.last() {
            let t = xs[top];
            if t.tid != xs[i].tid || xs[i].start >= t.end {
                stack.pop();
            } else {
                break;
            }
        }
        if let Some(&parent) = stack.last() {
            selfs[parent] = selfs[parent].saturating_sub(xs[i].end - xs[i].start);
        }
        stack.push(i);
    }
    let mut by_name = std::collections::BTreeMap::new();
    for (x, s) in xs.iter().zip(selfs) {
        *by_name.entry(x.name.clone()).or_default() += s;
    }
    by_name
}

/// What one speedscope import showed.
#[derive(Debug, Default)]
struct SpeedscopeImport {
    /// `LEVEL: text` lines recorded by the prelude.
    console: Vec<String>,
    /// Frame names of the Sandwich table (the rows it rendered).
    frames: Vec<String>,
    /// Whether the page shows speedscope's import failure message.
    failed: bool,
}

/// The recorded console lines and the Sandwich frame names of a dumped speedscope DOM.
fn parse_speedscope_dom(dom: &str) -> SpeedscopeImport {
    let mut r = SpeedscopeImport {
        failed: dom.contains("Something went wrong"),
        ..SpeedscopeImport::default()
    };
    if let Some(at) = dom.find("id=\"tg-console\"")
        && let Some(open) = dom[at..].find('>')
    {
        let body = &dom[at + open + 1..];
        let body = &body[..body.find("</pre>").unwrap_or(body.len())];
        r.console = body
            .lines()
            .map(|l| unescape_html(l.trim()))
            .filter(|l| !l.is_empty())
            .collect();
    }
    // A Sandwich row ends with its frame name: `<span ...></span>NAME</td></tr>`.
    let mut rest = dom;
    while let Some(end) = rest.find("</td></tr>") {
        let cell = &rest[..end];
        if let Some(span_end) = cell.rfind("</span>") {
            let name = &cell[span_end + "</span>".len()..];
            if !name.contains('<') {
                r.frames.push(unescape_html(name));
            }
        }
        rest = &rest[end + "</td></tr>".len()..];
    }
    r
}

fn unescape_html(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The failures of one import: console warnings or errors, the wrong importer, a failure
/// message, and unless `frames` is `None`, not exactly that many frames of that name (an
/// aggregated frame: one per name and args).
fn judge_speedscope(
    r: &SpeedscopeImport,
    importer: &str,
    frames: Option<(&str, usize)>,
) -> Vec<String> {
    let mut f = Vec::new();
    for line in &r.console {
        let level = line.split(':').next().unwrap_or("");
        if !matches!(level, "log" | "info" | "debug") {
            f.push(format!("console {line}"));
        }
    }
    if !r.console.iter().any(|l| l.contains(importer)) {
        f.push(format!(
            "not read by the expected importer (`{importer}`); console: {:?}",
            r.console
        ));
    }
    if r.failed {
        f.push("speedscope shows \"Something went wrong\"".to_string());
    }
    if r.frames.is_empty() {
        f.push("the Sandwich view lists no frames".to_string());
    }
    if let Some((frame, want)) = frames {
        let n = r
            .frames
            .iter()
            .filter(|name| *name == frame || name.starts_with(&format!("{frame} {{")))
            .count();
        if n != want {
            f.push(format!(
                "the Sandwich view lists {n} `{frame}` frame(s), expected {want} (frames not aggregated?): {:?}",
                r.frames
            ));
        }
    }
    f
}

/// Chromium's stderr console lines that are not speedscope's known informational ones or the
/// software renderer's performance note.
fn unexpected_stderr_console(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .filter(|l| {
            let msg = l.split_once("] \"").map_or("", |(_, m)| m);
            !(msg.starts_with("speedscope v")
                || msg.starts_with("WebGL initialized.")
                || msg.starts_with("Importing as ")
                || msg.starts_with("import: ")
                || (msg.contains("GL Driver Message (OpenGL, Performance")
                    && msg.contains("GPU stall due to ReadPixels")))
        })
        .map(str::to_string)
        .collect()
}

/// Imports `file` into speedscope in headless Chromium and returns the failures.
fn speedscope_import(
    chromium: &Path,
    index: &Path,
    file: &Path,
    out: &Path,
    importer: &str,
    frames: Option<(&str, usize)>,
) -> Result<Vec<String>> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .context("an export file name")?
        .to_string();
    let data = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let loader = out.join(format!("{name}.speedscope-load.js"));
    std::fs::write(&loader, speedscope_loader(&name, &data))
        .with_context(|| format!("writing {}", loader.display()))?;
    let loader_abs = std::fs::canonicalize(&loader)
        .with_context(|| format!("resolving {}", loader.display()))?;
    let fragment = format!(
        "#localProfilePath={}&view=sandwich",
        file_url(&loader_abs)?.trim_start_matches("file://")
    );
    let url = format!("{}{fragment}", file_url(index)?);
    let run = || {
        chromium_run_url(
            chromium,
            &url,
            out,
            &format!("speedscope-{name}"),
            &[
                "--virtual-time-budget=30000".to_string(),
                "--window-size=1280,2000".to_string(),
                "--dump-dom".to_string(),
            ],
        )
    };
    let (mut dom, mut stderr) = run()?;
    // Headless Chromium under load now and then dumps the page before speedscope drew the
    // Sandwich table's rows (its virtual list renders them a frame after the table; seen once
    // in a fresh-clone CI run: the import logged, an empty list). An empty table says nothing
    // about the import, so it is run again, twice at most; one that stays empty fails.
    for _ in 0..2 {
        let r = parse_speedscope_dom(&dom);
        if !r.frames.is_empty() || r.failed {
            break;
        }
        eprintln!("xtask: speedscope drew no Sandwich rows for {name} yet; running it again");
        (dom, stderr) = run()?;
    }
    std::fs::write(out.join(format!("{name}.speedscope.dom.html")), &dom)
        .with_context(|| format!("saving the speedscope DOM of {name}"))?;
    let r = parse_speedscope_dom(&dom);
    let mut failures: Vec<String> = judge_speedscope(&r, importer, frames)
        .into_iter()
        .chain(
            unexpected_stderr_console(&stderr)
                .into_iter()
                .map(|l| format!("browser console: {l}")),
        )
        .map(|f| format!("speedscope {name}: {f}"))
        .collect();
    failures.dedup();
    eprintln!(
        "xtask: speedscope imported {name}: {} frames in the Sandwich view, {} console line(s)",
        r.frames.len(),
        r.console.len()
    );
    Ok(failures)
}

/// speedscope imports the demo's Chrome export and folded stacks, and a 20,000-step Chrome
/// export, without a warning; frames are aggregated.
fn speedscope_checks(
    root: &Path,
    chromium: &Path,
    target: &Path,
    out: &Path,
) -> Result<Vec<String>> {
    let index = speedscope_index(target)?;
    let mut failures = Vec::new();
    for (name, frame) in [("demo", "backward"), ("llama", "llama.forward")] {
        failures.extend(speedscope_import(
            chromium,
            &index,
            &out.join(format!("{name}.trace.json")),
            out,
            "Importing as Trace Event Format profile",
            Some((frame, 1)),
        )?);
        failures.extend(speedscope_import(
            chromium,
            &index,
            &out.join(format!("{name}.folded")),
            out,
            "Importing as collapsed stack format",
            Some((frame, 1)),
        )?);
    }
    // 20,000 steps (one op each): step bars that overlapped by a rounding error made
    // speedscope nest them into a 20,000-deep staircase and overflow its stack.
    let synth = out.join("steps-20000.jsonl");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&synth).with_context(|| format!("creating {}", synth.display()))?,
    );
    testkit::write_synthetic(
        &mut file,
        &testkit::SynthConfig {
            ops: 20_000,
            ops_per_step: 1,
            ..testkit::SynthConfig::default()
        },
    )
    .context("writing the 20,000-step trace")?;
    std::io::Write::flush(&mut file).context("writing the 20,000-step trace")?;
    drop(file);
    let big = out.join("steps-20000.trace.json");
    tracegraph_stdout(
        root,
        &[
            "export",
            &synth.to_string_lossy(),
            "--format",
            "chrome",
            "-o",
            &big.to_string_lossy(),
        ],
    )?;
    failures.extend(speedscope_import(
        chromium,
        &index,
        &big,
        out,
        "Importing as Trace Event Format profile",
        None,
    )?);
    Ok(failures)
}

/// `cargo run --release -p tracegraph --`, or the binary `$TRACEGRAPH` names (one built
/// before, so that a tree being edited meanwhile is not rebuilt between the check's steps).
fn tracegraph(root: &Path) -> Command {
    if let Some(bin) = std::env::var_os("TRACEGRAPH") {
        let mut cmd = Command::new(bin);
        cmd.current_dir(root);
        return cmd;
    }
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root)
        .args(["run", "--release", "-p", "tracegraph", "--"]);
    cmd
}

/// `$CHROMIUM`, else the first of the usual names found on `PATH`.
fn find_chromium() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "no Chromium found on PATH (tried chromium, chromium-browser, google-chrome); \
         install it (`apt-get install -y chromium`) or set CHROMIUM"
    )
}

/// The most recently modified `*.jsonl` file under `dir` (the demo's trace).
fn newest_trace(dir: &Path) -> Result<PathBuf> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let path = entry
                .with_context(|| format!("listing {}", d.display()))?
                .path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "jsonl") {
                let modified = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .unwrap_or(UNIX_EPOCH);
                if best.as_ref().is_none_or(|(t, _)| modified > *t) {
                    best = Some((modified, path));
                }
            }
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("the demo wrote no *.jsonl trace under {}", dir.display()))
}

/// A fresh, empty Chromium profile directory under `out`.
fn fresh_profile(out: &Path, tag: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = out.join(format!(
        "chromium-profile-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn file_url(path: &Path) -> Result<String> {
    let abs =
        std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let mut url = String::from("file://");
    for b in abs.to_string_lossy().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                url.push(char::from(b));
            }
            _ => url.push_str(&format!("%{b:02X}")),
        }
    }
    Ok(url)
}

/// Runs Chromium with `extra` flags on `page`; returns (stdout, stderr).
fn chromium_run(
    chromium: &Path,
    page: &Path,
    out: &Path,
    tag: &str,
    extra: &[String],
) -> Result<(String, String)> {
    chromium_run_url(chromium, &file_url(page)?, out, tag, extra)
}

/// Runs Chromium with `extra` flags on `url`; returns (stdout, stderr).
fn chromium_run_url(
    chromium: &Path,
    url: &str,
    out: &Path,
    tag: &str,
    extra: &[String],
) -> Result<(String, String)> {
    let page = url;
    let profile = fresh_profile(out, tag)?;
    let stdout_path = out.join(format!("chromium-{tag}.stdout"));
    let stderr_path = out.join(format!("chromium-{tag}.stderr"));
    let mut cmd = Command::new(chromium);
    cmd.args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(
            std::fs::File::create(&stdout_path)
                .with_context(|| format!("creating {}", stdout_path.display()))?,
        )
        .stderr(
            std::fs::File::create(&stderr_path)
                .with_context(|| format!("creating {}", stderr_path.display()))?,
        );
    eprintln!("xtask: running {cmd:?}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("failed to start {}", chromium.display()))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for chromium")? {
            break status;
        }
        if started.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("chromium did not finish within {CHROMIUM_TIMEOUT:?} on {page}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The profile is scratch; a failure to remove it is not the page's fault.
    let _ = std::fs::remove_dir_all(&profile);
    let stdout = std::fs::read_to_string(&stdout_path)
        .with_context(|| format!("reading {}", stdout_path.display()))?;
    let stderr = std::fs::read_to_string(&stderr_path)
        .with_context(|| format!("reading {}", stderr_path.display()))?;
    if !status.success() {
        bail!("chromium exited with {status} on {page}; stderr:\n{stderr}");
    }
    Ok((stdout, stderr))
}

/// Loads `page`, runs its script (virtual time lets timers settle), fails on any console
/// message, and returns the DOM after the script ran.
fn load_page(chromium: &Path, page: &Path, out: &Path) -> Result<String> {
    let tag = page
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("page")
        .to_string();
    let (dom, stderr) = chromium_run(
        chromium,
        page,
        out,
        &tag,
        &[
            "--virtual-time-budget=10000".to_string(),
            "--dump-dom".to_string(),
        ],
    )?;
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    if !console.is_empty() {
        bail!(
            "{} produced {} console message(s):\n{}",
            page.display(),
            console.len(),
            console.join("\n")
        );
    }
    std::fs::write(out.join(format!("{tag}.dom.html")), &dom)
        .with_context(|| format!("saving the DOM of {}", page.display()))?;
    Ok(dom)
}

fn screenshot(chromium: &Path, page: &Path, shot: &Path, out: &Path, width: u32) -> Result<()> {
    let abs_shot = if shot.is_absolute() {
        shot.to_path_buf()
    } else {
        std::env::current_dir()
            .context("current directory")?
            .join(shot)
    };
    let (_, stderr) = chromium_run(
        chromium,
        page,
        out,
        "screenshot",
        &[
            "--virtual-time-budget=10000".to_string(),
            format!("--window-size={width},3600"),
            format!("--screenshot={}", abs_shot.display()),
        ],
    )?;
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    if !console.is_empty() {
        bail!(
            "screenshot run produced console message(s):\n{}",
            console.join("\n")
        );
    }
    Ok(())
}

/// `html` with `script` run after everything else: an inline `<script>` before its last
/// `</body>`; `None` when the page has no `</body>`.
fn with_script_at_end(html: &str, script: &str) -> Option<String> {
    let at = html.rfind("</body>")?;
    let mut o = String::with_capacity(html.len() + script.len() + 32);
    o.push_str(&html[..at]);
    o.push_str("<script>\n");
    o.push_str(script);
    o.push_str("</script>\n");
    o.push_str(&html[at..]);
    Some(o)
}

/// Loads a copy of `page` with [`MEASURE_TABLES_JS`] in a `width` px window and judges its
/// tables ([`judge_table_widths`]). Returns how many tables were measured and the failures.
fn table_width_checks(
    chromium: &Path,
    page: &Path,
    out: &Path,
    width: u32,
) -> Result<(usize, Vec<String>)> {
    let html =
        std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let Some(measured) = with_script_at_end(&html, MEASURE_TABLES_JS) else {
        return Ok((0, vec!["the page has no </body>".to_string()]));
    };
    let stem = page
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("page")
        .to_string();
    let copy = out.join(format!("{stem}-widths-{width}.html"));
    std::fs::write(&copy, measured).with_context(|| format!("writing {}", copy.display()))?;
    let (dom, stderr) = chromium_run(
        chromium,
        &copy,
        out,
        &format!("{stem}-widths-{width}"),
        &[
            "--virtual-time-budget=10000".to_string(),
            format!("--window-size={width},3600"),
            "--dump-dom".to_string(),
        ],
    )?;
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    if !console.is_empty() {
        bail!(
            "{} produced {} console message(s) at {width} px:\n{}",
            copy.display(),
            console.len(),
            console.join("\n")
        );
    }
    Ok(judge_table_widths(&dom, width))
}

/// The failures of a measured page's DOM (`<pre id="tg-widths">` written by
/// [`MEASURE_TABLES_JS`]) at a `width` px window: each table with a key column off-screen,
/// or no measurement at all. Returns how many tables were measured, and the failures.
fn judge_table_widths(dom: &str, width: u32) -> (usize, Vec<String>) {
    let Some(text) = section_text(dom, "tg-widths")
        .and_then(|t| t.split_once('>'))
        .and_then(|(_, c)| c.split("</pre>").next())
    else {
        return (
            0,
            vec![format!(
                "at {width} px: the table measurement did not run (no #tg-widths)"
            )],
        );
    };
    let records: Vec<Value> = match serde_json::from_str(&unescape_html(text)) {
        Ok(Value::Array(r)) => r,
        _ => {
            return (
                0,
                vec![format!(
                    "at {width} px: the table measurement is not a JSON list: {text}"
                )],
            );
        }
    };
    let mut failures = Vec::new();
    if records.is_empty() {
        failures.push(format!("at {width} px: no drawn table was measured"));
    }
    for r in &records {
        let off: Vec<&str> = r["off"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if off.is_empty() {
            continue;
        }
        failures.push(format!(
            "at {width} px: table \"{}\" is {} px wide in a {} px box; {} off-screen: {}",
            r["table"].as_str().unwrap_or("?"),
            r["table_px"],
            r["box_px"],
            if r["declared"].as_bool() == Some(true) {
                "key column(s)"
            } else {
                "column(s) (it declares no key columns, so every column must be visible)"
            },
            off.join(", ")
        ));
    }
    (records.len(), failures)
}

/// Checks on the file itself: nothing that would be fetched.
fn static_checks(html: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let lower = html.to_ascii_lowercase();
    for needle in [
        "src=\"http",
        "src='http",
        "href=\"http",
        "href='http",
        "<link ",
        "@import",
        "url(http",
        "src=\"//",
        "fetch(",
        "xmlhttprequest",
    ] {
        if lower.contains(needle) {
            failures.push(format!(
                "contains `{needle}`: the page must not load anything"
            ));
        }
    }
    if !lower.contains("content-security-policy") {
        failures.push("has no Content-Security-Policy forbidding network loads".to_string());
    }
    failures
}

/// The opening tag of the element with `id`, if present.
fn opening_tag<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    Some(&dom[start..=end])
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let len = tag[at..].find('"')?;
    Some(&tag[at..at + len])
}

/// The element's content up to the next element with an `id` of the report's sections: the
/// content of a section is what follows its opening tag.
fn section_text<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let rest = &dom[at..];
    let end = rest.find("</section>").unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The drawn flame graph (when the page has one) starts each stack at its thread's entry (no
/// bar of the runtime's start: `_start`, libc's start, `std::rt::lang_start`), and with
/// `waiting` it draws waiting apart (a `[waiting]` bar in the waiting colour).
fn flame_checks(dom: &str, waiting: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let Some(flame) = section_text(dom, "flame") else {
        if waiting {
            failures.push("no flame graph section".to_string());
        }
        return failures;
    };
    if !flame.contains("<rect") {
        if waiting {
            failures.push("the flame graph drew no bars".to_string());
        }
        return failures;
    }
    for start in ["<title>_start", "__libc_start", "lang_start_internal"] {
        if flame.contains(start) {
            failures.push(format!(
                "the flame graph draws a bar of the thread's start ({start}): stacks should start at the thread's entry"
            ));
        }
    }
    if waiting && !(flame.contains("<title>[waiting]") && flame.contains("fill=\"#a0cbe8\"")) {
        failures.push(
            "the flame graph does not draw waiting apart (no [waiting] bar in its colour)"
                .to_string(),
        );
    }
    failures
}

/// The sampled op table beside the flame graph (every page checked is of a sampled run): drawn
/// with rows, as many `<tr>` as it claims, and at least one Candle op's row under a span path.
fn sampled_ops_checks(dom: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let Some(tag) = opening_tag(dom, "flame-ops") else {
        failures.push("the sampled op table (#flame-ops) is missing".to_string());
        return failures;
    };
    match attr(tag, "data-rows").and_then(|v| v.parse::<u64>().ok()) {
        Some(n) if n > 0 => {
            let text = section_text(dom, "flame-ops").unwrap_or("");
            let trs = text.matches("<tr").count() as u64;
            if trs < n {
                failures.push(format!(
                    "the sampled op table claims {n} rows but the DOM has {trs} <tr> elements"
                ));
            }
            if !text.contains("class=\"row-op\"") {
                failures.push("the sampled op table has no op row".to_string());
            }
        }
        _ => failures.push("the sampled op table (#flame-ops) rendered no rows".to_string()),
    }
    failures
}

/// The torch section: with `beside_torch` (a report given `--against-torch`) drawn, its kind
/// table with as many `<tr>` as it claims rows and the diagnoses' block; else hidden.
fn torch_checks(dom: &str, beside_torch: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let hidden = opening_tag(dom, "torch-section").map(|t| t.contains(" hidden"));
    if !beside_torch {
        if hidden == Some(false) {
            failures.push("the torch section is shown without a torch run".to_string());
        }
        return failures;
    }
    if hidden != Some(false) {
        failures.push("the torch section (#torch-section) is missing or hidden".to_string());
        return failures;
    }
    match opening_tag(dom, "torch-kinds")
        .and_then(|t| attr(t, "data-rows"))
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(n) if n > 0 => {
            let text = section_text(dom, "torch-kinds").unwrap_or("");
            let trs = text
                .split("id=\"torch-layers\"")
                .next()
                .unwrap_or("")
                .matches("<tr")
                .count() as u64;
            if trs < n {
                failures.push(format!(
                    "the torch kind table claims {n} rows but the DOM has {trs} <tr> elements"
                ));
            }
        }
        _ => failures.push("the torch kind table (#torch-kinds) rendered no rows".to_string()),
    }
    if opening_tag(dom, "torch-diagnoses").is_none() {
        failures.push("the torch diagnoses (#torch-diagnoses) are missing".to_string());
    }
    failures
}

/// The flame section shows `tracegraph hot`'s hints: `want` of them (`hot --json`'s), each
/// an item of `#flame-hints` (drawn only when there is one).
fn hints_checks(dom: &str, want: usize) -> Vec<String> {
    let drawn = opening_tag(dom, "flame-hints")
        .and_then(|t| attr(t, "data-rows"))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let items = section_text(dom, "flame-hints")
        .and_then(|t| t.split("</ul>").next())
        .map_or(0, |t| t.matches("<li").count());
    if drawn == want && items == want {
        Vec::new()
    } else {
        vec![format!(
            "the flame section shows {items} hint(s) (data-rows {drawn}); `tracegraph hot` gives {want}"
        )]
    }
}

/// Checks on the DOM after the report's script ran.
fn dom_checks(dom: &str, needs_comparison: bool) -> Vec<String> {
    let mut failures = Vec::new();
    match dom.find("<html").map(|i| &dom[i..]).and_then(|h| {
        let end = h.find('>')?;
        Some(&h[..=end])
    }) {
        Some(tag) => match attr(tag, "data-tg-status") {
            Some("ok") => {}
            other => failures.push(format!(
                "the report's script did not finish (data-tg-status = {other:?})"
            )),
        },
        None => failures.push("no <html> element in the DOM".to_string()),
    }
    match section_text(dom, "tg-errors") {
        Some(text) => {
            let content = text
                .split_once('>')
                .map_or("", |(_, c)| c)
                .split("</pre>")
                .next()
                .unwrap_or("");
            if !content.trim().is_empty() {
                failures.push(format!("the page recorded errors: {}", content.trim()));
            }
        }
        None => failures.push("no #tg-errors element (error hooks missing)".to_string()),
    }
    let rows = |id: &str| -> Option<u64> {
        opening_tag(dom, id)
            .and_then(|t| attr(t, "data-rows"))
            .and_then(|v| v.parse().ok())
    };
    for (id, what) in [("op-table", "op table"), ("span-tree", "span tree")] {
        match rows(id) {
            Some(n) if n > 0 => {
                let text = section_text(dom, id).unwrap_or("");
                let trs = text.matches("<tr").count() as u64;
                if trs < n {
                    failures.push(format!(
                        "the {what} claims {n} rows but the DOM has {trs} <tr> elements"
                    ));
                }
            }
            Some(_) => failures.push(format!("the {what} (#{id}) rendered no rows")),
            None => failures.push(format!("the {what} (#{id}) is missing or not rendered")),
        }
    }
    match opening_tag(dom, "memory-chart") {
        Some(tag) if attr(tag, "data-rendered") == Some("svg") => {
            let text = section_text(dom, "memory-chart").unwrap_or("");
            if !text.contains("<svg") || !text.contains("<path") {
                failures.push("the memory chart has no SVG paths".to_string());
            }
            if !text.contains("class=\"peak-marker\"") {
                failures.push("the memory chart does not mark the peak".to_string());
            }
        }
        Some(tag) => failures.push(format!(
            "the memory chart is not an SVG chart (data-rendered = {:?})",
            attr(tag, "data-rendered")
        )),
        None => failures.push("the memory chart (#memory-chart) is missing".to_string()),
    }
    // The demo is sampled: the flame graph of its sampled stacks must be drawn.
    match opening_tag(dom, "flame") {
        Some(tag) if attr(tag, "data-rendered") == Some("svg") => {
            if !section_text(dom, "flame").unwrap_or("").contains("<rect") {
                failures.push("the flame graph (#flame) has no frames".to_string());
            }
        }
        Some(tag) => failures.push(format!(
            "the flame graph is not drawn (data-rendered = {:?})",
            attr(tag, "data-rendered")
        )),
        None => failures.push("the flame graph (#flame) is missing".to_string()),
    }
    if needs_comparison && rows("comparison").is_none_or(|n| n == 0) {
        failures.push("the comparison (#comparison) rendered no rows".to_string());
    }
    // The caveat `tracegraph compare` prints (what the intervals cover) heads the comparison.
    if needs_comparison
        && !section_text(dom, "comparison-caveat").is_some_and(|t| t.contains("intervals: "))
    {
        failures.push(
            "the comparison does not state what its intervals cover (#comparison-caveat)"
                .to_string(),
        );
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        for (input, want) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foobar", "Zm9vYmFy"),
            (&[0xff, 0xfe, 0x00][..], "//4A"),
        ] {
            let mut s = String::new();
            base64_into(input, &mut s);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn speedscope_dom_checks_find_warnings_importers_and_split_frames() {
        let ok = r#"<html><body><table><tr><td>1 ms</td><td><span style="x"></span>backward {&quot;kind&quot;:&quot;function&quot;}</td></tr>
<tr><td>1 ms</td><td><span></span>matmul</td></tr></table>
<pre id="tg-console" hidden="">log: Importing as Trace Event Format profile
</pre></body></html>"#;
        let r = parse_speedscope_dom(ok);
        assert_eq!(r.frames, ["backward {\"kind\":\"function\"}", "matmul"]);
        assert!(judge_speedscope(&r, "Trace Event Format", Some(("backward", 1))).is_empty());
        // The wrong importer, a warning, a failure, and one frame per call.
        let bad = ok
            .replace("Trace Event Format profile", "Chrome Timeline")
            .replace(
                "</pre>",
                "warn: ts=5: Tried to end \"a\"\n</pre>Something went wrong",
            )
            .replace("matmul", "backward {&quot;span_id&quot;:2}");
        let f = judge_speedscope(
            &parse_speedscope_dom(&bad),
            "Trace Event Format",
            Some(("backward", 1)),
        );
        assert_eq!(f.len(), 4, "{f:?}");
        let stderr = "[1:1:INFO:CONSOLE:188] \"speedscope v1.25.0\", source: x\n\
                      [1:1:INFO:CONSOLE:20] \"[.WebGL-0x1]GL Driver Message (OpenGL, Performance, GL_CLOSE_PATH_NV, High): GPU stall due to ReadPixels\", source: y\n\
                      [1:1:INFO:CONSOLE:9] \"Uncaught TypeError: t.sort is not a function\", source: z";
        assert_eq!(unexpected_stderr_console(stderr).len(), 1);
    }

    #[test]
    fn flame_checks_want_stacks_from_the_thread_entry_and_waiting_apart() {
        let good = r##"<section><div id="flame" data-rendered="svg"><svg><g><rect fill="#59a14f"></rect><title>main (src/main.rs)</title></g><g><rect fill="#a0cbe8"></rect><title>[waiting] 3 samples</title></g></svg></div></section>"##;
        assert!(flame_checks(good, true).is_empty());
        let rooted = good.replace(
            "<title>main (src/main.rs)",
            "<title>lang_start_internal (rt.rs)",
        );
        assert_eq!(flame_checks(&rooted, false).len(), 1);
        let no_wait = good.replace("#a0cbe8", "#bab0ac");
        assert_eq!(flame_checks(&no_wait, true).len(), 1);
        assert!(flame_checks(&no_wait, false).is_empty());
    }

    #[test]
    fn sampled_ops_checks_want_the_op_table_with_op_rows() {
        let good = r#"<section><div id="flame" data-rendered="svg"><svg><rect></rect></svg><h3>Sampled op table</h3><div id="flame-ops" data-rows="2"><table><thead><tr><th>span path / op</th></tr></thead><tbody><tr class="row-span"><td>llama.forward</td></tr><tr class="row-op"><td>matmul</td></tr></tbody></table></div></div></section>"#;
        assert!(sampled_ops_checks(good).is_empty());
        assert_eq!(
            sampled_ops_checks(&good.replace("row-op", "row-span")).len(),
            1
        );
        assert_eq!(
            sampled_ops_checks(&good.replace("data-rows=\"2\"", "data-rows=\"0\"")).len(),
            1
        );
        assert_eq!(
            sampled_ops_checks(&good.replace("flame-ops", "other")).len(),
            1
        );
    }

    #[test]
    fn dom_checks_accept_a_rendered_page_and_reject_a_broken_one() {
        let good = r#"<html lang="en" data-tg-status="ok"><body>
<pre id="tg-errors" hidden=""></pre>
<section><div id="op-table" data-rows="2"><table><tr><th>a</th></tr><tr><td>1</td></tr><tr><td>2</td></tr></table></div></section>
<section><div id="span-tree" data-rows="1"><table><tr><td>x</td></tr></table></div></section>
<section><div id="memory-chart" data-rendered="svg"><svg><path d="M0 0"></path><line class="peak-marker"></line></svg></div></section>
<section><div id="flame" data-rendered="svg"><svg><rect x="0"></rect></svg></div></section>
</body></html>"#;
        assert_eq!(dom_checks(good, false), Vec::<String>::new());
        // A comparison page needs its rows and `compare`'s caveat.
        assert_eq!(dom_checks(good, true).len(), 2);
        let compared = good.replace(
            "<section><div id=\"op-table\"",
            "<section><div id=\"comparison\" data-rows=\"3\"><ul class=\"warnings\" id=\"comparison-caveat\"><li>intervals: one run a side</li></ul></div></section>\n<section><div id=\"op-table\"",
        );
        assert_eq!(dom_checks(&compared, true), Vec::<String>::new());

        let broken = good
            .replace("data-tg-status=\"ok\"", "data-tg-status=\"rendering\"")
            .replace(
                "<pre id=\"tg-errors\" hidden=\"\"></pre>",
                "<pre id=\"tg-errors\">TypeError: x</pre>",
            )
            .replace("data-rows=\"2\"", "data-rows=\"0\"");
        let failures = dom_checks(&broken, false);
        assert_eq!(failures.len(), 3, "{failures:?}");
    }

    #[test]
    fn torch_checks_want_the_kind_table_and_diagnoses_beside_torch_and_hide_them_otherwise() {
        let good = r#"<section class="card" id="torch-section"><div id="torch" data-rows="3">
<div id="torch-kinds" data-rows="2"><table><tr><th>kind</th></tr><tr><td>a</td></tr><tr><td>b</td></tr></table></div>
<div id="torch-layers" data-rows="1"><table><tr><td>x</td></tr></table></div>
<div id="torch-diagnoses" data-rows="0"></div></div></section>"#;
        assert_eq!(torch_checks(good, true), Vec::<String>::new());
        assert_eq!(torch_checks(good, false).len(), 1);
        let hidden = good.replace(r#"id="torch-section""#, r#"id="torch-section" hidden="""#);
        assert_eq!(torch_checks(&hidden, false), Vec::<String>::new());
        assert_eq!(torch_checks(&hidden, true).len(), 1);
        assert_eq!(
            torch_checks(
                &good.replace("<tr><td>a</td></tr><tr><td>b</td></tr>", ""),
                true
            )
            .len(),
            1
        );
        assert_eq!(
            torch_checks(&good.replace("torch-diagnoses", "other"), true).len(),
            1
        );
    }

    #[test]
    fn table_width_checks_fail_on_an_off_screen_key_column_and_pass_when_all_are_visible() {
        let dom = |records: &str| {
            format!(
                "<html><body><main></main><pre id=\"tg-widths\" hidden=\"\">{records}</pre></body></html>"
            )
        };
        let fits = r#"[{"table":"Op table","table_px":1160,"box_px":1161,"declared":false,"keys":11,"off":[]},{"table":"Memory timeline / Largest allocations","table_px":1400,"box_px":1161,"declared":true,"keys":3,"off":[]}]"#;
        assert_eq!(judge_table_widths(&dom(fits), 1280), (2, Vec::new()));
        // The issue's table: bytes and category beyond a 570 px box.
        let off = r#"[{"table":"Memory timeline / Largest allocations live at the peak","table_px":1013,"box_px":571,"declared":false,"keys":7,"off":["category","bytes"]}]"#;
        let (n, f) = judge_table_widths(&dom(off), 1280);
        assert_eq!(n, 1);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].contains("1013 px wide in a 571 px box") && f[0].contains("category, bytes"),
            "{f:?}"
        );
        // A name with markup characters arrives escaped in the dumped DOM.
        let escaped = off.replace("Memory timeline", "a &lt;b&gt; &amp; c");
        let (_, f) = judge_table_widths(&dom(&escaped), 1920);
        assert!(
            f[0].contains("a <b> & c") && f[0].contains("at 1920 px"),
            "{f:?}"
        );
        // No measurement, or nothing measured, is a failure too.
        assert_eq!(judge_table_widths("<html></html>", 1280).1.len(), 1);
        assert_eq!(judge_table_widths(&dom("[]"), 1280).1.len(), 1);
        assert_eq!(judge_table_widths(&dom("{}"), 1280).1.len(), 1);
    }

    #[test]
    fn the_measuring_script_runs_after_the_page() {
        let page = "<html><body><p>x</p><script>draw()</script></body></html>";
        let with = with_script_at_end(page, "measure()").unwrap_or_default();
        let (draw, measure) = (with.find("draw()"), with.find("measure()"));
        assert!(draw < measure && measure < with.find("</body>"), "{with}");
        assert_eq!(with_script_at_end("<p>no body</p>", "m()"), None);
    }

    #[test]
    fn hints_checks_want_as_many_hints_as_hot_gives() {
        let dom = r#"<section><div id="flame"><ul class="warnings hints" id="flame-hints" data-rows="2"><li data-rule="pool_waiting">hint: a</li><li data-rule="too_few_samples">hint: b</li></ul><p>x</p></div></section>"#;
        assert!(hints_checks(dom, 2).is_empty());
        assert_eq!(hints_checks(dom, 3).len(), 1);
        // None drawn: right only when `hot` gives none.
        assert!(hints_checks("<section><div id=\"flame\"></div></section>", 0).is_empty());
        assert_eq!(
            hints_checks("<section><div id=\"flame\"></div></section>", 1).len(),
            1
        );
    }

    #[test]
    fn static_checks_reject_external_resources() {
        let ok = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\">";
        assert!(static_checks(ok).is_empty());
        let bad = format!("{ok}<script src=\"https://cdn.example/x.js\"></script>");
        assert_eq!(static_checks(&bad).len(), 1);
    }

    #[test]
    fn file_urls_escape_odd_characters() {
        let dir = std::env::temp_dir();
        let url = file_url(&dir).unwrap_or_default();
        assert!(url.starts_with("file:///"), "{url}");
        assert!(!url.contains(' '));
    }
}
