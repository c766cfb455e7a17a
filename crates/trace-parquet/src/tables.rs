//! The tables: their schemas (column names, types, nullability) and row builders.
//!
//! Every table starts with `run_id`, `rank` and `step`; the columns after them are the trace's
//! own fields, in nanoseconds and bytes, signed 64-bit (what Spark, DuckDB and Polars all
//! read natively). Each builder's `finish` returns its arrays in its schema's order.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::ParquetError;

/// One Parquet table of an export: one file per table in each partition directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// One row per executed op (`op` line).
    Ops,
    /// One row per span, written when it ends (or at the end of the trace if it never did).
    Spans,
    /// One row per step, numbered and bounded by trace-record's step rule.
    Steps,
    /// One row per allocation or free (`memory` line), with its change to live bytes.
    Memory,
    /// One row per `samples` line: CPU samples of one stack, thread and step.
    Samples,
    /// One row per interned frame of sampled stacks (`frame` line).
    Frames,
    /// One row per frame position of an interned stack (`stack` line), outermost first.
    Stacks,
    /// One row per gradient fact (`gradient` line).
    Gradients,
    /// One row per tracked-heap line (`heap_alloc`, `heap_free`, `heap_small`,
    /// `heap_account`), with its change to live tracked heap bytes.
    Heap,
}

impl Table {
    /// The number of tables.
    pub const COUNT: usize = 9;
    /// Every table, in the order [`crate::write_tables`] takes its outputs.
    pub const ALL: [Table; Table::COUNT] = [
        Table::Ops,
        Table::Spans,
        Table::Steps,
        Table::Memory,
        Table::Samples,
        Table::Frames,
        Table::Stacks,
        Table::Gradients,
        Table::Heap,
    ];

    /// The table's name (`ops`, `spans`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Table::Ops => "ops",
            Table::Spans => "spans",
            Table::Steps => "steps",
            Table::Memory => "memory",
            Table::Samples => "samples",
            Table::Frames => "frames",
            Table::Stacks => "stacks",
            Table::Gradients => "gradients",
            Table::Heap => "heap",
        }
    }

    /// The table's file name in a partition directory (`ops.parquet`, ...).
    pub const fn file_name(self) -> &'static str {
        match self {
            Table::Ops => "ops.parquet",
            Table::Spans => "spans.parquet",
            Table::Steps => "steps.parquet",
            Table::Memory => "memory.parquet",
            Table::Samples => "samples.parquet",
            Table::Frames => "frames.parquet",
            Table::Stacks => "stacks.parquet",
            Table::Gradients => "gradients.parquet",
            Table::Heap => "heap.parquet",
        }
    }

    /// The position of this table in [`Table::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The table's Arrow schema.
    pub(crate) fn schema(self) -> SchemaRef {
        use DataType::{Boolean, Float64, Int64, Utf8};
        let mut f = vec![
            Field::new("run_id", Utf8, false),
            Field::new("rank", DataType::Int32, false),
            Field::new("step", Int64, self != Table::Steps),
        ];
        let list = || DataType::List(Arc::new(Field::new("item", Int64, true)));
        let cols: Vec<(&str, DataType, bool)> = match self {
            Table::Ops => vec![
                ("line", Int64, false),
                ("span_id", Int64, true),
                ("name", Utf8, false),
                ("ts_ns", Int64, false),
                ("dur_ns", Int64, false),
                ("dtype", Utf8, false),
                ("device", Utf8, false),
                ("shape", list(), false),
                ("inputs", list(), false),
                ("outputs", list(), false),
                ("in_bytes", Int64, false),
                ("out_bytes", Int64, false),
                ("category", Utf8, true),
                ("flops", Int64, true),
                ("own_op", Boolean, false),
            ],
            Table::Spans => vec![
                ("line", Int64, false),
                ("span_id", Int64, false),
                ("parent_id", Int64, true),
                ("name", Utf8, false),
                ("kind", Utf8, false),
                ("exec_step", Utf8, true),
                ("thread", Int64, false),
                ("start_ns", Int64, false),
                ("end_ns", Int64, true),
                ("dur_ns", Int64, true),
            ],
            Table::Steps => vec![
                ("start_ns", Int64, false),
                ("end_ns", Int64, false),
                ("dur_ns", Int64, false),
                ("start_unix_ns", Int64, false),
                ("end_unix_ns", Int64, false),
                ("has_work", Boolean, false),
                ("is_step", Boolean, false),
                ("complete", Boolean, false),
            ],
            Table::Memory => vec![
                ("line", Int64, false),
                ("ts_ns", Int64, false),
                ("action", Utf8, false),
                ("storage", Int64, false),
                ("tensor", Int64, false),
                ("bytes", Int64, false),
                ("device", Utf8, false),
                ("category", Utf8, false),
                ("span_id", Int64, true),
                ("delta_bytes", Int64, false),
            ],
            Table::Samples => vec![
                ("line", Int64, false),
                ("thread", Int64, false),
                ("stack_id", Int64, false),
                ("n", Int64, false),
                ("exec_step", Utf8, true),
                ("span_id", Int64, true),
            ],
            Table::Frames => vec![
                ("line", Int64, false),
                ("frame_id", Int64, false),
                ("func", Utf8, false),
                ("file", Utf8, true),
                ("inlined", Boolean, false),
            ],
            Table::Stacks => vec![
                ("line", Int64, false),
                ("stack_id", Int64, false),
                ("depth", Int64, false),
                ("frame_id", Int64, false),
            ],
            Table::Gradients => vec![
                ("line", Int64, false),
                ("ts_ns", Int64, false),
                ("param", Utf8, false),
                ("state", Utf8, false),
                ("norm", Float64, true),
            ],
            Table::Heap => vec![
                ("line", Int64, false),
                ("event", Utf8, false),
                ("ts_ns", Int64, true),
                ("alloc_id", Int64, true),
                ("bytes", Int64, true),
                ("thread", Int64, true),
                ("exec_step", Utf8, true),
                ("span_id", Int64, true),
                ("count", Int64, true),
                ("threshold", Int64, true),
                ("lost", Int64, true),
                ("unmatched_frees", Int64, true),
                ("dur_ns", Int64, true),
                ("delta_bytes", Int64, false),
            ],
        };
        f.extend(cols.into_iter().map(|(n, t, null)| Field::new(n, t, null)));
        Arc::new(Schema::new(f))
    }
}

/// `v` as a signed 64-bit value, or the error naming its line and field.
pub(crate) fn int(v: u64, line: u64, field: &'static str) -> Result<i64, ParquetError> {
    i64::try_from(v).map_err(|_| ParquetError::OutOfRange {
        line,
        field,
        value: v,
    })
}

/// The run, rank and step of every row.
#[derive(Default)]
pub(crate) struct Common {
    run_id: StringBuilder,
    rank: Int32Builder,
    step: Int64Builder,
    rows: usize,
}

impl Common {
    fn push(&mut self, run_id: &str, rank: i32, step: Option<i64>) {
        self.run_id.append_value(run_id);
        self.rank.append_value(rank);
        self.step.append_option(step);
        self.rows += 1;
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            Arc::new(self.run_id.finish()),
            Arc::new(self.rank.finish()),
            Arc::new(self.step.finish()),
        ]
    }
}

/// Who a row belongs to: the export's run id and rank, the step (`None`: before any step).
#[derive(Clone, Copy)]
pub(crate) struct RowKey<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) rank: i32,
    pub(crate) step: Option<i64>,
}

/// A table's rows not yet written.
pub(crate) trait Rows {
    /// Rows held.
    fn len(&self) -> usize;
    /// The held rows as arrays in the schema's order; the builder is empty afterwards.
    fn finish(&mut self) -> Vec<ArrayRef>;
}

/// Fails on the first of `vals` beyond `i64::MAX` (checked before a row appends anything).
fn check_all(
    vals: impl IntoIterator<Item = u64>,
    line: u64,
    field: &'static str,
) -> Result<(), ParquetError> {
    vals.into_iter()
        .try_for_each(|v| int(v, line, field).map(drop))
}

/// Appends one list of values already checked by [`check_all`].
fn list_of(b: &mut ListBuilder<Int64Builder>, vals: impl IntoIterator<Item = u64>) {
    for v in vals {
        // Checked: at most i64::MAX.
        b.values().append_value(v as i64);
    }
    b.append(true);
}

/// The `ops` table.
#[derive(Default)]
pub(crate) struct OpRows {
    c: Common,
    line: Int64Builder,
    span_id: Int64Builder,
    name: StringBuilder,
    ts_ns: Int64Builder,
    dur_ns: Int64Builder,
    dtype: StringBuilder,
    device: StringBuilder,
    shape: ListBuilder<Int64Builder>,
    inputs: ListBuilder<Int64Builder>,
    outputs: ListBuilder<Int64Builder>,
    in_bytes: Int64Builder,
    out_bytes: Int64Builder,
    category: StringBuilder,
    flops: Int64Builder,
    own_op: BooleanBuilder,
}

impl OpRows {
    /// Appends one op line.
    pub(crate) fn push(
        &mut self,
        key: RowKey<'_>,
        line: u64,
        o: &trace_record::schema::OpEvent,
        own_op: bool,
    ) -> Result<(), ParquetError> {
        // Every fallible conversion first, so a failing row appends nothing.
        let span = o.span.map(|s| int(s, line, "span")).transpose()?;
        let ts = int(o.ts, line, "ts")?;
        let dur = int(o.dur, line, "dur")?;
        check_all(o.shape.iter().map(|&d| d as u64), line, "shape")?;
        check_all(o.inputs.iter().copied(), line, "in")?;
        check_all(o.outputs.iter().copied(), line, "out")?;
        let in_b = int(o.in_bytes, line, "in_b")?;
        let out_b = int(o.out_bytes, line, "out_b")?;
        let flops = o.flops.map(|f| int(f, line, "flops")).transpose()?;
        self.c.push(key.run_id, key.rank, key.step);
        self.line.append_value(int(line, line, "line")?);
        self.span_id.append_option(span);
        self.name.append_value(&o.name);
        self.ts_ns.append_value(ts);
        self.dur_ns.append_value(dur);
        self.dtype.append_value(&o.dtype);
        self.device.append_value(&o.device);
        list_of(&mut self.shape, o.shape.iter().map(|&d| d as u64));
        list_of(&mut self.inputs, o.inputs.iter().copied());
        list_of(&mut self.outputs, o.outputs.iter().copied());
        self.in_bytes.append_value(in_b);
        self.out_bytes.append_value(out_b);
        self.category
            .append_option(o.category.map(trace_record::schema::MemoryCategory::as_str));
        self.flops.append_option(flops);
        self.own_op.append_value(own_op);
        Ok(())
    }
}

impl Rows for OpRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.span_id.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.ts_ns.finish()),
            Arc::new(self.dur_ns.finish()),
            Arc::new(self.dtype.finish()),
            Arc::new(self.device.finish()),
            Arc::new(self.shape.finish()),
            Arc::new(self.inputs.finish()),
            Arc::new(self.outputs.finish()),
            Arc::new(self.in_bytes.finish()),
            Arc::new(self.out_bytes.finish()),
            Arc::new(self.category.finish()),
            Arc::new(self.flops.finish()),
            Arc::new(self.own_op.finish()),
        ]);
        v
    }
}

/// A span as the `spans` table writes it (its end filled in when it ends).
#[derive(Debug, Clone)]
pub(crate) struct SpanRow {
    pub(crate) step: Option<i64>,
    pub(crate) line: i64,
    pub(crate) id: i64,
    pub(crate) parent: Option<i64>,
    pub(crate) name: String,
    pub(crate) kind: trace_record::schema::SpanKind,
    pub(crate) exec_step: Option<&'static str>,
    pub(crate) thread: i64,
    pub(crate) start_ns: i64,
    pub(crate) end_ns: Option<i64>,
}

/// The `spans` table.
#[derive(Default)]
pub(crate) struct SpanRows {
    c: Common,
    line: Int64Builder,
    span_id: Int64Builder,
    parent_id: Int64Builder,
    name: StringBuilder,
    kind: StringBuilder,
    exec_step: StringBuilder,
    thread: Int64Builder,
    start_ns: Int64Builder,
    end_ns: Int64Builder,
    dur_ns: Int64Builder,
}

impl SpanRows {
    /// Appends one span.
    pub(crate) fn push(&mut self, run_id: &str, rank: i32, s: &SpanRow) {
        self.c.push(run_id, rank, s.step);
        self.line.append_value(s.line);
        self.span_id.append_value(s.id);
        self.parent_id.append_option(s.parent);
        self.name.append_value(&s.name);
        self.kind.append_value(s.kind.as_str());
        self.exec_step.append_option(s.exec_step);
        self.thread.append_value(s.thread);
        self.start_ns.append_value(s.start_ns);
        self.end_ns.append_option(s.end_ns);
        // The reader keeps an end no earlier than the start, as the loader does.
        self.dur_ns
            .append_option(s.end_ns.map(|e| e.max(s.start_ns) - s.start_ns));
    }
}

impl Rows for SpanRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.span_id.finish()),
            Arc::new(self.parent_id.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.exec_step.finish()),
            Arc::new(self.thread.finish()),
            Arc::new(self.start_ns.finish()),
            Arc::new(self.end_ns.finish()),
            Arc::new(self.dur_ns.finish()),
        ]);
        v
    }
}

/// A step as the `steps` table writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepRow {
    pub(crate) index: i64,
    pub(crate) start_ns: i64,
    pub(crate) end_ns: i64,
    pub(crate) start_unix_ns: i64,
    pub(crate) end_unix_ns: i64,
    pub(crate) has_work: bool,
    pub(crate) is_step: bool,
    pub(crate) complete: bool,
}

/// The `steps` table.
#[derive(Default)]
pub(crate) struct StepRows {
    c: Common,
    start_ns: Int64Builder,
    end_ns: Int64Builder,
    dur_ns: Int64Builder,
    start_unix_ns: Int64Builder,
    end_unix_ns: Int64Builder,
    has_work: BooleanBuilder,
    is_step: BooleanBuilder,
    complete: BooleanBuilder,
}

impl StepRows {
    /// Appends one step.
    pub(crate) fn push(&mut self, run_id: &str, rank: i32, s: &StepRow) {
        self.c.push(run_id, rank, Some(s.index));
        self.start_ns.append_value(s.start_ns);
        self.end_ns.append_value(s.end_ns);
        self.dur_ns.append_value(s.end_ns - s.start_ns);
        self.start_unix_ns.append_value(s.start_unix_ns);
        self.end_unix_ns.append_value(s.end_unix_ns);
        self.has_work.append_value(s.has_work);
        self.is_step.append_value(s.is_step);
        self.complete.append_value(s.complete);
    }
}

impl Rows for StepRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.start_ns.finish()) as ArrayRef,
            Arc::new(self.end_ns.finish()),
            Arc::new(self.dur_ns.finish()),
            Arc::new(self.start_unix_ns.finish()),
            Arc::new(self.end_unix_ns.finish()),
            Arc::new(self.has_work.finish()),
            Arc::new(self.is_step.finish()),
            Arc::new(self.complete.finish()),
        ]);
        v
    }
}

/// The `memory` table.
#[derive(Default)]
pub(crate) struct MemoryRows {
    c: Common,
    line: Int64Builder,
    ts_ns: Int64Builder,
    action: StringBuilder,
    storage: Int64Builder,
    tensor: Int64Builder,
    bytes: Int64Builder,
    device: StringBuilder,
    category: StringBuilder,
    span_id: Int64Builder,
    delta_bytes: Int64Builder,
}

/// A `memory` line's converted fields.
pub(crate) struct MemoryRow<'a> {
    pub(crate) line: i64,
    pub(crate) ts_ns: i64,
    pub(crate) action: &'static str,
    pub(crate) storage: i64,
    pub(crate) tensor: i64,
    pub(crate) bytes: i64,
    pub(crate) device: &'a str,
    pub(crate) category: &'static str,
    pub(crate) span_id: Option<i64>,
    pub(crate) delta_bytes: i64,
}

impl MemoryRows {
    /// Appends one allocation or free.
    pub(crate) fn push(&mut self, key: RowKey<'_>, m: &MemoryRow<'_>) {
        self.c.push(key.run_id, key.rank, key.step);
        self.line.append_value(m.line);
        self.ts_ns.append_value(m.ts_ns);
        self.action.append_value(m.action);
        self.storage.append_value(m.storage);
        self.tensor.append_value(m.tensor);
        self.bytes.append_value(m.bytes);
        self.device.append_value(m.device);
        self.category.append_value(m.category);
        self.span_id.append_option(m.span_id);
        self.delta_bytes.append_value(m.delta_bytes);
    }
}

impl Rows for MemoryRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.ts_ns.finish()),
            Arc::new(self.action.finish()),
            Arc::new(self.storage.finish()),
            Arc::new(self.tensor.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.device.finish()),
            Arc::new(self.category.finish()),
            Arc::new(self.span_id.finish()),
            Arc::new(self.delta_bytes.finish()),
        ]);
        v
    }
}

/// The `samples` table.
#[derive(Default)]
pub(crate) struct SampleRows {
    c: Common,
    line: Int64Builder,
    thread: Int64Builder,
    stack_id: Int64Builder,
    n: Int64Builder,
    exec_step: StringBuilder,
    span_id: Int64Builder,
}

impl SampleRows {
    /// Appends one `samples` line; its step is the line's own `step` field.
    pub(crate) fn push(
        &mut self,
        run_id: &str,
        rank: i32,
        line: u64,
        s: &trace_record::schema::SamplesEvent,
    ) -> Result<(), ParquetError> {
        let step = int(s.step, line, "step")?;
        let thread = int(s.thread, line, "thread")?;
        let stack = int(s.stack, line, "stack")?;
        let n = int(s.n, line, "n")?;
        let span = s.span.map(|v| int(v, line, "span")).transpose()?;
        self.c.push(run_id, rank, Some(step));
        self.line.append_value(int(line, line, "line")?);
        self.thread.append_value(thread);
        self.stack_id.append_value(stack);
        self.n.append_value(n);
        self.exec_step
            .append_option(s.phase.map(trace_record::schema::ExecStep::as_str));
        self.span_id.append_option(span);
        Ok(())
    }
}

impl Rows for SampleRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.thread.finish()),
            Arc::new(self.stack_id.finish()),
            Arc::new(self.n.finish()),
            Arc::new(self.exec_step.finish()),
            Arc::new(self.span_id.finish()),
        ]);
        v
    }
}

/// The `frames` table.
#[derive(Default)]
pub(crate) struct FrameRows {
    c: Common,
    line: Int64Builder,
    frame_id: Int64Builder,
    func: StringBuilder,
    file: StringBuilder,
    inlined: BooleanBuilder,
}

impl FrameRows {
    /// Appends one `frame` line.
    pub(crate) fn push(
        &mut self,
        key: RowKey<'_>,
        line: u64,
        f: &trace_record::schema::FrameEvent,
    ) -> Result<(), ParquetError> {
        let id = int(f.id, line, "id")?;
        self.c.push(key.run_id, key.rank, key.step);
        self.line.append_value(int(line, line, "line")?);
        self.frame_id.append_value(id);
        self.func.append_value(&f.func);
        self.file.append_option(f.file.as_deref());
        self.inlined.append_value(f.inlined);
        Ok(())
    }
}

impl Rows for FrameRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.frame_id.finish()),
            Arc::new(self.func.finish()),
            Arc::new(self.file.finish()),
            Arc::new(self.inlined.finish()),
        ]);
        v
    }
}

/// The `stacks` table: one row per frame of a stack.
#[derive(Default)]
pub(crate) struct StackRows {
    c: Common,
    line: Int64Builder,
    stack_id: Int64Builder,
    depth: Int64Builder,
    frame_id: Int64Builder,
}

impl StackRows {
    /// Appends the frame at `depth` (0: outermost) of a `stack` line.
    pub(crate) fn push(&mut self, key: RowKey<'_>, line: i64, stack: i64, depth: i64, frame: i64) {
        self.c.push(key.run_id, key.rank, key.step);
        self.line.append_value(line);
        self.stack_id.append_value(stack);
        self.depth.append_value(depth);
        self.frame_id.append_value(frame);
    }
}

impl Rows for StackRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.stack_id.finish()),
            Arc::new(self.depth.finish()),
            Arc::new(self.frame_id.finish()),
        ]);
        v
    }
}

/// The `gradients` table.
#[derive(Default)]
pub(crate) struct GradientRows {
    c: Common,
    line: Int64Builder,
    ts_ns: Int64Builder,
    param: StringBuilder,
    state: StringBuilder,
    norm: Float64Builder,
}

impl GradientRows {
    /// Appends one `gradient` line.
    pub(crate) fn push(
        &mut self,
        key: RowKey<'_>,
        line: u64,
        g: &trace_record::schema::GradientEvent,
    ) -> Result<(), ParquetError> {
        let ts = int(g.ts, line, "ts")?;
        self.c.push(key.run_id, key.rank, key.step);
        self.line.append_value(int(line, line, "line")?);
        self.ts_ns.append_value(ts);
        self.param.append_value(&g.param);
        self.state.append_value(g.state.as_str());
        self.norm.append_option(g.norm);
        Ok(())
    }
}

impl Rows for GradientRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.ts_ns.finish()),
            Arc::new(self.param.finish()),
            Arc::new(self.state.finish()),
            Arc::new(self.norm.finish()),
        ]);
        v
    }
}

/// A tracked-heap line's converted fields (`None`: the line's type has no such field).
#[derive(Default)]
pub(crate) struct HeapRow {
    pub(crate) line: i64,
    pub(crate) event: &'static str,
    pub(crate) ts_ns: Option<i64>,
    pub(crate) alloc_id: Option<i64>,
    pub(crate) bytes: Option<i64>,
    pub(crate) thread: Option<i64>,
    pub(crate) exec_step: Option<&'static str>,
    pub(crate) span_id: Option<i64>,
    pub(crate) count: Option<i64>,
    pub(crate) threshold: Option<i64>,
    pub(crate) lost: Option<i64>,
    pub(crate) unmatched_frees: Option<i64>,
    pub(crate) dur_ns: Option<i64>,
    pub(crate) delta_bytes: i64,
}

/// The `heap` table.
#[derive(Default)]
pub(crate) struct HeapRows {
    c: Common,
    line: Int64Builder,
    event: StringBuilder,
    ts_ns: Int64Builder,
    alloc_id: Int64Builder,
    bytes: Int64Builder,
    thread: Int64Builder,
    exec_step: StringBuilder,
    span_id: Int64Builder,
    count: Int64Builder,
    threshold: Int64Builder,
    lost: Int64Builder,
    unmatched_frees: Int64Builder,
    dur_ns: Int64Builder,
    delta_bytes: Int64Builder,
}

impl HeapRows {
    /// Appends one tracked-heap line.
    pub(crate) fn push(&mut self, key: RowKey<'_>, h: &HeapRow) {
        self.c.push(key.run_id, key.rank, key.step);
        self.line.append_value(h.line);
        self.event.append_value(h.event);
        self.ts_ns.append_option(h.ts_ns);
        self.alloc_id.append_option(h.alloc_id);
        self.bytes.append_option(h.bytes);
        self.thread.append_option(h.thread);
        self.exec_step.append_option(h.exec_step);
        self.span_id.append_option(h.span_id);
        self.count.append_option(h.count);
        self.threshold.append_option(h.threshold);
        self.lost.append_option(h.lost);
        self.unmatched_frees.append_option(h.unmatched_frees);
        self.dur_ns.append_option(h.dur_ns);
        self.delta_bytes.append_value(h.delta_bytes);
    }
}

impl Rows for HeapRows {
    fn len(&self) -> usize {
        self.c.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut v = self.c.finish();
        v.extend([
            Arc::new(self.line.finish()) as ArrayRef,
            Arc::new(self.event.finish()),
            Arc::new(self.ts_ns.finish()),
            Arc::new(self.alloc_id.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.thread.finish()),
            Arc::new(self.exec_step.finish()),
            Arc::new(self.span_id.finish()),
            Arc::new(self.count.finish()),
            Arc::new(self.threshold.finish()),
            Arc::new(self.lost.finish()),
            Arc::new(self.unmatched_frees.finish()),
            Arc::new(self.dur_ns.finish()),
            Arc::new(self.delta_bytes.finish()),
        ]);
        v
    }
}
