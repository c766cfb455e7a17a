//! zstd-compressed traces: round trip, a SIGKILLed recording, truncated frames, zip bombs.
//!
//! The frames a session writes are checked against the zstd library's own decoder, and the
//! hostile inputs are built by hand (frame headers and RLE blocks), so that a tiny file that
//! declares a huge window or expands to gigabytes is what the reader really meets.

use std::process::Stdio;

use trace_record::schema::{
    AllocKind, Event, ExecStep, FrameEvent, GradientState, MemoryCategory, SamplerEvent,
    SamplesEvent, SpanKind, StackEvent,
};
use trace_record::{
    Compression, IssueKind, MemoryRecord, OpRecord, ParsedTrace, ReadOptions, TensorRecord,
    TraceInput, TraceReader, TraceSession, ZSTD_MAGIC, read_trace, read_trace_bytes,
};

use crate::common::{issues, op_count, rerun, run};

fn op(i: u64, t: u64) -> OpRecord<'static> {
    OpRecord {
        name: "matmul",
        inputs: &[1, 2],
        outputs: &[3],
        shape: &[64, 64],
        dtype: "f32",
        device: "cpu",
        start_ns: t,
        dur_ns: 10 + i % 7,
        in_bytes: 32768,
        out_bytes: 16384,
        category: None,
        flops: Some(524_288),
    }
}

/// Records every event type, with fixed timestamps where the API takes them.
fn record_everything(session: &TraceSession, ops: u64) {
    let cat = MemoryCategory::Activation;
    for step in 0..3u64 {
        let _s = session.span("forward", SpanKind::Module, Some(ExecStep::Forward));
        for i in 0..ops {
            let t = step * 1_000_000 + i * 100;
            session.record_op(&op(i, t));
            session.record_op_with_output(
                &OpRecord {
                    name: "relu",
                    inputs: &[3],
                    outputs: &[4],
                    shape: &[4],
                    dtype: "f32",
                    device: "cpu",
                    start_ns: t + 50,
                    dur_ns: 5,
                    in_bytes: 16,
                    out_bytes: 16,
                    category: Some(cat),
                    flops: None,
                },
                &TensorRecord {
                    id: 4,
                    label: None,
                    shape: &[4],
                    dtype: "f32",
                    device: "cpu",
                    requires_grad: true,
                    bytes: 16,
                    category: cat,
                },
                Some(&MemoryRecord {
                    kind: AllocKind::Alloc,
                    storage: 100 + step * ops + i,
                    tensor: 4,
                    bytes: 16,
                    device: "cpu",
                    category: cat,
                }),
            );
        }
        session.record_gradient("layer.weight", GradientState::Present, Some(0.5));
        session.record_device_memory("cuda:0", Some(1 << 20), Some(2 << 20), None);
        session.record_marker("checkpoint");
        session.record_counter("loss", 1.25);
        // Frames and stacks are interned: each is written once.
        let interned = [
            Event::Frame(FrameEvent {
                id: 1,
                func: "main".into(),
                file: None,
                inlined: false,
            }),
            Event::Stack(StackEvent {
                id: 1,
                frames: vec![1],
            }),
        ];
        if step == 0 {
            session.record_sampled(&interned);
        }
        session.record_sampled(&[
            Event::Samples(SamplesEvent {
                step,
                thread: 1,
                stack: 1,
                n: 3,
                phase: None,
                span: None,
            }),
            Event::Sampler(SamplerEvent {
                step,
                hz: 1000,
                taken: 3,
                lost: 0,
                cpu_ns: None,
                sampler_cpu_ns: None,
                ts: 0,
                dur: 3_000_000,
                source: None,
            }),
        ]);
        drop(_s);
        session.step();
    }
}

/// The events with every timestamp and duration removed (two recordings of one script differ
/// only there).
fn timeless(trace: &ParsedTrace) -> Vec<serde_json::Value> {
    fn strip(v: &mut serde_json::Value) {
        if let serde_json::Value::Object(m) = v {
            m.remove("ts");
            m.remove("dur");
            m.remove("thread");
            m.values_mut().for_each(strip);
        }
    }
    trace
        .events
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(&e.event).unwrap();
            strip(&mut v);
            v
        })
        .collect()
}

/// The offsets where each complete frame of `bytes` ends, by the zstd library's own reckoning;
/// the rest (if any) is a truncated frame.
fn frame_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]) {
            Ok(n) if at + n <= bytes.len() => {
                at += n;
                ends.push(at);
            }
            _ => break,
        }
    }
    ends
}

#[test]
fn a_compressed_session_reads_back_equal_to_an_uncompressed_one() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("t.jsonl");
    let packed = dir.path().join("t.jsonl.zst");
    for path in [&plain, &packed] {
        let session = TraceSession::open(path, run().flush_interval(None)).unwrap();
        record_everything(&session, 2000);
        session.finish().unwrap();
    }
    let bytes = std::fs::read(&packed).unwrap();
    assert_eq!(
        bytes[..4],
        ZSTD_MAGIC,
        "a .zst path is compressed by default"
    );
    // The header is a frame of its own: the file is readable from the moment it exists.
    let ends = frame_ends(&bytes);
    assert_eq!(*ends.last().unwrap(), bytes.len(), "whole frames only");
    assert!(
        ends.len() >= 5,
        "a frame per block and step: {}",
        ends.len()
    );
    let first = zstd::decode_all(&bytes[..ends[0]]).unwrap();
    assert!(first.starts_with(br#"{"type":"header""#));
    assert_eq!(first.iter().filter(|&&b| b == b'\n').count(), 1);

    // Our reader agrees with the reference decoder byte for byte ...
    let decoded = zstd::decode_all(&bytes[..]).unwrap();
    let ours = read_trace(&packed).unwrap();
    assert_eq!(ours, read_trace_bytes(&decoded).unwrap());
    // ... and the trace is the one an uncompressed session writes for the same calls.
    let reference = read_trace(&plain).unwrap();
    assert_eq!(timeless(&ours), timeless(&reference));
    assert_eq!(
        ours.trailer.as_ref().unwrap().counts,
        reference.trailer.as_ref().unwrap().counts
    );
    assert!(!ours.incomplete);
    let found = issues(&ours);
    assert!(
        found.is_empty(),
        "{} issues, first {:?}",
        found.len(),
        found.first()
    );
    let plain_len = std::fs::metadata(&plain).unwrap().len();
    assert!(
        (bytes.len() as u64) * 5 < plain_len,
        "{} compressed bytes for {plain_len}",
        bytes.len()
    );
    // The reader says what it decoded.
    let mut reader = TraceReader::open(&packed, ReadOptions::default()).unwrap();
    while reader.next_event().unwrap().is_some() {}
    let stats = reader.get_ref().zstd().unwrap();
    assert_eq!(stats.frames as usize, ends.len());
    assert_eq!(stats.compressed_bytes as usize, bytes.len());
    assert_eq!(stats.bytes as usize, decoded.len());
    assert!(!stats.truncated);
    // A plain file is read as it is.
    let plain_input = TraceInput::open(&plain).unwrap();
    assert!(plain_input.zstd().is_none());
}

#[test]
fn compression_follows_the_run_whatever_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("named-plain.jsonl");
    let session =
        TraceSession::open(&path, run().compression(Compression::Zstd { level: 1 })).unwrap();
    record_everything(&session, 10);
    let summary = session.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[..4], ZSTD_MAGIC);
    assert_eq!(
        summary.bytes,
        bytes.len() as u64,
        "the summary counts bytes on disk"
    );
    // Detected by content, not by name.
    let trace = read_trace(&path).unwrap();
    assert_eq!(trace.trailer.unwrap().counts, summary.counts);
    // And a `.zst` path can be asked to stay plain.
    let path = dir.path().join("plain.jsonl.zst");
    let session = TraceSession::open(&path, run().compression(Compression::None)).unwrap();
    session.finish().unwrap();
    assert!(std::fs::read(&path).unwrap().starts_with(b"{"));
}

#[test]
fn a_writer_error_surfaces_at_finish_and_stops_the_session() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let session = TraceSession::from_writer(Full, run().compression(Compression::zstd()));
    record_everything(&session, 100);
    match session.finish() {
        Err(trace_record::TraceError::Io {
            source, dropped, ..
        }) => {
            assert!(source.to_string().contains("disk full"), "{source}");
            assert!(dropped > 0);
        }
        other => panic!("{other:?}"),
    }
}

/// A finished compressed trace held in memory, with several frames.
fn frames_in_memory() -> Vec<u8> {
    let (session, sink) =
        TraceSession::in_memory(run().flush_interval(None).compression(Compression::zstd()));
    record_everything(&session, 3000);
    session.finish().unwrap();
    sink.bytes()
}

#[test]
fn a_truncated_last_frame_reads_to_its_last_decodable_line() {
    let bytes = frames_in_memory();
    let ends = frame_ends(&bytes);
    assert!(ends.len() >= 6, "{}", ends.len());
    let full = read_trace_bytes(&zstd::decode_all(&bytes[..]).unwrap()).unwrap();
    // Cut inside each of a few frames: the complete frames always read back, the cut frame
    // as far as it decodes, and the cut is no error.
    // (The last frame holds the trailer alone.)
    for k in [1, 2, ends.len() / 2, ends.len() - 2] {
        let (start, end) = (ends[k - 1], ends[k]);
        for cut in [start + 1, usize::midpoint(start, end), end - 1] {
            let prefix = &bytes[..cut];
            let complete = zstd::decode_all(&bytes[..start]).unwrap();
            let complete_lines = complete.iter().filter(|&&b| b == b'\n').count();
            let mut reader =
                TraceReader::new(TraceInput::new(prefix).unwrap(), ReadOptions::default()).unwrap();
            let mut events = Vec::new();
            while let Some(e) = reader.next_event().unwrap() {
                events.push(e);
            }
            let stats = reader.get_ref().zstd().unwrap();
            assert!(stats.truncated, "cut at {cut} of frame {k}");
            assert_eq!(stats.frames as usize, k);
            assert!(reader.trailer().is_none() && reader.is_incomplete());
            // Every line of the complete frames (the header is one of them) is read ...
            assert!(
                events.len() + 1 >= complete_lines,
                "cut {cut}: {}",
                events.len()
            );
            // ... exactly as the whole trace has it.
            assert_eq!(events[..], full.events[..events.len()]);
            // What the cut frame yielded ends at a whole line or is reported partial.
            let decoded = stats.bytes as usize;
            let whole = decoded == 0 || {
                let all = zstd::decode_all(&bytes[..]).unwrap();
                all[decoded - 1] == b'\n'
            };
            if whole {
                assert_eq!(reader.partial_line(), None, "cut {cut}");
            }
            if reader.partial_line().is_some() {
                assert!(!whole, "cut {cut}");
            }
        }
    }
}

#[test]
fn a_damaged_frame_is_a_clear_error_and_trailing_bytes_a_note() {
    let bytes = frames_in_memory();
    let ends = frame_ends(&bytes);
    // A flipped byte in the second frame's checksum: its lines decode, then the frame fails.
    let mut damaged = bytes.clone();
    damaged[ends[1] - 1] ^= 0x55;
    let err = read_err(&damaged);
    assert!(
        err.contains("zstd-compressed trace, compressed byte"),
        "{err}"
    );
    // Bytes after the last frame that are no frame: every frame is read, the bytes counted.
    let mut tail = bytes.clone();
    tail.extend_from_slice(b"not a frame\n");
    let mut reader =
        TraceReader::new(TraceInput::new(&tail[..]).unwrap(), ReadOptions::default()).unwrap();
    let mut whole =
        TraceReader::new(TraceInput::new(&bytes[..]).unwrap(), ReadOptions::default()).unwrap();
    let (mut n, mut m) = (0, 0);
    while reader.next_event().unwrap().is_some() {
        n += 1;
    }
    while whole.next_event().unwrap().is_some() {
        m += 1;
    }
    assert_eq!(n, m, "every event of the frames is read");
    assert_eq!(reader.get_ref().zstd().unwrap().trailing_bytes, 12);
}

fn read_err(bytes: &[u8]) -> String {
    let mut reader =
        TraceReader::new(TraceInput::new(bytes).unwrap(), ReadOptions::default()).unwrap();
    loop {
        match reader.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end without an error"),
            Err(e) => return e.to_string(),
        }
    }
}

/// The header of a real trace as one zstd frame.
fn header_frame() -> Vec<u8> {
    let (session, sink) = TraceSession::in_memory(run());
    drop(session);
    let text = sink.bytes();
    let first = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    zstd::bulk::compress(&text[..first], 1).unwrap()
}

/// A zstd frame (no checksum, no content size) of `blocks` RLE blocks, each 128 KiB of `byte`
/// followed, when `newline`, by a raw one-byte block holding `\n`: 4 (or 8) bytes of file
/// per 128 KiB of output.
fn rle_bomb(byte: u8, blocks: u64, newline: bool) -> Vec<u8> {
    let mut f = ZSTD_MAGIC.to_vec();
    f.push(0x00); // frame header descriptor: windowed, no checksum, no content size
    f.push((17 - 10) << 3); // window descriptor: 2^17 bytes (128 KiB)
    let block = |f: &mut Vec<u8>, last: bool, kind: u32, size: u32, payload: u8| {
        let h = u32::from(last) | (kind << 1) | (size << 3);
        f.extend_from_slice(&h.to_le_bytes()[..3]);
        f.push(payload);
    };
    for i in 0..blocks {
        let last = i + 1 == blocks;
        block(&mut f, last && !newline, 1, 128 * 1024, byte);
        if newline {
            block(&mut f, last, 0, 1, b'\n');
        }
    }
    f
}

#[test]
fn a_frame_that_declares_a_huge_window_is_refused_before_any_allocation() {
    let mut bytes = header_frame();
    let mut f = ZSTD_MAGIC.to_vec();
    f.push(0x00);
    f.push((31 - 10) << 3); // a 2 GiB window
    f.extend_from_slice(&[0x01, 0x00, 0x00]); // last raw block of size 0
    bytes.extend_from_slice(&f);
    let err = read_err(&bytes);
    assert!(
        err.contains("readers accept zstd windows up to 16 MiB"),
        "{err}"
    );
}

#[test]
fn a_zip_bomb_without_newlines_stops_at_the_line_limit() {
    // 4 GiB of zeros in 128 KiB of file.
    let mut bytes = header_frame();
    bytes.extend_from_slice(&rle_bomb(b'0', 4 << 13, false));
    assert!(bytes.len() < 200 * 1024, "{}", bytes.len());
    let mut reader =
        TraceReader::new(TraceInput::new(&bytes[..]).unwrap(), ReadOptions::default()).unwrap();
    let err = loop {
        match reader.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end without an error"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(err.contains("line longer than"), "{err}");
    // It decoded about one line's worth, not the 4 GiB: counted by the decoder, not timed.
    let decoded = reader.get_ref().zstd().expect("a zstd input").bytes;
    assert!(
        decoded > trace_record::MAX_LINE_BYTES as u64
            && decoded <= 2 * trace_record::MAX_LINE_BYTES as u64,
        "{decoded} bytes decoded"
    );
}

const BOMB_CHILD_ENV: &str = "TRACE_RECORD_TEST_ZSTD_BOMB_CHILD";
const BOMB_TEST: &str = "compressed::a_zip_bomb_of_blank_lines_streams_through_in_bounded_memory";

/// Peak resident memory of this process, from `/proc/self/status` (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_zip_bomb_of_blank_lines_streams_through_in_bounded_memory() {
    // 256 MiB of blank 128 KiB lines in 16 KiB of file: readers skip blank lines, so all of
    // it goes through the decoder and the reader, one window at a time. (The 4 GiB bomb above
    // is refused at its first line; this one is read to the end, so it is kept small enough
    // for an unoptimised test build.)
    let blocks = 1u64 << 11;
    if std::env::var_os(BOMB_CHILD_ENV).is_some() {
        let mut bytes = header_frame();
        bytes.extend_from_slice(&rle_bomb(b' ', blocks, true));
        let before = peak_rss_kib().unwrap_or(0);
        let mut reader =
            TraceReader::new(TraceInput::new(&bytes[..]).unwrap(), ReadOptions::default()).unwrap();
        let mut events = 0;
        while reader.next_event().unwrap().is_some() {
            events += 1;
        }
        let stats = reader.get_ref().zstd().unwrap();
        println!(
            "BOMB events={events} lines={} bytes={} header={} before_kib={before} peak_kib={}",
            reader.lines_read(),
            stats.bytes,
            header_frame_len(),
            peak_rss_kib().unwrap_or(0)
        );
        return;
    }
    if peak_rss_kib().is_none() {
        return; // not Linux: no peak to read
    }
    let out = rerun(BOMB_TEST)
        .env(BOMB_CHILD_ENV, "1")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "child failed: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.find("BOMB ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no report from the child: {text}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    assert_eq!(field("events"), 0);
    assert_eq!(field("lines"), 1 + blocks);
    assert_eq!(field("bytes"), blocks * (128 * 1024 + 1) + field("header"));
    // 256 MiB went through; the process grew by a few windows and buffers at most.
    let grown = field("peak_kib").saturating_sub(field("before_kib"));
    assert!(
        grown < 32 * 1024,
        "grew by {grown} KiB reading a 256 MiB bomb"
    );
}

fn header_frame_len() -> u64 {
    zstd::decode_all(&header_frame()[..]).unwrap().len() as u64
}

const CRASH_ENV: &str = "TRACE_RECORD_TEST_ZSTD_CRASH_CHILD";
const CRASH_TEST: &str = "compressed::a_killed_compressed_recording_reads_to_its_last_frame";

#[test]
fn a_killed_compressed_recording_reads_to_its_last_frame() {
    if let Ok(path) = std::env::var(CRASH_ENV) {
        crate::crash::record_forever(&path);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.jsonl.zst");
    // A good number of frames on disk, then SIGKILL.
    crate::crash::kill_recorder_once_written(CRASH_TEST, CRASH_ENV, &path, 64 * 1024);

    let bytes = std::fs::read(&path).unwrap();
    let ends = frame_ends(&bytes);
    let complete = zstd::decode_all(&bytes[..*ends.last().unwrap()]).unwrap();
    let complete_lines = complete.iter().filter(|&&b| b == b'\n').count() as u64;
    assert!(
        complete.ends_with(b"\n"),
        "every frame ends at a whole line"
    );

    let trace = read_trace(&path).unwrap();
    assert!(trace.incomplete && trace.trailer.is_none());
    // Everything in the complete frames is there, identical to the reference decoder's view.
    assert!(trace.events.len() as u64 >= complete_lines - 1);
    let reference = read_trace_bytes(&complete).unwrap();
    assert_eq!(trace.events[..reference.events.len()], reference.events[..]);
    let ops = op_count(&trace);
    assert!(ops > 1000, "{ops}");
    for issue in issues(&trace) {
        assert!(
            matches!(issue.kind, IssueKind::SpanLeftOpen { .. }),
            "{issue}"
        );
    }
}

#[test]
fn a_compressed_file_being_written_says_who_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.jsonl.zst");
    let first = TraceSession::open(&path, run()).unwrap();
    let me = Some(std::process::id());
    // The pid comes from the header, the first frame, decompressed.
    assert_eq!(
        trace_record::writer_of(&path),
        trace_record::Writer::Live { pid: me }
    );
    match TraceSession::open(&path, run().overwrite(true)) {
        Err(trace_record::TraceError::Busy { pid, .. }) => assert_eq!(pid, me),
        other => panic!("expected Busy, got {other:?}"),
    }
    first.finish().unwrap();
    assert_eq!(trace_record::writer_of(&path), trace_record::Writer::None);
}
