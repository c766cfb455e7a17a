//! Opening a torch.profiler trace: gzip or plain by its first bytes, read, then nested.

use std::io::{BufReader, Read};
use std::path::Path;

use crate::error::AnalyzeError;
use crate::runs::torch::model::TorchRun;
use crate::runs::torch::nest;
use crate::runs::torch::read::read_json;

/// Loads a torch.profiler Chrome trace (`prof.export_chrome_trace`), plain JSON or gzip
/// (`.json.gz`: told by the gzip magic bytes, not the file name).
///
/// Self times follow torch's `key_averages`: per thread, complete events (all but the
/// profiler's own `Trace` span) nest by time containment (sorted by start, then longest
/// first, walked with an explicit stack: O(n log n), any depth); an event whose parent has the
/// same name and no other child is merged into it (torch's `_remove_dup_nodes`, e.g. a
/// redispatched `aten::div_`); self time is the duration less the direct children's
/// durations, children being every nested event (ops, `record_function` ranges, Python
/// functions). `ProfilerStep#N` ranges are the steps; other `user_annotation` events are the
/// ranges, with their nested path; `python_function` events nest but are never ops.
///
/// # Errors
/// [`AnalyzeError::Io`] when the file cannot be opened or read, [`AnalyzeError::Gzip`] when
/// its gzip stream is corrupt, [`AnalyzeError::Torch`] (naming the file, the event's index in
/// `traceEvents`, the field, and serde_json's line and column) when it is not a valid trace:
/// a JSON syntax error or a cut file, a field of the wrong type, a negative or too large time
/// (above 2^62 ns), a missing `traceEvents`. Never panics; memory grows with the events kept.
pub fn load_torch_path(path: &Path) -> Result<TorchRun, AnalyzeError> {
    let source = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|error| AnalyzeError::Io {
        file: source.clone(),
        error,
    })?;
    load_torch_reader(file, &source)
}

/// Loads a torch.profiler Chrome trace from `reader` (plain or gzip, told by its first
/// bytes); `source` names it in errors. See [`load_torch_path`].
///
/// ```
/// let json = r#"{"traceEvents": [
///   {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1,
///    "ts": 100.0, "dur": 50.0},
///   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
///    "ts": 110.0, "dur": 20.5, "args": {"Input Dims": [[1, 128], [128, 128]],
///    "Input type": ["float", "float"]}},
///   {"ph": "X", "cat": "cpu_op", "name": "aten::resolve_conj", "pid": 1, "tid": 1,
///    "ts": 111.0, "dur": 0.5}
/// ]}"#;
/// let run = trace_analyze::runs::load_torch_reader(json.as_bytes(), "mm.json")?;
/// assert_eq!(run.steps.len(), 1);
/// let mm = &run.ops[0];
/// assert_eq!((run.str(mm.name), mm.dur_ns, mm.self_ns), ("aten::mm", 20_500, 20_000));
/// assert_eq!(run.input_shapes(mm), "[1,128]x[128,128]");
/// assert_eq!(run.dtypes[0].dtype, "f32");
/// # Ok::<(), trace_analyze::AnalyzeError>(())
/// ```
///
/// # Errors
/// As [`load_torch_path`], but for opening.
pub fn load_torch_reader<R: Read>(mut reader: R, source: &str) -> Result<TorchRun, AnalyzeError> {
    // The first two bytes decide gzip (0x1f 0x8b) or plain; they are put back in front.
    let mut magic = [0u8; 2];
    let mut have = 0;
    while have < magic.len() {
        match reader.read(&mut magic[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                return Err(AnalyzeError::Io {
                    file: source.to_string(),
                    error,
                });
            }
        }
    }
    let head = std::io::Cursor::new(magic).take(have as u64);
    let input = head.chain(reader);
    if have == 2 && magic == [0x1f, 0x8b] {
        let gz = flate2::read::MultiGzDecoder::new(BufReader::new(input));
        read_json(BufReader::with_capacity(1 << 16, gz), source, true).map(nest::finish)
    } else {
        read_json(BufReader::with_capacity(1 << 16, input), source, false).map(nest::finish)
    }
}
