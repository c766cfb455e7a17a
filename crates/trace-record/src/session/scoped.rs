//! Records for capture libraries: ops with each input's shape and dtype, lazily opened spans.
//!
//! A lazily opened scope is a span opened at an instant already read.

use super::{STACK, StackEntry, TraceSession, thread_no};
use crate::encode::{self, InputMeta};
use crate::records::{MemoryRecord, OpRecord, SpanId, TensorRecord};
use crate::schema::{EventType, ExecStep, SpanKind};

impl TraceSession {
    /// [`TraceSession::record_op_with_output`] with every input's shape and dtype written on
    /// the `op` line (`in_shapes`, and `in_dtypes` unless every input has the op's dtype).
    /// `in_shapes` and `in_dtypes` hold one entry per id of `op.inputs`, in that order.
    /// Nothing outside an active window.
    ///
    /// ```
    /// use trace_record::{OpRecord, Run, TensorRecord, TraceSession};
    /// use trace_record::schema::{Event, MemoryCategory, Phase};
    ///
    /// let (session, sink) = TraceSession::in_memory(Run::new("doc::inputs", Phase::Infer, "cpu"));
    /// let cat = MemoryCategory::Activation;
    /// session.record_op_with_inputs(
    ///     &OpRecord {
    ///         name: "embedding", inputs: &[1, 2], outputs: &[3], shape: &[1, 16, 8],
    ///         dtype: "f32", device: "cpu", start_ns: 0, dur_ns: 50, in_bytes: 32064,
    ///         out_bytes: 512, category: Some(cat), flops: None,
    ///     },
    ///     &[&[1, 16], &[1000, 8]],
    ///     &["u32", "f32"],
    ///     &TensorRecord {
    ///         id: 3, label: None, shape: &[1, 16, 8], dtype: "f32", device: "cpu",
    ///         requires_grad: false, bytes: 512, category: cat,
    ///     },
    ///     None,
    /// );
    /// session.finish().unwrap();
    /// let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    /// let Event::Op(op) = &trace.events[0].event else { panic!() };
    /// assert_eq!(op.in_shapes, Some(vec![vec![1, 16], vec![1000, 8]]));
    /// assert_eq!(op.in_dtypes, Some(vec!["u32".to_string(), "f32".to_string()]));
    /// ```
    #[inline]
    pub fn record_op_with_inputs(
        &self,
        op: &OpRecord<'_>,
        in_shapes: &[&[usize]],
        in_dtypes: &[&str],
        tensor: &TensorRecord<'_>,
        alloc: Option<&MemoryRecord<'_>>,
    ) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        let device: &str = &self.device;
        let inputs = InputMeta {
            shapes: in_shapes,
            dtypes: in_dtypes,
        };
        match alloc {
            Some(mem) => {
                let ts = op.start_ns.saturating_add(op.dur_ns);
                self.emit_lines(
                    &[EventType::Op, EventType::Tensor, EventType::Memory],
                    |b| {
                        encode::op_with_output_inputs(
                            b,
                            span,
                            op,
                            Some(&inputs),
                            tensor,
                            Some((mem, ts)),
                            device,
                        );
                    },
                );
            }
            None => self.emit_lines(&[EventType::Op, EventType::Tensor], |b| {
                encode::op_with_output_inputs(b, span, op, Some(&inputs), tensor, None, device);
            }),
        }
    }

    /// Opens a span on this thread that started at `start_ns` (an instant already read from
    /// [`TraceSession::now_ns`], no earlier than the enclosing span's start), without a
    /// guard: end it with [`TraceSession::end_span_id`] on this thread. Its parent is the
    /// innermost written span open on this thread. Returns `None` (and opens nothing)
    /// outside an active window.
    ///
    /// This lets a recorder decide late that a region it is timing is a span: an op whose
    /// closure turns out to contain other spans or ops becomes the parent of those, from
    /// the op's own start.
    pub fn start_span_at(
        &self,
        name: &str,
        kind: SpanKind,
        step: Option<ExecStep>,
        start_ns: u64,
    ) -> Option<SpanId> {
        if !self.is_active() {
            return None;
        }
        let id = self.new_span_id();
        let parent = self.current_span_raw();
        STACK.with(|st| {
            st.borrow_mut().push(StackEntry {
                session: self.id,
                span: id,
                written: true,
            });
        });
        let thread = thread_no();
        self.emit(EventType::SpanStart, |b| {
            encode::span_start(b, id, parent, (name, None), kind, step, thread, start_ns);
        });
        Some(SpanId(id))
    }

    /// Ends a span opened by [`TraceSession::start_span_at`] on this thread now (and, as a
    /// guard's drop does, any of this session's spans opened after it on this thread).
    pub fn end_span_id(&self, id: SpanId) {
        self.end_span(id.0);
    }

    /// Like [`TraceSession::end_span_id`], ending at `end_ns` (ns since the session's start,
    /// as [`TraceSession::now_ns`] gives) instead of now: an op that became a span ends its
    /// span where the op ended, so that the two cover one interval. An `end_ns` before the
    /// span's start is written as given (readers clamp it as for any recorded time).
    pub fn end_span_id_at(&self, id: SpanId, end_ns: u64) {
        self.end_span_at_or_now(id.0, Some(end_ns));
    }
}
