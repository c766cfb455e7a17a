//! The recording hot path allocates nothing per event in steady state.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use trace_record::schema::{AllocKind, GradientState, MemoryCategory, SpanKind};
use trace_record::{MemoryRecord, OpRecord, TensorRecord, TraceSession};

use crate::common::run;

/// Counts allocations made by the current thread (tests run on several threads).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread-local
// `Cell` without a destructor, so touching it never allocates or re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn round(session: &TraceSession, i: u64) {
    let _outer = session.span("forward", SpanKind::Module, None);
    let _inner = session.span("linear", SpanKind::Op, None);
    let t = session.now_ns();
    session.record_op(&OpRecord {
        name: "matmul",
        inputs: &[i, i + 1],
        outputs: &[i + 2],
        shape: &[64, 128],
        dtype: "f32",
        device: "cuda:0",
        start_ns: t,
        dur_ns: 100,
        in_bytes: 65536,
        out_bytes: 32768,
        category: Some(MemoryCategory::Activation),
        flops: Some(1 << 20),
    });
    session.record_tensor(&TensorRecord {
        id: i + 2,
        label: Some("h \"quoted\"\n"),
        shape: &[64, 128],
        dtype: "f32",
        device: "cpu",
        requires_grad: false,
        bytes: 32768,
        category: MemoryCategory::Activation,
    });
    for kind in [AllocKind::Alloc, AllocKind::Free] {
        session.record_memory(&MemoryRecord {
            kind,
            storage: i,
            tensor: i + 2,
            bytes: 32768,
            device: "cpu",
            category: MemoryCategory::Activation,
        });
    }
    let shape = [32, 16];
    let outputs = [i + 3];
    session.record_op_with_output(
        &OpRecord {
            name: "relu",
            inputs: &[i + 2],
            outputs: &outputs,
            shape: &shape,
            dtype: "f32",
            device: "cpu",
            start_ns: t,
            dur_ns: 40,
            in_bytes: 2048,
            out_bytes: 2048,
            category: Some(MemoryCategory::Activation),
            flops: None,
        },
        &TensorRecord {
            id: i + 3,
            label: None,
            shape: &shape,
            dtype: "f32",
            device: "cpu",
            requires_grad: true,
            bytes: 2048,
            category: MemoryCategory::Activation,
        },
        Some(&MemoryRecord {
            kind: AllocKind::Alloc,
            storage: i + 3,
            tensor: i + 3,
            bytes: 2048,
            device: "cpu",
            category: MemoryCategory::Activation,
        }),
    );
    session.record_gradient("layer.weight", GradientState::Present, Some(1.5));
    session.record_device_memory("cuda:0", Some(1), Some(2), None);
    session.record_marker("m");
    session.record_counter("loss", 0.25);
    session.step();
}

#[test]
fn steady_state_records_allocate_nothing() {
    // No background writer: when it happens to hold the lock the first time, a recording
    // thread formats into its per-thread buffer, which is allocated then (once per thread,
    // not per event). With the 200 ms flusher that first time fell inside the counted rounds
    // whenever the warm-up took longer than 200 ms (an unoptimised build on a busy machine).
    let session = TraceSession::from_writer(std::io::sink(), run().flush_interval(None));
    // Warm up: per-thread buffers and the block buffer reach their working sizes, and at
    // least one block is written.
    for i in 0..5_000 {
        round(&session, i);
    }
    let before = allocs();
    for i in 0..20_000 {
        round(&session, i);
    }
    let after = allocs();
    assert_eq!(
        after - before,
        0,
        "allocations in 20,000 rounds of 15 events"
    );
    let summary = session.finish().unwrap();
    assert_eq!(summary.counts.op, 50_000);
    assert_eq!(summary.counts.memory, 75_000);
}

#[test]
fn a_compressed_session_allocates_nothing_on_the_recording_thread_in_steady_state() {
    // Blocks go to the writer thread and their buffers come back for reuse: after the first
    // few, the recording thread allocates no buffer (the compressor's allocations are the
    // writer thread's, not counted here).
    let session = TraceSession::from_writer(
        std::io::sink(),
        run()
            .flush_interval(None)
            .compression(trace_record::Compression::zstd()),
    );
    for i in 0..5_000 {
        round(&session, i);
    }
    let before = allocs();
    for i in 0..20_000 {
        round(&session, i);
    }
    let after = allocs();
    assert_eq!(
        after - before,
        0,
        "allocations in 20,000 rounds of 15 events, each round a step (a frame)"
    );
    let summary = session.finish().unwrap();
    assert_eq!(summary.counts.op, 50_000);
}
