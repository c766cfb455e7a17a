//! Compressed input bounded like plain input: a zstd bomb of valid op lines is
//! refused at the expansion limit, a line longer than the line limit at its compressed byte,
//! bytes after the last frame are a note, and another compression format is named.

use std::io::{Read, Write};

use trace_record::schema::Phase;
use trace_record::{
    Compression, ReadOptions, Run, TraceInput, TraceReader, TraceSession, read_trace_bytes,
};

/// One valid op line, as a session writes it.
const OP_LINE: &str = r#"{"type":"op","name":"matmul","in":[1,2],"out":[3],"shape":[64,64],"dtype":"f32","ts":100,"dur":10,"in_b":32768}"#;

/// The decoder's output chunk (zstd's largest block): the most a check can lag.
const CHUNK: u64 = 128 * 1024;

fn header_line() -> Vec<u8> {
    let (session, sink) = TraceSession::in_memory(Run::new("bounds", Phase::Infer, "cpu"));
    drop(session);
    let text = sink.bytes();
    let first = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    text[..first].to_vec()
}

/// A zstd stream of the header and then `bytes` of `line` repeated (each with a newline),
/// written through the streaming encoder so the test never holds the decoded data.
fn bomb_of(line: &[u8], bytes: u64, newline: bool) -> Vec<u8> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.write_all(&header_line()).unwrap();
    let mut written = 0;
    while written < bytes {
        enc.write_all(line).unwrap();
        if newline {
            enc.write_all(b"\n").unwrap();
        }
        written += line.len() as u64 + u64::from(newline);
    }
    enc.finish().unwrap()
}

/// Reads `input` to its end or first error, keeping nothing; the error's text.
fn drain<R: std::io::BufRead>(input: &mut TraceInput<R>) -> Option<String> {
    let mut buf = vec![0; 64 * 1024];
    loop {
        match input.read(&mut buf) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(e.to_string()),
        }
    }
}

#[test]
fn an_op_line_bomb_is_refused_at_the_expansion_limit_naming_the_compressed_byte() {
    // 200 MB of one valid op line in a few hundred KB of zstd: the issue's bomb, scaled down.
    let bomb = bomb_of(OP_LINE.as_bytes(), 200_000_000, true);
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let mut input = TraceInput::with_max_ratio(&bomb[..], Compression::DEFAULT_MAX_RATIO).unwrap();
    let err = drain(&mut input).expect("the bomb is refused");
    assert!(
        err.contains("zstd-compressed trace, compressed byte"),
        "{err}"
    );
    assert!(err.contains("a zstd bomb?"), "{err}");
    assert!(err.contains(Compression::MAX_RATIO_ENV), "{err}");
    // Refused at the limit (counted by the decoder, not timed): max(floor, ratio × file) of
    // content, plus at most one chunk, never the 200 MB.
    let stats = input.zstd().unwrap();
    let allowed =
        Compression::EXPANSION_FLOOR.max(Compression::DEFAULT_MAX_RATIO * bomb.len() as u64);
    // The limit counts content: every byte of the op lines but their newlines.
    let line = OP_LINE.len() as u64;
    assert!(stats.bytes > allowed, "{} bytes", stats.bytes);
    assert!(
        stats.bytes <= allowed / line * (line + 1) + CHUNK,
        "{} bytes",
        stats.bytes
    );
    assert!(stats.bytes < 100_000_000);
}

#[test]
fn the_reader_reports_the_bomb_as_an_error_not_an_allocation_failure() {
    let bomb = bomb_of(OP_LINE.as_bytes(), 80_000_000, true);
    let input = TraceInput::with_max_ratio(&bomb[..], Compression::DEFAULT_MAX_RATIO).unwrap();
    let mut reader = TraceReader::new(input, ReadOptions::strict()).unwrap();
    let mut events = 0u64;
    let err = loop {
        match reader.next_with(|_, _| ()) {
            Ok(Some(())) => events += 1,
            Ok(None) => panic!("read {events} events to the end without an error"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, trace_record::ReadError::Io(_)), "{err}");
    assert!(err.to_string().contains("compressed byte"), "{err}");
    // Events streamed up to the limit, one at a time.
    let per_line = OP_LINE.len() as u64; // content bytes: the newline is not counted
    assert!(
        events >= (Compression::EXPANSION_FLOOR - CHUNK) / per_line,
        "{events}"
    );
    assert!(
        events <= (Compression::EXPANSION_FLOOR + CHUNK) / per_line + 1,
        "{events}"
    );
}

#[test]
fn a_lifted_limit_reads_what_the_default_refuses() {
    let bomb = bomb_of(OP_LINE.as_bytes(), 80_000_000, true);
    let mut input = TraceInput::with_max_ratio(&bomb[..], 0).unwrap();
    assert_eq!(drain(&mut input), None);
    assert!(input.zstd().unwrap().bytes >= 80_000_000);
}

#[test]
fn one_line_longer_than_the_limit_is_refused_at_its_compressed_byte() {
    // One op line made 200 MB long by its name: never held whole.
    let mut line = br#"{"type":"op","name":""#.to_vec();
    line.extend(std::iter::repeat_n(b'x', 1 << 20));
    let bomb = {
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.write_all(&header_line()).unwrap();
        enc.write_all(br#"{"type":"op","name":""#).unwrap();
        for _ in 0..200 {
            enc.write_all(&line[22..]).unwrap();
        }
        enc.write_all(br#"","in":[],"out":[],"shape":[],"dtype":"f32","ts":1,"dur":1}"#)
            .unwrap();
        enc.finish().unwrap()
    };
    let mut input = TraceInput::with_max_ratio(&bomb[..], 0).unwrap();
    let err = drain(&mut input).expect("the line is refused");
    assert!(err.contains("compressed byte"), "{err}");
    assert!(
        err.contains(&format!(
            "line longer than {} bytes",
            trace_record::MAX_LINE_BYTES
        )),
        "{err}"
    );
    let decoded = input.zstd().unwrap().bytes;
    assert!(
        decoded <= trace_record::MAX_LINE_BYTES as u64 + 2 * CHUNK,
        "{decoded}"
    );
}

/// A whole compressed trace of a few hundred events in several frames.
fn compressed_trace() -> Vec<u8> {
    let (session, sink) = TraceSession::in_memory(
        Run::new("bounds", Phase::Infer, "cpu")
            .flush_interval(None)
            .compression(Compression::zstd()),
    );
    for _ in 0..5 {
        for i in 0..100u64 {
            session.record_op(&trace_record::OpRecord {
                name: "relu",
                inputs: &[i],
                outputs: &[i + 1],
                shape: &[4],
                dtype: "f32",
                device: "cpu",
                start_ns: i * 10,
                dur_ns: 5,
                in_bytes: 16,
                out_bytes: 16,
                category: None,
                flops: None,
            });
        }
        session.step();
    }
    session.finish().unwrap();
    sink.bytes()
}

fn read_compressed(bytes: &[u8]) -> (trace_record::ParsedTrace, trace_record::ZstdStats) {
    let mut input = TraceInput::new(bytes).unwrap();
    let trace = trace_record::ParsedTrace::from_reader(
        TraceReader::new(&mut input, ReadOptions::default()).unwrap(),
    )
    .unwrap();
    (trace, input.zstd().unwrap())
}

#[test]
fn bytes_after_the_last_frame_are_a_note_not_a_failure() {
    let clean = compressed_trace();
    let whole = read_trace_bytes(&zstd::decode_all(&clean[..]).unwrap()).unwrap();
    let (_, clean_stats) = read_compressed(&clean);
    assert_eq!(clean_stats.trailing_bytes, 0);
    assert_eq!(clean_stats.note(), None);
    for tail in [
        vec![0u8; 4096],
        b"{\"type\":\"step\",\"index\":9,\"ts\":1}\n".to_vec(),
        b"not a frame".to_vec(),
    ] {
        let mut bytes = clean.clone();
        bytes.extend_from_slice(&tail);
        let (trace, stats) = read_compressed(&bytes);
        // Every complete frame is read, the trailer included, and nothing of the tail.
        assert_eq!(trace.events, whole.events);
        assert!(!trace.incomplete);
        assert_eq!(stats.frames, clean_stats.frames);
        assert_eq!(stats.trailing_bytes, tail.len() as u64);
        assert!(!stats.truncated);
        let note = stats.note().unwrap();
        assert!(
            note.contains(&format!(
                "{} byte(s) after the last complete zstd frame",
                tail.len()
            )),
            "{note}"
        );
        assert!(
            note.contains(&format!("from compressed byte {}", clean.len())),
            "{note}"
        );
    }
}

#[test]
fn a_magic_prefix_after_the_last_frame_is_a_cut_frame() {
    // The first byte of a frame's magic number: a recording killed as it began a frame.
    let mut bytes = compressed_trace();
    bytes.push(0x28);
    let (trace, stats) = read_compressed(&bytes);
    assert!(stats.truncated);
    assert_eq!(stats.trailing_bytes, 0);
    assert!(stats.note().unwrap().contains("cut short"));
    assert!(trace.trailer.is_some());
}

#[test]
fn other_compression_formats_are_named_not_called_invalid_json() {
    let cases: [(&[u8], &str, &str); 6] = [
        (&[0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0], "gzip", "gunzip"),
        (&[0xFD, b'7', b'z', b'X', b'Z', 0x00, 0, 4], "xz", "unxz"),
        (b"BZh91AY&SY", "bzip2", "bunzip2"),
        (&[0x04, 0x22, 0x4D, 0x18, 0x64, 0x40], "lz4", "unlz4"),
        (b"PK\x03\x04\x14\x00", "zip", "unzip"),
        (&[0x1F, 0x8B], "gzip", "gunzip"),
    ];
    for (bytes, name, tool) in cases {
        let err = TraceInput::new(bytes).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        let text = err.to_string();
        assert!(
            text.contains(&format!("this file is {name}-compressed")),
            "{text}"
        );
        assert!(text.contains(tool), "{text}");
        assert!(text.contains("zstd (.zst)"), "{text}");
        // Through a file named like a compressed trace, as the CLI opens it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl.zst");
        std::fs::write(&path, bytes).unwrap();
        let err = TraceReader::open(&path, ReadOptions::default()).unwrap_err();
        assert!(!err.to_string().contains("invalid JSON"), "{err}");
        assert!(err.to_string().contains(name), "{err}");
    }
    // Plain JSONL and zstd are not mistaken for them.
    assert!(TraceInput::new(&b"{\"type\":\"header\"}\n"[..]).is_ok());
    assert!(TraceInput::new(&compressed_trace()[..]).is_ok());
}
