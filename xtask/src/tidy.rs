//! Tidy tests over the source tree: the documented dependency direction between crates, and one `//!` line opening every source file.
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
    ("trace-candle", &["trace-record"]),
    ("trace-export", &["trace-record", "testkit"]),
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
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if let Some(section) = line.strip_prefix('[') {
            let section = section.trim_end_matches(']');
            in_deps = section.ends_with("dependencies");
            // `[dependencies.foo]` style tables.
            if let Some((head, name)) = section.rsplit_once('.')
                && head.ends_with("dependencies")
                && crates.contains(name)
            {
                deps.insert(name.to_string());
            }
            continue;
        }
        if !in_deps || line.starts_with('#') {
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if crates.contains(key) {
            deps.insert(key.to_string());
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
            if !allowed.contains(&dep.as_str()) {
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

#[test]
fn every_source_file_opens_with_one_line_saying_what_lives_there() {
    let root = root();
    let mut files = rust_files(&root.join("crates"));
    files.extend(rust_files(&root.join("benches")));
    files.extend(rust_files(&root.join("xtask")));
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
