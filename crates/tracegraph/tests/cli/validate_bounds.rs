//! `validate` streams and every command is bounded on compressed input: a zstd bomb
//! of valid op lines is an error naming the file and the compressed byte, bytes after the last
//! frame are a note, another compression format is named, and hostile names are shortened and
//! escaped before they reach the terminal.

use std::io::Write;
use std::path::Path;

use crate::{run_in, stderr, stdout};

const OP_LINE: &str = r#"{"type":"op","name":"matmul","in":[1,2],"out":[3],"shape":[64,64],"dtype":"f32","ts":100,"dur":10,"in_b":32768}"#;

fn small() -> Vec<u8> {
    std::fs::read(testkit::data_dir().join("small.jsonl")).unwrap()
}

fn header(plain: &[u8]) -> &[u8] {
    let end = plain.iter().position(|&b| b == b'\n').unwrap() + 1;
    &plain[..end]
}

/// The small trace's header, then `bytes` of one valid op line repeated, as one zstd stream.
fn write_bomb(to: &Path, bytes: u64) -> u64 {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.write_all(header(&small())).unwrap();
    let mut written = 0;
    while written < bytes {
        enc.write_all(OP_LINE.as_bytes()).unwrap();
        enc.write_all(b"\n").unwrap();
        written += OP_LINE.len() as u64 + 1;
    }
    let out = enc.finish().unwrap();
    std::fs::write(to, &out).unwrap();
    out.len() as u64
}

#[test]
fn validate_refuses_a_zstd_bomb_naming_the_file_and_the_compressed_byte() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 200 MB of op lines in well under 1 MB.
    let size = write_bomb(&d.join("bomb.jsonl.zst"), 200_000_000);
    assert!(size < 1 << 20, "{size}");
    for cmd in ["validate", "summary"] {
        let o = run_in(d, &[cmd, "bomb.jsonl.zst"]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("bomb.jsonl.zst"), "{cmd}: {err}");
        assert!(err.contains("compressed byte"), "{cmd}: {err}");
        assert!(err.contains("TRACEGRAPH_ZSTD_MAX_RATIO"), "{cmd}: {err}");
        assert!(!err.contains("memory allocation"), "{cmd}: {err}");
    }
    // --json still gives its verdict.
    let o = run_in(d, &["validate", "--json", "bomb.jsonl.zst"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["valid"], false);
    assert_eq!(json["rejected"], "unreadable");
}

#[test]
fn validate_reads_to_the_last_frame_and_notes_trailing_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = small();
    let mut bytes = zstd::bulk::compress(header(&plain), 3).unwrap();
    bytes.extend(zstd::bulk::compress(&plain[header(&plain).len()..], 3).unwrap());
    std::fs::write(d.join("clean.jsonl.zst"), &bytes).unwrap();
    let clean: serde_json::Value = serde_json::from_str(&stdout(&run_in(
        d,
        &["validate", "--json", "clean.jsonl.zst"],
    )))
    .unwrap();
    for (name, tail) in [
        ("nul.jsonl.zst", vec![0u8; 4096]),
        (
            "line.jsonl.zst",
            b"{\"type\":\"step\",\"index\":9,\"ts\":1}\n".to_vec(),
        ),
    ] {
        let mut b = bytes.clone();
        b.extend_from_slice(&tail);
        std::fs::write(d.join(name), &b).unwrap();
        let o = run_in(d, &["validate", name]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.contains(&format!(
                "{} byte(s) after the last complete zstd frame",
                tail.len()
            )),
            "{text}"
        );
        let o = run_in(d, &["validate", "--json", name]);
        let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(json["compression"]["trailing_bytes"], tail.len() as u64);
        assert_eq!(json["lines"], clean["lines"]);
        assert_eq!(json["events"], clean["events"]);
        assert_eq!(json["outcome"], clean["outcome"]);
        // --strict counts it as a problem (exit 4), as it counts a plain trace's partial line.
        let o = run_in(d, &["validate", "--strict", name]);
        assert_eq!(o.status.code(), Some(4), "{name}: {}", stdout(&o));
        assert!(
            stdout(&o).contains("after the last zstd frame"),
            "{}",
            stdout(&o)
        );
        // The other commands read it too.
        let o = run_in(d, &["summary", name]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        // ... and say so: the bytes not read are never dropped silently.
        assert!(
            stderr(&o).contains(&format!(
                "{name}: {} byte(s) after the last complete zstd frame",
                tail.len()
            )),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn validate_names_a_foreign_compression_format() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (bytes, name, tool) in [
        (
            &[0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0, 0, 3][..],
            "gzip",
            "gunzip",
        ),
        (
            &[0xFD, b'7', b'z', b'X', b'Z', 0x00, 0, 4][..],
            "xz",
            "unxz",
        ),
        (&b"BZh91AY&SY"[..], "bzip2", "bunzip2"),
        (&[0x04, 0x22, 0x4D, 0x18, 0x64, 0x40][..], "lz4", "unlz4"),
    ] {
        std::fs::write(d.join("t.jsonl.zst"), bytes).unwrap();
        for cmd in ["validate", "summary"] {
            let o = run_in(d, &[cmd, "t.jsonl.zst"]);
            assert!(!o.status.success());
            let err = stderr(&o);
            assert!(err.contains("t.jsonl.zst"), "{err}");
            assert!(err.contains(&format!("{name}-compressed")), "{err}");
            assert!(err.contains(tool), "{err}");
            assert!(!err.contains("invalid JSON"), "{err}");
        }
    }
}

#[test]
fn validate_never_echoes_a_huge_or_bidi_type_name_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = String::from_utf8(small()).unwrap();
    let name = format!("\u{202e}gnp.exe{}", "y".repeat(120_088 - 10));
    let text = plain.replacen('\n', &format!("\n{{\"type\":\"{name}\",\"x\":1}}\n"), 1);
    std::fs::write(d.join("evil.jsonl"), text).unwrap();
    let o = run_in(d, &["validate", "--strict", "evil.jsonl"]);
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(err.contains("unknown event type"), "{err}");
    assert!(err.len() < 1000, "{} bytes", err.len());
    assert!(!err.contains('\u{202e}'), "{err}");
    assert!(err.contains("\\u{202e}gnp.exe"), "{err}");
    let o = run_in(d, &["validate", "--strict", "--json", "evil.jsonl"]);
    let out = stdout(&o);
    assert!(out.len() < 2000 && !out.contains('\u{202e}'), "{out}");
}

#[test]
fn validate_strict_rejects_the_schema_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = String::from_utf8(small()).unwrap();
    let v = plain.find("\"version\":").unwrap();
    let version: u32 = plain[v + 10..v + 11].parse().unwrap();
    let insert = |line: &str| plain.replacen('\n', &format!("\n{line}\n"), 1);
    // A heap line under a version 1 header.
    let v1 = insert(r#"{"type":"heap_alloc","id":1,"bytes":4096,"thread":1,"ts":5}"#).replacen(
        &format!("\"version\":{version}"),
        "\"version\":1",
        1,
    );
    std::fs::write(d.join("v1.jsonl"), v1).unwrap();
    let o = run_in(d, &["validate", "--strict", "v1.jsonl"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("line 2, field `type`"),
        "{}",
        stderr(&o)
    );
    // `"file": null`.
    std::fs::write(
        d.join("null.jsonl"),
        insert(r#"{"type":"frame","id":1,"func":"main","file":null}"#),
    )
    .unwrap();
    let o = run_in(d, &["validate", "--strict", "null.jsonl"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("field `file`"), "{}", stderr(&o));
    // hz = u64::MAX and a heap account for a step the trace does not have (version 2 lines,
    // under a version 2 header).
    std::fs::write(
        d.join("numbers.jsonl"),
        insert(&format!(
            "{}\n{}",
            r#"{"type":"sampler","step":0,"hz":18446744073709551615,"taken":0,"lost":0,"ts":1,"dur":1}"#,
            r#"{"type":"heap_account","step":999,"threshold":4096,"lost":0,"unmatched_frees":0,"ts":1,"dur":1}"#
        ))
        .replacen(&format!("\"version\":{version}"), "\"version\":2", 1),
    )
    .unwrap();
    let o = run_in(d, &["validate", "--strict", "numbers.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("sampling rate of 18446744073709551615 Hz is implausible"),
        "{out}"
    );
    assert!(out.contains("heap_account for step 999"), "{out}");
}
