//! The streaming export: one pass over the trace, a row group per table every N rows.

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use foldhash::HashMap as FastMap;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use trace_record::schema::{AllocKind, Event};
use trace_record::{ClosedStep, StepTracker, TraceReader};

use crate::error::ParquetError;
use crate::tables::{
    FrameRows, GradientRows, HeapRow, HeapRows, MemoryRow, MemoryRows, OpRows, RowKey, Rows,
    SampleRows, SpanRow, SpanRows, StackRows, StepRow, StepRows, Table, int,
};

/// The largest rank a table holds: the `rank` column is a signed 32-bit integer (Int32).
pub const MAX_RANK: u32 = i32::MAX as u32;

/// How the tables are written.
#[derive(Debug, Clone, Copy)]
pub struct ExportOptions {
    /// Rows per row group (and the most rows of one table held in memory): 65,536 by
    /// default. At least 1.
    pub row_group_rows: usize,
    /// The zstd level of the pages (1-22; 3 by default, zstd's own default).
    pub zstd_level: i32,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            row_group_rows: 1 << 16,
            zstd_level: 3,
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Rows written per table, in [`Table::ALL`] order.
    pub rows: [u64; Table::COUNT],
    /// Bytes written per table (the whole Parquet file), in [`Table::ALL`] order.
    pub bytes: [u64; Table::COUNT],
    /// Events read.
    pub events: u64,
    /// Spans that never ended (written with a null `end_ns`).
    pub unended_spans: u64,
    /// `span_end` lines naming no open span (ignored, as the loader ignores them).
    pub stray_span_ends: u64,
    /// Frees of a storage with no live allocation on its device (`delta_bytes` 0).
    pub frees_without_alloc: u64,
    /// Allocations of a storage already live on its device (the old one is replaced).
    pub duplicate_allocs: u64,
    /// Tracked-heap lines the heap replay ignores (`delta_bytes` 0), as `memory` does: a
    /// `heap_alloc` of an id allocated before, a `heap_free` of an id not live.
    pub heap_ignored: u64,
    /// The trace had no complete trailer (its last step is written `complete = false`).
    pub incomplete: bool,
}

impl ExportSummary {
    /// Rows written to `table`.
    pub fn rows_of(&self, table: Table) -> u64 {
        self.rows[table.index()]
    }

    /// Bytes written in every table.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }
}

/// A byte buffer the Arrow writer owns a handle to (it needs `Send`); its content is moved
/// to the real output after each row group, so it holds at most one encoded row group.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut v = self
            .0
            .lock()
            .map_err(|_| io::Error::other("the table buffer's lock was poisoned"))?;
        v.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One table's Parquet writer and output.
struct Sink<W> {
    arrow: ArrowWriter<SharedBuf>,
    buf: SharedBuf,
    schema: SchemaRef,
    out: W,
    rows: u64,
    bytes: u64,
}

impl<W: Write> Sink<W> {
    fn new(table: Table, out: W, opts: &ExportOptions) -> Result<Self, ParquetError> {
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(opts.zstd_level)?))
            .set_max_row_group_row_count(Some(opts.row_group_rows.max(1)))
            .set_created_by(format!(
                "tracegraph trace-parquet {}",
                env!("CARGO_PKG_VERSION")
            ))
            .build();
        let schema = table.schema();
        let buf = SharedBuf::default();
        let arrow = ArrowWriter::try_new(buf.clone(), schema.clone(), Some(props))?;
        Ok(Sink {
            arrow,
            buf,
            schema,
            out,
            rows: 0,
            bytes: 0,
        })
    }

    /// Writes the held rows of `rows` as one row group.
    fn write(&mut self, rows: &mut impl Rows) -> Result<(), ParquetError> {
        let n = rows.len();
        if n == 0 {
            return Ok(());
        }
        let cols: Vec<ArrayRef> = rows.finish();
        let batch = RecordBatch::try_new(self.schema.clone(), cols)?;
        self.arrow.write(&batch)?;
        self.arrow.flush()?;
        self.rows += n as u64;
        self.drain()
    }

    /// Moves what the Arrow writer has encoded to the output.
    fn drain(&mut self) -> Result<(), ParquetError> {
        let mut v = self
            .buf
            .0
            .lock()
            .map_err(|_| io::Error::other("the table buffer's lock was poisoned"))?;
        self.out.write_all(&v)?;
        self.bytes += v.len() as u64;
        v.clear();
        Ok(())
    }

    /// Writes the footer and returns the output.
    fn close(mut self) -> Result<(W, u64, u64), ParquetError> {
        self.arrow.finish()?;
        self.drain()?;
        self.out.flush()?;
        Ok((self.out, self.rows, self.bytes))
    }
}

/// A span still open: its row, and whether an op line already claimed it as its own op.
struct OpenSpan {
    row: SpanRow,
    /// The start as recorded (for the own-op rule).
    start: u64,
    claimed: bool,
}

/// The export's state over one pass.
struct Exporter<'a, W> {
    run_id: &'a str,
    rank: i32,
    start_unix_ns: u64,
    limit: usize,
    sinks: Vec<Sink<W>>,
    ops: OpRows,
    spans: SpanRows,
    steps: StepRows,
    memory: MemoryRows,
    samples: SampleRows,
    frames: FrameRows,
    stacks: StackRows,
    gradients: GradientRows,
    heap: HeapRows,
    tracker: StepTracker,
    /// When the open step began (`None`: no step open).
    open_start: Option<u64>,
    /// Every closed step's (start, end, index) in file order: the step a tracked-heap
    /// allocation or free belongs to is found by its time (their lines may follow later
    /// boundaries). One entry per step line, however many events.
    closed_steps: Vec<(u64, u64, u64)>,
    /// Tracked allocation ids seen, with their bytes while live (`None`: freed).
    heap_ids: FastMap<u64, Option<i64>>,
    /// Steps closed since (and including) the last one that is a step: only that one can
    /// turn out to be the partial last step of an incomplete trace (at most two rows: a
    /// step that is no step can only be the first or the last).
    held_steps: Vec<StepRow>,
    open: FastMap<u64, OpenSpan>,
    devices: Vec<String>,
    /// Live allocations by (device, storage) and their bytes, replayed as the memory report
    /// replays them (per device; a free returns the allocation's bytes).
    live: FastMap<(u32, u64), i64>,
    summary: ExportSummary,
}

/// Writes the Parquet tables of the trace `reader` reads, one output per table in
/// [`Table::ALL`] order, every row tagged `run_id` and `rank`; returns the outputs (each
/// holding a complete Parquet file) and what was written.
///
/// One pass, linear time, the JSON parsed on a second thread. Memory held: one row group per table (at most
/// [`ExportOptions::row_group_rows`] rows each), the spans still open, and the live
/// allocations. Every table is written, an empty one with its schema and no rows, so an
/// export always replaces all of a partition's tables.
///
/// Errors: a rank beyond [`MAX_RANK`] ([`ParquetError::RankOutOfRange`], before anything is
/// written), a read error (its line and field), a value beyond `i64::MAX`
/// ([`ParquetError::OutOfRange`], its line and field), or an output that failed.
pub fn write_tables<R: BufRead + Send, W: Write>(
    reader: &mut TraceReader<R>,
    run_id: &str,
    rank: u32,
    opts: &ExportOptions,
    outputs: [W; Table::COUNT],
) -> Result<(Vec<W>, ExportSummary), ParquetError> {
    let rank = i32::try_from(rank).map_err(|_| ParquetError::RankOutOfRange { rank })?;
    let mut sinks = Vec::with_capacity(Table::COUNT);
    for (table, out) in Table::ALL.into_iter().zip(outputs) {
        sinks.push(Sink::new(table, out, opts)?);
    }
    let mut ex = Exporter {
        run_id,
        rank,
        start_unix_ns: reader.header().run.start_unix_ns,
        limit: opts.row_group_rows.max(1),
        sinks,
        ops: OpRows::default(),
        spans: SpanRows::default(),
        steps: StepRows::default(),
        memory: MemoryRows::default(),
        samples: SampleRows::default(),
        frames: FrameRows::default(),
        stacks: StackRows::default(),
        gradients: GradientRows::default(),
        heap: HeapRows::default(),
        tracker: StepTracker::new(),
        open_start: None,
        closed_steps: Vec::new(),
        heap_ids: FastMap::default(),
        held_steps: Vec::new(),
        open: FastMap::default(),
        devices: Vec::new(),
        live: FastMap::default(),
        summary: ExportSummary::default(),
    };
    // Parsing runs on a second thread, a few batches ahead (trace-record's pipeline).
    reader.for_each_batched(|le| ex.event(le.line, &le.event))?;
    ex.summary.incomplete = reader.is_incomplete();
    ex.finish(reader.lines_read())
}

impl<'a, W: Write> Exporter<'a, W> {
    fn key(&self) -> RowKey<'a> {
        RowKey {
            run_id: self.run_id,
            rank: self.rank,
            step: self.tracker.current().and_then(|s| i64::try_from(s).ok()),
        }
    }

    /// Writes `table`'s rows as a row group when it holds a full one.
    fn flush_full(&mut self, table: Table) -> Result<(), ParquetError> {
        let limit = self.limit;
        let sink = &mut self.sinks[table.index()];
        macro_rules! full {
            ($rows:expr) => {
                if $rows.len() >= limit {
                    sink.write(&mut $rows)?;
                }
            };
        }
        match table {
            Table::Ops => full!(self.ops),
            Table::Spans => full!(self.spans),
            Table::Steps => full!(self.steps),
            Table::Memory => full!(self.memory),
            Table::Samples => full!(self.samples),
            Table::Frames => full!(self.frames),
            Table::Stacks => full!(self.stacks),
            Table::Gradients => full!(self.gradients),
            Table::Heap => full!(self.heap),
        }
        Ok(())
    }

    fn event(&mut self, line: u64, e: &Event) -> Result<(), ParquetError> {
        self.summary.events += 1;
        if let Some(closed) = self.tracker.event(e) {
            self.closed_steps
                .push((closed.start_ns, closed.end_ns, closed.index));
            self.open_start = None;
            self.close_step(closed, line)?;
        }
        if self.open_start.is_none() && self.tracker.current().is_some() {
            // The event that opened it: a `step` line, or step 0's first timed event.
            self.open_start = e.ts();
        }
        match e {
            Event::Op(o) => {
                let own = match o.span.and_then(|s| self.open.get_mut(&s)) {
                    Some(sp) if !sp.claimed => {
                        let own = o.is_own_op_of(sp.row.kind, &sp.row.name, sp.start);
                        sp.claimed |= own;
                        own
                    }
                    _ => false,
                };
                let key = self.key();
                self.ops.push(key, line, o, own)?;
                self.flush_full(Table::Ops)?;
            }
            Event::SpanStart(s) => {
                let row = SpanRow {
                    step: self.key().step,
                    line: int(line, line, "line")?,
                    id: int(s.id, line, "id")?,
                    parent: s.parent.map(|p| int(p, line, "parent")).transpose()?,
                    name: s.name.clone(),
                    kind: s.kind,
                    exec_step: s.step.map(trace_record::schema::ExecStep::as_str),
                    thread: int(s.thread, line, "thread")?,
                    start_ns: int(s.ts, line, "ts")?,
                    end_ns: None,
                };
                let open = OpenSpan {
                    row,
                    start: s.ts,
                    claimed: false,
                };
                // A repeated id: the earlier span never ended under that id.
                if let Some(old) = self.open.insert(s.id, open) {
                    self.summary.unended_spans += 1;
                    self.spans.push(self.run_id, self.rank, &old.row);
                    self.flush_full(Table::Spans)?;
                }
            }
            Event::SpanEnd(s) => match self.open.remove(&s.id) {
                Some(mut sp) => {
                    sp.row.end_ns = Some(int(s.ts, line, "ts")?);
                    self.spans.push(self.run_id, self.rank, &sp.row);
                    self.flush_full(Table::Spans)?;
                }
                None => self.summary.stray_span_ends += 1,
            },
            Event::Memory(m) => {
                let dev = if let Some(i) = self.devices.iter().position(|d| *d == m.device) {
                    i as u32
                } else {
                    self.devices.push(m.device.clone());
                    (self.devices.len() - 1) as u32
                };
                let bytes = int(m.bytes, line, "bytes")?;
                let delta = match m.kind {
                    AllocKind::Alloc => match self.live.insert((dev, m.storage), bytes) {
                        Some(old) => {
                            self.summary.duplicate_allocs += 1;
                            bytes - old
                        }
                        None => bytes,
                    },
                    AllocKind::Free => {
                        if let Some(old) = self.live.remove(&(dev, m.storage)) {
                            -old
                        } else {
                            self.summary.frees_without_alloc += 1;
                            0
                        }
                    }
                };
                let row = MemoryRow {
                    line: int(line, line, "line")?,
                    ts_ns: int(m.ts, line, "ts")?,
                    action: m.kind.as_str(),
                    storage: int(m.storage, line, "storage")?,
                    tensor: int(m.tensor, line, "tensor")?,
                    bytes,
                    device: &self.devices[dev as usize],
                    category: m.category.as_str(),
                    span_id: m.span.map(|s| int(s, line, "span")).transpose()?,
                    delta_bytes: delta,
                };
                let key = RowKey {
                    run_id: self.run_id,
                    rank: self.rank,
                    step: self.tracker.current().and_then(|s| i64::try_from(s).ok()),
                };
                self.memory.push(key, &row);
                self.flush_full(Table::Memory)?;
            }
            Event::Samples(s) => {
                self.samples.push(self.run_id, self.rank, line, s)?;
                self.flush_full(Table::Samples)?;
            }
            Event::Frame(f) => {
                let key = self.key();
                self.frames.push(key, line, f)?;
                self.flush_full(Table::Frames)?;
            }
            Event::Stack(s) => {
                let l = int(line, line, "line")?;
                let id = int(s.id, line, "id")?;
                for (depth, &frame) in s.frames.iter().enumerate() {
                    let frame = int(frame, line, "frames")?;
                    let key = self.key();
                    self.stacks.push(key, l, id, depth as i64, frame);
                    self.flush_full(Table::Stacks)?;
                }
            }
            // Raw stacks (addresses) are symbolized by the CLI's loader, not exported.
            Event::Module(_) | Event::RawStack(_) => {}
            Event::Gradient(g) => {
                let key = self.key();
                self.gradients.push(key, line, g)?;
                self.flush_full(Table::Gradients)?;
            }
            Event::HeapAlloc(_)
            | Event::HeapFree(_)
            | Event::HeapSmall(_)
            | Event::HeapAccount(_) => {
                let (step, row) = self.heap_row(line, e)?;
                let key = RowKey {
                    run_id: self.run_id,
                    rank: self.rank,
                    step,
                };
                self.heap.push(key, &row);
                self.flush_full(Table::Heap)?;
            }
            Event::Step(_)
            | Event::Tensor(_)
            | Event::DeviceMemory(_)
            | Event::Marker(_)
            | Event::Counter(_)
            | Event::Sampler(_) => {}
        }
        Ok(())
    }

    /// The step whose time holds `ts`, as the heap analysis places tracked allocations and
    /// frees: the open step from its start on (its end is not known yet), else the closed
    /// step found by start time, `None` in a gap between steps or before the first.
    fn step_at(&self, ts: u64) -> Option<i64> {
        if let (Some(start), Some(index)) = (self.open_start, self.tracker.current())
            && ts >= start
        {
            return i64::try_from(index).ok();
        }
        let i = self.closed_steps.partition_point(|s| s.0 <= ts);
        let &(_, end, index) = self.closed_steps.get(i.checked_sub(1)?)?;
        (ts <= end).then(|| i64::try_from(index).ok()).flatten()
    }

    /// The step and row of a tracked-heap line (every conversion before any state changes).
    fn heap_row(&mut self, line: u64, e: &Event) -> Result<(Option<i64>, HeapRow), ParquetError> {
        let l = int(line, line, "line")?;
        let phase = |p: Option<trace_record::schema::ExecStep>| {
            p.map(trace_record::schema::ExecStep::as_str)
        };
        let opt = |v: Option<u64>, field| v.map(|v| int(v, line, field)).transpose();
        Ok(match e {
            Event::HeapAlloc(a) => {
                let row = HeapRow {
                    line: l,
                    event: "heap_alloc",
                    ts_ns: Some(int(a.ts, line, "ts")?),
                    alloc_id: Some(int(a.id, line, "id")?),
                    bytes: Some(int(a.bytes, line, "bytes")?),
                    thread: Some(int(a.thread, line, "thread")?),
                    exec_step: phase(a.phase),
                    span_id: opt(a.span, "span")?,
                    ..HeapRow::default()
                };
                let bytes = row.bytes.unwrap_or(0);
                // An id allocated again is ignored, as the heap replay ignores it.
                let delta = if let std::collections::hash_map::Entry::Vacant(v) =
                    self.heap_ids.entry(a.id)
                {
                    v.insert(Some(bytes));
                    bytes
                } else {
                    self.summary.heap_ignored += 1;
                    0
                };
                (
                    self.step_at(a.ts),
                    HeapRow {
                        delta_bytes: delta,
                        ..row
                    },
                )
            }
            Event::HeapFree(f) => {
                let ts = int(f.ts, line, "ts")?;
                let id = int(f.id, line, "id")?;
                let delta = match self.heap_ids.get_mut(&f.id) {
                    Some(live @ Some(_)) => -live.take().unwrap_or(0),
                    _ => {
                        self.summary.heap_ignored += 1;
                        0
                    }
                };
                let row = HeapRow {
                    line: l,
                    event: "heap_free",
                    ts_ns: Some(ts),
                    alloc_id: Some(id),
                    delta_bytes: delta,
                    ..HeapRow::default()
                };
                (self.step_at(f.ts), row)
            }
            Event::HeapSmall(s) => {
                let row = HeapRow {
                    line: l,
                    event: "heap_small",
                    bytes: Some(int(s.bytes, line, "bytes")?),
                    exec_step: phase(s.phase),
                    span_id: opt(s.span, "span")?,
                    count: Some(int(s.count, line, "count")?),
                    ..HeapRow::default()
                };
                (Some(int(s.step, line, "step")?), row)
            }
            Event::HeapAccount(a) => {
                let row = HeapRow {
                    line: l,
                    event: "heap_account",
                    ts_ns: Some(int(a.ts, line, "ts")?),
                    threshold: Some(int(a.threshold, line, "threshold")?),
                    lost: Some(int(a.lost, line, "lost")?),
                    unmatched_frees: Some(int(a.unmatched_frees, line, "unmatched_frees")?),
                    dur_ns: Some(int(a.dur, line, "dur")?),
                    ..HeapRow::default()
                };
                (Some(int(a.step, line, "step")?), row)
            }
            _ => (None, HeapRow::default()),
        })
    }

    /// A step the rule closed; `line` is where (for an error).
    fn close_step(&mut self, c: ClosedStep, line: u64) -> Result<(), ParquetError> {
        let unix = |ns: u64| {
            let v = self.start_unix_ns.saturating_add(ns);
            int(v, line, "start_unix_ns")
        };
        let row = StepRow {
            index: int(c.index, line, "index")?,
            start_ns: int(c.start_ns, line, "ts")?,
            end_ns: int(c.end_ns, line, "ts")?,
            start_unix_ns: unix(c.start_ns)?,
            end_unix_ns: unix(c.end_ns)?,
            has_work: c.has_work,
            is_step: c.is_step,
            complete: true,
        };
        if row.is_step {
            for held in std::mem::take(&mut self.held_steps) {
                self.steps.push(self.run_id, self.rank, &held);
                self.flush_full(Table::Steps)?;
            }
        }
        self.held_steps.push(row);
        Ok(())
    }

    fn finish(mut self, lines: u64) -> Result<(Vec<W>, ExportSummary), ParquetError> {
        if let Some(closed) = self.tracker.finish() {
            self.close_step(closed, lines)?;
        }
        // The last step of an incomplete trace is where the run stopped: a prefix.
        if self.summary.incomplete
            && let Some(last) = self.held_steps.iter_mut().rev().find(|s| s.is_step)
        {
            last.complete = false;
        }
        for held in std::mem::take(&mut self.held_steps) {
            self.steps.push(self.run_id, self.rank, &held);
            self.flush_full(Table::Steps)?;
        }
        // Spans that never ended, in the order they began.
        let mut unended: Vec<OpenSpan> = self.open.drain().map(|(_, s)| s).collect();
        unended.sort_unstable_by_key(|s| s.row.line);
        self.summary.unended_spans += unended.len() as u64;
        for s in unended {
            self.spans.push(self.run_id, self.rank, &s.row);
            self.flush_full(Table::Spans)?;
        }
        let mut outs = Vec::with_capacity(Table::COUNT);
        let mut sinks = std::mem::take(&mut self.sinks).into_iter();
        for table in Table::ALL {
            let Some(mut sink) = sinks.next() else { break };
            match table {
                Table::Ops => sink.write(&mut self.ops)?,
                Table::Spans => sink.write(&mut self.spans)?,
                Table::Steps => sink.write(&mut self.steps)?,
                Table::Memory => sink.write(&mut self.memory)?,
                Table::Samples => sink.write(&mut self.samples)?,
                Table::Frames => sink.write(&mut self.frames)?,
                Table::Stacks => sink.write(&mut self.stacks)?,
                Table::Gradients => sink.write(&mut self.gradients)?,
                Table::Heap => sink.write(&mut self.heap)?,
            }
            let (out, rows, bytes) = sink.close()?;
            self.summary.rows[table.index()] = rows;
            self.summary.bytes[table.index()] = bytes;
            outs.push(out);
        }
        Ok((outs, self.summary))
    }
}
