//! Tidy tests over the source tree.
//!
//! The rules, each a test:
//!
//! - the documented dependency direction between crates, and the external dependencies each
//!   crate's row in `docs/ARCHITECTURE.md` names;
//! - no two modules of a crate import each other (`crate::` / `super::` paths, re-exports
//!   followed to where they come from);
//! - trace-report's sources never read the raw event vectors of the loaded trace;
//! - one `//!` line, at most 100 columns, opens every source file;
//! - code, comments and manifests name no issue numbers.
//!
//! `docs/ARCHITECTURE.md` names each crate's dependencies; [`ALLOWED`] is that table in code.
//! A crate's `Cargo.toml` that gains a workspace dependency outside its row (in any
//! dependency section, dev-dependencies included, since `cargo tree` shows those too) fails
//! `cargo test`, so the direction cannot erode one convenient import at a time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Per workspace crate, the workspace crates it may depend on (normal, build and dev).
/// Dev-only helpers (`testkit`, `vecad`) are listed where their tests use them.
const ALLOWED: &[(&str, &[&str])] = &[
    ("graph-core", &[]),
    ("ad-cache", &["graph-core", "vecad"]),
    ("vecad", &["graph-core", "ad-cache"]),
    ("trace-record", &[]),
    ("trace-sampler", &["trace-record"]),
    ("trace-heap", &["trace-record", "trace-sampler"]),
    // trace-analyze only as a dev-dependency: the real-model tests read their traces with the
    // analyses the CLI runs (recording itself never depends on analysis).
    (
        "trace-candle",
        &[
            "trace-record",
            "trace-sampler",
            "trace-heap",
            "trace-analyze",
        ],
    ),
    ("trace-export", &["trace-record", "testkit"]),
    ("trace-parquet", &["trace-record", "testkit"]),
    (
        "trace-analyze",
        &["trace-record", "graph-core", "ad-cache", "testkit"],
    ),
    (
        "trace-report",
        &["trace-analyze", "trace-record", "testkit"],
    ),
    (
        "tracegraph",
        &[
            "trace-analyze",
            "trace-export",
            "trace-parquet",
            "trace-report",
            "trace-record",
            "trace-candle",
            "testkit",
        ],
    ),
    ("testkit", &["trace-record"]),
];

fn root() -> PathBuf {
    super::root()
}

/// The names of the workspace crates under `crates/`.
fn workspace_crates() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let dir = root().join("crates");
    for entry in std::fs::read_dir(&dir).expect("crates/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.join("Cargo.toml").is_file() {
            names.insert(
                path.file_name()
                    .expect("a name")
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    names
}

/// The workspace crates a manifest names in any of its dependency tables.
fn workspace_deps(manifest: &str, crates: &BTreeSet<String>) -> BTreeSet<String> {
    manifest_deps(manifest)
        .into_iter()
        .filter(|(name, _)| crates.contains(name))
        .map(|(name, _)| name)
        .collect()
}

/// Every dependency a manifest names, with whether it is a dev-dependency: the keys of
/// `[dependencies]`-style tables (build, dev and target-specific ones included) and the
/// names of `[dependencies.NAME]`-style tables.
fn manifest_deps(manifest: &str) -> Vec<(String, bool)> {
    let is_deps = |s: &str| {
        s.rsplit('.')
            .next()
            .is_some_and(|l| l.ends_with("dependencies"))
    };
    let is_dev = |s: &str| s.contains("dev-dependencies");
    let mut deps = Vec::new();
    // Inside a dependency table: whether it is a dev one.
    let mut table: Option<bool> = None;
    for line in manifest.lines().map(str::trim) {
        if let Some(section) = line.strip_prefix('[') {
            let section = section.trim_end_matches(']');
            table = is_deps(section).then(|| is_dev(section));
            if let Some((head, name)) = section.rsplit_once('.')
                && is_deps(head)
            {
                deps.push((name.trim_matches('"').to_string(), is_dev(head)));
            }
            continue;
        }
        let Some(dev) = table else {
            continue;
        };
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if !key.is_empty() {
            deps.push((key.to_string(), dev));
        }
    }
    deps
}

#[test]
fn every_crate_has_a_row_and_depends_only_in_the_documented_direction() {
    let crates = workspace_crates();
    let listed: BTreeSet<String> = ALLOWED.iter().map(|(c, _)| c.to_string()).collect();
    assert_eq!(
        crates, listed,
        "every crate under crates/ needs a row in tidy::ALLOWED (and in docs/ARCHITECTURE.md)"
    );
    let mut problems = Vec::new();
    for (name, allowed) in ALLOWED {
        let path = root().join("crates").join(name).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path).expect("manifest is readable");
        for dep in workspace_deps(&manifest, &crates) {
            // A crate's dev-dependency on itself only turns its own features on for its tests.
            if dep != *name && !allowed.contains(&dep.as_str()) {
                problems.push(format!(
                    "{name} depends on {dep}, against the direction in docs/ARCHITECTURE.md"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_dependency_parser_sees_every_form() {
    let crates: BTreeSet<String> = ["trace-analyze", "trace-record", "testkit"]
        .into_iter()
        .map(String::from)
        .collect();
    let manifest = r#"
[package]
name = "x"
trace-analyze = "not a dependency: a package key"

[dependencies]
trace-record.workspace = true
serde = "1"

[dev-dependencies]
"testkit" = { path = "../testkit" }

[target.'cfg(unix)'.dependencies.trace-analyze]
workspace = true
"#;
    let got: Vec<String> = workspace_deps(manifest, &crates).into_iter().collect();
    assert_eq!(got, ["testkit", "trace-analyze", "trace-record"]);
}

#[test]
fn the_architecture_document_names_every_crate() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md is readable");
    let missing: Vec<String> = workspace_crates()
        .into_iter()
        .filter(|c| !doc.contains(&format!("`crates/{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/ARCHITECTURE.md: {missing:?}"
    );
}

/// Every `.rs` file under `dir`, recursively (iteratively).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file of the crates, the benches and xtask.
fn source_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = rust_files(&root.join("crates"));
    files.extend(rust_files(&root.join("benches")));
    files.extend(rust_files(&root.join("xtask")));
    files
}

#[test]
fn every_source_file_opens_with_one_line_saying_what_lives_there() {
    let root = root();
    let files = source_files();
    let bad: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let first = text.lines().next().unwrap_or("");
            !(first.starts_with("//! ") && first.len() > 8)
        })
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(bad.is_empty(), "files without a `//!` first line: {bad:#?}");
}

/// A source file's module path inside its crate (`src/lib.rs` → `[]`, `src/a/mod.rs` and
/// `src/a.rs` → `["a"]`, `src/a/b.rs` → `["a", "b"]`); `None` for files outside `src/`.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_string());
    } else if stem != "mod" && !parts.is_empty() {
        // A `main.rs` or `lib.rs` below `src/` (a `bin/` target) is its own root: skip it.
        return None;
    }
    Some(parts)
}

/// The code of a Rust file with `//` comments and string literals blanked, so that paths
/// named in docs or messages are not read as imports.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '"' && prev != '\\' {
                    in_str = false;
                }
                prev = if c == '\\' && prev == '\\' { ' ' } else { c };
                out.push(' ');
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' {
                in_str = true;
            }
            prev = c;
            out.push(c);
        }
        out.push('\n');
    }
    out
}

/// The module paths a file refers to: every `crate::a::b` and `super::c` path in its code,
/// with the braces of `use` trees expanded one level (`use crate::{a::X, b::Y}`).
fn referenced_paths(me: &[String], code: &str) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != ':';
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let (base, skip): (Vec<String>, usize) = if starts_word && rest.starts_with("crate::") {
            (Vec::new(), 7)
        } else if starts_word && rest.starts_with("super::") {
            // `super` of a module file is its parent module.
            let mut base = me.to_vec();
            base.pop();
            let mut skip = 7;
            // `super::super::`
            while bytes[i + skip..]
                .iter()
                .collect::<String>()
                .starts_with("super::")
            {
                base.pop();
                skip += 7;
            }
            (base, skip)
        } else {
            i += 1;
            continue;
        };
        i += skip;
        // Read `a::b::{c::D, e}` or `a::b::X`.
        let mut path = base.clone();
        loop {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            if start == i {
                break;
            }
            path.push(bytes[start..i].iter().collect());
            if bytes[i..].iter().take(2).collect::<String>() == "::" {
                i += 2;
            } else {
                break;
            }
        }
        if i < bytes.len() && bytes[i] == '{' {
            // One level of a use tree: each comma-separated head is a path below `path`.
            let close = bytes[i..]
                .iter()
                .position(|&c| c == '}')
                .map_or(bytes.len(), |p| i + p);
            let inner: String = bytes[i + 1..close].iter().collect();
            for item in inner.split(',') {
                let mut p = path.clone();
                p.extend(
                    item.split("::")
                        .map(|s| s.trim().trim_start_matches('{').trim())
                        .take_while(|s| !s.is_empty() && s.chars().all(is_ident))
                        .map(String::from),
                );
                out.push(p);
            }
            i = close;
        } else {
            out.push(path);
        }
    }
    out
}

/// The module a referenced path lands in: the longest prefix that is a module file; a name
/// re-exported by that module (`pub use m::Name` / `pub use m::{.., Name, ..}`) resolves to
/// the module it comes from, so `crate::Trace` counts as an import of `model`.
fn resolve(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    reexports: &std::collections::BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Option<Vec<String>> {
    let mut len = path.len();
    while len > 0 && !modules.contains(&path[..len].to_vec()) {
        len -= 1;
    }
    let module = path[..len].to_vec();
    if let Some(name) = path.get(len)
        && let Some(origin) = reexports.get(&(module.clone(), name.clone()))
    {
        return Some(origin.clone());
    }
    modules.contains(&module).then_some(module)
}

/// The names a module file re-exports from its own submodules or siblings, with the module
/// each comes from (`pub use model::{Trace, Op};`, `pub use self::a::B;`).
fn reexports_of(
    me: &[String],
    code: &str,
    modules: &BTreeSet<Vec<String>>,
) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let flat = code.replace('\n', " ");
    for stmt in flat.split(';') {
        let stmt = stmt.trim();
        let Some(body) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let body = body.trim();
        let (head, names): (&str, Vec<&str>) = match body.split_once('{') {
            Some((head, rest)) => (
                head.trim_end_matches("::"),
                rest.trim_end_matches('}').split(',').collect(),
            ),
            None => match body.rsplit_once("::") {
                Some((head, name)) => (head, vec![name]),
                None => continue,
            },
        };
        let mut base: Vec<String> = if let Some(h) = head.strip_prefix("crate::") {
            h.split("::").map(String::from).collect()
        } else {
            let h = head.strip_prefix("self::").unwrap_or(head);
            me.iter()
                .cloned()
                .chain(h.split("::").map(String::from))
                .collect()
        };
        base.retain(|s| !s.is_empty());
        for name in names {
            let name = name.trim();
            let name = name.split(" as ").last().unwrap_or(name).trim();
            // `a::B` inside the braces: the module is `base::a`.
            let (sub, item) = match name.rsplit_once("::") {
                Some((sub, item)) => (Some(sub), item),
                None => (None, name),
            };
            let mut origin = base.clone();
            if let Some(sub) = sub {
                origin.extend(sub.split("::").map(|s| s.trim().to_string()));
            }
            if !item.is_empty() && item != "*" && modules.contains(&origin) {
                out.push((item.to_string(), origin));
            }
        }
    }
    out
}

/// The imports between the modules of one crate's `src/`: for each module, the modules it
/// names (through `crate::`/`super::` paths and re-exports) that are neither its ancestors nor
/// its descendants (a parent declaring and re-exporting its children, and a child naming its
/// parent's items, is one module tree). Tests inside a file are not imports.
fn module_edges(src: &Path) -> std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    use std::collections::BTreeMap;
    let mut files: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for f in rust_files(src) {
        if let Some(m) = module_path(src, &f) {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            // Tests inside a file (`#[cfg(test)] mod tests { use super::*; }`) are not imports.
            let text = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            files.insert(m, code_only(&text));
        }
    }
    let modules: BTreeSet<Vec<String>> = files.keys().cloned().collect();
    let mut reexports = BTreeMap::new();
    for (m, code) in &files {
        for (name, origin) in reexports_of(m, code, &modules) {
            reexports.insert((m.clone(), name), origin);
        }
    }
    // Edges between modules that are not ancestor and descendant (a parent declaring and
    // re-exporting its children, and a child naming its parent's items, is one module tree).
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, code) in &files {
        for path in referenced_paths(m, code) {
            let Some(target) = resolve(&path, &modules, &reexports) else {
                continue;
            };
            let related = target.starts_with(m) || m.starts_with(&target);
            if !related {
                edges.entry(m.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// Pairs (and longer rings) of modules in one crate's `src/` that import each other.
fn module_circles(src: &Path) -> Vec<String> {
    use std::collections::BTreeMap;
    let edges = module_edges(src);
    let modules: BTreeSet<Vec<String>> = edges
        .iter()
        .flat_map(|(m, to)| std::iter::once(m).chain(to))
        .cloned()
        .collect();
    // A module is in a circle when it reaches itself; report each circle once by its members.
    let reach = |from: &Vec<String>| -> BTreeSet<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<Vec<String>> = edges.get(from).into_iter().flatten().cloned().collect();
        while let Some(n) = todo.pop() {
            if seen.insert(n.clone()) {
                todo.extend(edges.get(&n).into_iter().flatten().cloned());
            }
        }
        seen
    };
    let reaches: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> =
        modules.iter().map(|m| (m.clone(), reach(m))).collect();
    let mut circles = BTreeSet::new();
    for (m, r) in &reaches {
        if r.contains(m) {
            let ring: Vec<String> = reaches
                .iter()
                .filter(|(o, ro)| r.contains(*o) && ro.contains(m))
                .map(|(o, _)| {
                    if o.is_empty() {
                        "crate".into()
                    } else {
                        o.join("::")
                    }
                })
                .collect();
            circles.insert(ring.join(" <-> "));
        }
    }
    circles.into_iter().collect()
}

/// trace-analyze's folders by concern, in layers, each with the folders it may import: the
/// loaded model below everything, the event analyses on it, sampled CPU beside them, several
/// runs on top. The crate root's shared modules (`error`, `format`, `stats`) import no folder;
/// `summary`, which draws on all of them, is imported by none.
const ANALYZE_SHARED: &[&str] = &["error", "format", "stats"];

/// See [`ANALYZE_SHARED`].
const ANALYZE_LAYERS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("events", &["model"]),
    ("sampled", &["model", "events"]),
    ("runs", &["model", "events", "sampled"]),
    ("error", &[]),
    ("format", &[]),
    ("stats", &[]),
];

/// The imports of `edges` that cross trace-analyze's layers ([`ANALYZE_LAYERS`]) the wrong
/// way, as `from -> to` (test modules left out: they may build whatever they check).
fn layer_breaches(
    edges: &std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (from, targets) in edges {
        let Some(top) = from.first() else { continue };
        if from.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let Some((_, allowed)) = ANALYZE_LAYERS.iter().find(|(l, _)| l == top) else {
            continue;
        };
        for to in targets {
            let Some(to_top) = to.first() else { continue };
            let shared = ANALYZE_SHARED.contains(&to_top.as_str());
            let layered =
                !shared && (to_top == "summary" || ANALYZE_LAYERS.iter().any(|(l, _)| l == to_top));
            if to_top != top && layered && !allowed.contains(&to_top.as_str()) {
                out.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    out
}

#[test]
fn trace_analyze_folders_import_only_the_layers_below_them() {
    let src = root().join("crates/trace-analyze/src");
    for (folder, _) in ANALYZE_LAYERS.iter().take(4) {
        assert!(
            src.join(folder).join("mod.rs").is_file(),
            "trace-analyze/src/{folder}/mod.rs"
        );
    }
    let breaches = layer_breaches(&module_edges(&src));
    assert!(
        breaches.is_empty(),
        "trace-analyze imports across its layers (model <- events <- sampled <- runs): {breaches:#?}"
    );
}

#[test]
fn the_layer_check_sees_an_upward_import_and_lets_tests_through() {
    let edge = |from: &str, to: &str| {
        (
            from.split("::").map(String::from).collect::<Vec<_>>(),
            BTreeSet::from([to.split("::").map(String::from).collect::<Vec<_>>()]),
        )
    };
    let edges = std::collections::BTreeMap::from([
        edge("sampled::hot", "runs::compare"),
        edge("model::load", "events::ops"),
        edge("runs::compare", "events::spans"),
        edge("sampled::hot::tests", "summary"),
        edge("events::ops", "summary"),
        edge("stats", "model::trace"),
        edge("events::spans", "stats"),
    ]);
    assert_eq!(
        layer_breaches(&edges),
        [
            "events::ops -> summary",
            "model::load -> events::ops",
            "sampled::hot -> runs::compare",
            "stats -> model::trace"
        ]
    );
}

/// The most names trace-analyze's root may hold: the entry points the CLI, the report and the
/// exports use; the rest is reached through the folders' namespaces.
const ANALYZE_ROOT_BUDGET: usize = 120;

/// The names a crate root's code makes public at the root: each item of a `pub use` (a glob
/// counts as one), each `pub mod`, and each item it declares `pub` itself.
fn root_names(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let flat = code.replace('\n', " ");
    for stmt in flat.split(';') {
        let stmt = stmt.trim();
        if let Some(body) = stmt.strip_prefix("pub use ") {
            let names = match body.split_once('{') {
                Some((_, rest)) => rest.trim_end_matches('}').split(',').collect(),
                None => vec![body.rsplit("::").next().unwrap_or(body)],
            };
            out.extend(
                names
                    .into_iter()
                    .map(|n| n.split(" as ").last().unwrap_or(n).trim().to_string())
                    .filter(|n| !n.is_empty()),
            );
        }
    }
    for line in code.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["pub", kind, name, ..] = words.as_slice()
            && matches!(
                *kind,
                "mod" | "fn" | "struct" | "enum" | "const" | "static" | "type" | "trait"
            )
        {
            let end = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            out.push(name[..end.unwrap_or(name.len())].to_string());
        }
    }
    out
}

#[test]
fn trace_analyze_root_stays_within_its_budget() {
    let lib = std::fs::read_to_string(root().join("crates/trace-analyze/src/lib.rs"))
        .expect("trace-analyze's lib.rs");
    let names = root_names(&code_only(&lib));
    assert!(
        names.len() <= ANALYZE_ROOT_BUDGET,
        "trace-analyze's root holds {} names (budget {ANALYZE_ROOT_BUDGET}): re-export at the root \
         only what other crates use, and reach the rest through `model::`, `events::`, \
         `sampled::`, `runs::`",
        names.len()
    );
}

#[test]
fn the_root_name_counter_sees_each_form() {
    let code = "pub mod events;\nmod private;\npub use a::{B, c as D,\n    e};\npub use f::G;\n\
                pub fn h() {}\npub(crate) fn hidden() {}\npub struct I;\npub use j::*;\n";
    assert_eq!(
        root_names(code),
        ["B", "D", "e", "G", "*", "events", "h", "I"]
    );
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let mut problems = Vec::new();
    let mut dirs: Vec<PathBuf> = workspace_crates()
        .into_iter()
        .map(|c| root().join("crates").join(c).join("src"))
        .collect();
    dirs.push(root().join("xtask/src"));
    dirs.push(root().join("benches/src"));
    for src in dirs {
        for circle in module_circles(&src) {
            let name = src.parent().map_or_else(String::new, |p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            });
            problems.push(format!("{name}: {circle}"));
        }
    }
    assert!(
        problems.is_empty(),
        "modules that import each other: {problems:#?}"
    );
}

#[test]
fn the_circle_finder_sees_a_circle_through_a_reexport_and_ignores_the_module_tree() {
    let dir = std::env::temp_dir().join(format!("tidy-circles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("session")).expect("temp dir");
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).expect("write");
    write(
        "lib.rs",
        "//! x\nmod a;\nmod b;\nmod session;\npub use a::A;\n",
    );
    // `b` names `crate::A`, re-exported from `a`; `a` names `b` directly: a circle.
    write("a.rs", "//! a\nuse crate::b::B;\npub struct A;\n");
    write(
        "b.rs",
        "//! b\nuse crate::A; // crate::session::S in a comment is no import\npub struct B;\n",
    );
    // A parent and its child naming each other is one module tree, not a circle.
    write("session/mod.rs", "//! s\nmod inner;\npub use inner::S;\n");
    write(
        "session/inner.rs",
        "//! i\nuse super::super::b::B as _B;\npub struct S;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    );
    let circles = module_circles(&src);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(circles, ["a <-> b"]);
}

/// The external (non-workspace) crates a manifest depends on outside dev-dependencies.
fn external_deps(manifest: &str, crates: &BTreeSet<String>) -> BTreeSet<String> {
    manifest_deps(manifest)
        .into_iter()
        .filter(|(name, dev)| !dev && !crates.contains(name))
        .map(|(name, _)| name)
        .collect()
}

/// The "depends on" column of each crate's row in docs/ARCHITECTURE.md, as the set of words.
fn documented_deps() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md is readable");
    let mut rows = std::collections::BTreeMap::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix("| `crates/") else {
            continue;
        };
        let Some((name, _)) = rest.split_once('`') else {
            continue;
        };
        let column = line
            .trim_end()
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap_or("");
        let words = column
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect();
        rows.insert(name.to_string(), words);
    }
    rows
}

#[test]
fn the_architecture_table_names_each_crates_external_dependencies() {
    let crates = workspace_crates();
    let rows = documented_deps();
    let mut problems = Vec::new();
    for name in &crates {
        let Some(words) = rows.get(name) else {
            problems.push(format!(
                "{name}: no row in the crate table of docs/ARCHITECTURE.md"
            ));
            continue;
        };
        let path = root().join("crates").join(name).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path).expect("manifest is readable");
        for dep in external_deps(&manifest, &crates) {
            if !words.contains(&dep) {
                problems.push(format!(
                    "{name} depends on {dep}, which its row in docs/ARCHITECTURE.md does not name"
                ));
            }
        }
        // And the row names no workspace crate the manifest does not depend on.
        let have = workspace_deps(&manifest, &crates);
        for w in words {
            if crates.contains(w) && w != name && !have.contains(w) {
                problems.push(format!(
                    "docs/ARCHITECTURE.md says {name} depends on {w}; its Cargo.toml does not"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_external_dependency_parser_skips_dev_dependencies() {
    let crates: BTreeSet<String> = ["trace-record"].into_iter().map(String::from).collect();
    let manifest = r#"
[dependencies]
trace-record.workspace = true
serde = "1"
thiserror.workspace = true

[target.'cfg(target_os = "linux")'.dependencies]
libc = { workspace = true, optional = true }

[target.'cfg(unix)'.dependencies.rustix]
workspace = true

[dev-dependencies]
proptest = "1"
"#;
    let got: Vec<String> = external_deps(manifest, &crates).into_iter().collect();
    assert_eq!(got, ["libc", "rustix", "serde", "thiserror"]);
}

#[test]
fn first_doc_lines_fit_in_100_columns() {
    let root = root();
    let files = source_files();
    let long: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            text.lines().next().unwrap_or("").chars().count() > 100
        })
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        long.is_empty(),
        "first `//!` lines over 100 columns: {long:#?}"
    );
}

/// Whether a line names a tracker issue by number (`issue 12`, `issues 10 and 11`).
fn names_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let digits_after = |s: &str| {
        let s = s.trim_start_matches(['s', ' ', '#']);
        s.starts_with(|c: char| c.is_ascii_digit())
    };
    lower.match_indices("issue").any(|(at, _)| {
        let before_ok = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
        before_ok && digits_after(&lower[at + 5..])
    })
}

#[test]
fn code_comments_and_manifests_name_no_issue_numbers() {
    let root = root();
    let mut files = source_files();
    files.push(root.join("Cargo.toml"));
    files.push(root.join("benches/Cargo.toml"));
    files.push(root.join("xtask/Cargo.toml"));
    files.extend(
        workspace_crates()
            .into_iter()
            .map(|c| root.join("crates").join(c).join("Cargo.toml")),
    );
    // This file holds the examples the finder is tested on.
    files.retain(|f| !f.ends_with("xtask/src/tidy.rs"));
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if names_an_issue(line) {
                let rel = f.strip_prefix(&root).unwrap_or(f).display();
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "say why, not which ticket: {found:#?}");
}

#[test]
fn the_issue_number_finder_sees_the_forms_and_not_plain_words() {
    assert!(names_an_issue("// Issue 15: with a 1000 B limit"));
    assert!(names_an_issue("# a real model (issue 11)."));
    assert!(names_an_issue("issues 10 and 11"));
    assert!(!names_an_issue(
        "assert!(issues.is_empty(), \"validation issues: {issues:?}\");"
    ));
    assert!(!names_an_issue("let issue = v.issues()[0];"));
}

/// The members of the loaded trace (`trace_analyze::Trace` in trace-analyze's `model/trace.rs`)
/// that hold or hand out its raw records: fields that are a `Vec`, a map or the sampled
/// stacks, methods that return a slice or an `Option<&…>`, and the record types named by
/// those fields. What a report draws is an analysis of these, computed once in trace-analyze.
fn raw_trace_members(model: &str) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let (mut fields, mut methods, mut types) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let defined: BTreeSet<&str> = model
        .lines()
        .filter_map(|l| l.strip_prefix("pub struct "))
        .filter_map(|l| l.split(|c: char| !c.is_alphanumeric() && c != '_').next())
        .collect();
    let body = |start: &str| -> Vec<&str> {
        model
            .lines()
            .skip_while(|l| !l.starts_with(start))
            .skip(1)
            .take_while(|l| *l != "}")
            .collect()
    };
    for line in body("pub struct Trace {") {
        let Some((name, ty)) = line
            .trim()
            .strip_prefix("pub ")
            .and_then(|l| l.split_once(": "))
        else {
            continue;
        };
        let ty = ty.trim_end_matches(',');
        if ty.starts_with("Vec<")
            || ty.contains("Map<")
            || ty.ends_with("SampledStacks")
            || ty.ends_with("TensorTable")
        {
            fields.insert(name.to_string());
            let last = ty.rsplit("::").next().unwrap_or(ty);
            for word in ty.split(|c: char| !c.is_alphanumeric() && c != '_') {
                if defined.contains(word) || word == last {
                    types.insert(word.to_string());
                }
            }
        }
    }
    // A record table of model/trace.rs's own (a `TensorTable`) holds raw records too: the types
    // its fields name are raw record types.
    let tables: Vec<String> = types
        .iter()
        .filter(|t| t.ends_with("Table") && defined.contains(t.as_str()))
        .cloned()
        .collect();
    for table in tables {
        for line in body(&format!("pub struct {table} {{")) {
            let Some((_, ty)) = line.split_once(": ") else {
                continue;
            };
            for word in ty.split(|c: char| !c.is_alphanumeric() && c != '_') {
                if defined.contains(word) {
                    types.insert(word.to_string());
                }
            }
        }
    }
    let imp = body("impl Trace {").join("\n");
    for sig in imp.split("pub fn ").skip(1) {
        let sig = sig.split('{').next().unwrap_or("");
        let name = sig.split('(').next().unwrap_or("").trim();
        let ret = sig.rsplit_once("->").map_or("", |(_, r)| r.trim());
        if ret.starts_with("&[") || ret.starts_with("Option<&") {
            methods.insert(name.to_string());
        }
    }
    types.retain(|t| t.chars().next().is_some_and(char::is_uppercase));
    (fields, methods, types)
}

/// The identifiers and punctuation of Rust code (comments and strings already blanked), each
/// with its line number.
fn tokens(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut word = String::new();
        for c in line.chars().chain(std::iter::once(' ')) {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                out.push((n + 1, std::mem::take(&mut word)));
            }
            if !c.is_whitespace() {
                out.push((n + 1, c.to_string()));
            }
        }
    }
    out
}

/// Where `code` reads a raw member of a loaded trace: `x.field` or `x.method(` on a binding
/// `x` of type `Trace` (a parameter `x: &Trace` or `x: Option<&Trace>`, `trace`, or a closure
/// or `Some(x)` binding over one), or names a raw record type. Returns `line: what`.
fn raw_trace_reads(
    code: &str,
    raw: &(BTreeSet<String>, BTreeSet<String>, BTreeSet<String>),
) -> Vec<String> {
    let (fields, methods, types) = raw;
    let t = tokens(code);
    let w = |i: usize| t.get(i).map_or("", |(_, s)| s.as_str());
    let mut traces: BTreeSet<&str> = BTreeSet::from(["trace"]);
    for i in 0..t.len() {
        if w(i + 1) == ":" && w(i + 2) != ":" && w(i).starts_with(|c: char| c.is_lowercase()) {
            let ty: Vec<&str> = (i + 2..t.len())
                .map(w)
                .take_while(|s| !matches!(*s, "," | ")" | "=" | ";" | "{"))
                .collect();
            if ty.contains(&"Trace") {
                traces.insert(w(i));
            }
        }
    }
    // Bindings over a trace binding: `x.map(|b|`, `x.and_then(|b|`, `Some(b) = x`.
    loop {
        let before = traces.len();
        for i in 0..t.len() {
            if traces.contains(w(i)) && w(i + 1) == "." && w(i + 3) == "(" && w(i + 4) == "|" {
                traces.insert(w(i + 5));
            }
            let some_of = w(i) == "Some" && w(i + 1) == "(" && w(i + 3) == ")";
            if some_of && w(i + 4) == "=" && traces.contains(w(i + 5)) {
                traces.insert(w(i + 2));
            }
        }
        if traces.len() == before {
            break;
        }
    }
    let mut found = Vec::new();
    for (i, (line, word)) in t.iter().enumerate() {
        if types.contains(word) {
            found.push(format!("{line}: names the raw record type `{word}`"));
        }
        if !traces.contains(word.as_str()) || w(i + 1) != "." {
            continue;
        }
        let member = w(i + 2);
        let is_call = w(i + 3) == "(";
        if (fields.contains(member) && !is_call) || (methods.contains(member) && is_call) {
            found.push(format!("{line}: {word}.{member}"));
        }
    }
    found
}

#[test]
fn the_report_reads_analyses_never_the_raw_event_vectors_of_the_loaded_trace() {
    let root = root();
    let model = std::fs::read_to_string(root.join("crates/trace-analyze/src/model/trace.rs"))
        .expect("trace-analyze's model/trace.rs");
    let raw = raw_trace_members(&model);
    let src = root.join("crates/trace-report/src");
    let mut found = Vec::new();
    for f in rust_files(&src) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let rel = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
        for hit in raw_trace_reads(&code_only(&text), &raw) {
            found.push(format!("{rel}:{hit}"));
        }
    }
    assert!(
        found.is_empty(),
        "trace-report reshapes trace-analyze's analyses into its view model; a figure it needs \
         is computed in trace-analyze (with its tests and the CLI's --json), not from the \
         loaded trace's raw records: {found:#?}"
    );
}

#[test]
fn the_raw_trace_read_finder_sees_fields_methods_bindings_and_types() {
    let model = std::fs::read_to_string(root().join("crates/trace-analyze/src/model/trace.rs"))
        .expect("trace-analyze's model/trace.rs");
    let raw = raw_trace_members(&model);
    for f in [
        "spans", "ops", "memory", "physical", "steps", "tensors", "sampled",
    ] {
        assert!(raw.0.contains(f), "raw field {f}: {:?}", raw.0);
    }
    for m in ["complete_steps", "partial_step", "step_ops", "op_outputs"] {
        assert!(raw.1.contains(m), "raw method {m}: {:?}", raw.1);
    }
    assert!(!raw.1.contains("str") && !raw.0.contains("run") && !raw.0.contains("source"));
    for ty in [
        "Span",
        "Op",
        "MemEvent",
        "Step",
        "TensorInfo",
        "SampledStacks",
    ] {
        assert!(raw.2.contains(ty), "raw type {ty}: {:?}", raw.2);
    }
    let code = code_only(concat!(
        "fn f(trace: &Trace, base: Option<&trace_analyze::Trace>, report: &MemoryReport) {\n",
        "    let a = report.devices.len() + trace.run.version; // trace.ops in a comment\n",
        "    let s = \"trace.memory in a string\";\n",
        "    let b = base.map(|b| b.spans.len());\n",
        "    for m in &trace.memory {}\n",
        "    if let Some(x) = base { x.complete_steps(); }\n",
        "    let c = comparison.ops.len() + graphs.steps.len();\n",
        "    let e: Vec<MemEvent> = Vec::new();\n",
        "}\n",
    ));
    assert_eq!(
        raw_trace_reads(&code, &raw),
        [
            "4: b.spans",
            "5: trace.memory",
            "6: x.complete_steps",
            "8: names the raw record type `MemEvent`",
        ]
    );
}
