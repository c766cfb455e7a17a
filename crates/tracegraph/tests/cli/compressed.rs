//! The CLI reads zstd-compressed traces as it reads plain ones: same summary, ops, exports.
//!
//! The compressed copies are made here with the zstd library (one frame for the header, then
//! frames of a few lines, as a session writes them), independently of the reader under test.

use std::path::Path;

use crate::{run_in, stderr, stdout};

/// Writes `plain` as zstd frames into `to`: the header line alone, then `per_frame` lines at a
/// time. Returns the frames' end offsets.
fn compress(plain: &[u8], to: &Path, per_frame: usize) -> Vec<usize> {
    let lines: Vec<&[u8]> = plain.split_inclusive(|&b| b == b'\n').collect();
    let mut out = zstd::bulk::compress(lines[0], 3).unwrap();
    let mut ends = vec![out.len()];
    for chunk in lines[1..].chunks(per_frame) {
        out.extend(zstd::bulk::compress(&chunk.concat(), 3).unwrap());
        ends.push(out.len());
    }
    std::fs::write(to, &out).unwrap();
    ends
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run_in(dir, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn summary_ops_export_and_validate_read_a_compressed_trace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = std::fs::read(testkit::data_dir().join("small.jsonl")).unwrap();
    std::fs::write(d.join("t.jsonl"), &plain).unwrap();
    let ends = compress(&plain, &d.join("t.jsonl.zst"), 3);
    // A compressed file is recognised by its content, whatever its name.
    std::fs::copy(d.join("t.jsonl.zst"), d.join("renamed.jsonl")).unwrap();

    for z in ["t.jsonl.zst", "renamed.jsonl"] {
        for cmd in ["summary", "ops", "spans", "memory"] {
            let want = ok(d, &[cmd, "t.jsonl"]).replace("t.jsonl", "TRACE");
            let got = ok(d, &[cmd, z]).replace(z, "TRACE");
            assert_eq!(got, want, "{cmd} {z}");
        }
        for (format, ext) in [("chrome", "json"), ("folded", "txt")] {
            let a = format!("plain.{ext}");
            let b = format!("zst.{ext}");
            ok(d, &["export", "t.jsonl", "--format", format, "-o", &a]);
            ok(d, &["export", z, "--format", format, "-o", &b]);
            assert_eq!(
                std::fs::read(d.join(&a)).unwrap(),
                std::fs::read(d.join(&b)).unwrap(),
                "export {format} of {z}"
            );
        }
    }

    // The report and compare read it too (compare of a trace with its compressed copy).
    ok(d, &["report", "t.jsonl.zst", "-o", "report.html"]);
    assert!(std::fs::metadata(d.join("report.html")).unwrap().len() > 0);
    ok(d, &["compare", "t.jsonl", "t.jsonl.zst"]);

    // validate says how the file is stored, for compressed traces only.
    let text = ok(d, &["validate", "--strict", "t.jsonl.zst"]);
    assert!(
        text.contains(&format!("compression: zstd, {} frame(s)", ends.len())),
        "{text}"
    );
    assert!(text.trim_end().ends_with("\nvalid"), "{text}");
    assert!(!ok(d, &["validate", "t.jsonl"]).contains("compression"));
    let json: serde_json::Value =
        serde_json::from_str(&ok(d, &["validate", "--json", "t.jsonl.zst"])).unwrap();
    let c = &json["compression"];
    assert_eq!(c["format"], "zstd");
    assert_eq!(c["frames"], ends.len() as u64);
    assert_eq!(c["bytes"], plain.len() as u64);
    assert_eq!(c["compressed_bytes"], *ends.last().unwrap() as u64);
    assert_eq!(c["truncated_last_frame"], false);
    let plain_json: serde_json::Value =
        serde_json::from_str(&ok(d, &["validate", "--json", "t.jsonl"])).unwrap();
    assert!(plain_json.get("compression").is_none());
}

#[test]
fn a_compressed_trace_cut_inside_a_frame_is_analysed_up_to_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = std::fs::read(testkit::data_dir().join("small.jsonl")).unwrap();
    let ends = compress(&plain, &d.join("whole.jsonl.zst"), 2);
    let bytes = std::fs::read(d.join("whole.jsonl.zst")).unwrap();
    // Keep the first three frames and half of the fourth.
    let cut = usize::midpoint(ends[2], ends[3]);
    std::fs::write(d.join("cut.jsonl.zst"), &bytes[..cut]).unwrap();
    let o = run_in(d, &["validate", "--json", "cut.jsonl.zst"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["compression"]["frames"], 3);
    assert_eq!(json["compression"]["truncated_last_frame"], true);
    assert_eq!(json["incomplete"], true);
    // The header and the four lines of the complete frames at least.
    assert!(json["lines"].as_u64().unwrap() >= 5, "{json}");
    let text = ok(d, &["validate", "cut.jsonl.zst"]);
    assert!(text.contains("the last zstd frame is cut short"), "{text}");
    // --strict fails it as it fails any incomplete trace (exit 4).
    let o = run_in(d, &["validate", "--strict", "cut.jsonl.zst"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    // The other commands analyse what is there and warn.
    let o = run_in(d, &["summary", "cut.jsonl.zst"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("incomplete"), "{}", stderr(&o));
}
