//! Integration tests of trace-record: sessions, schema round trips, reader errors, validation.
#![allow(unsafe_code)] // the counting global allocator in `alloc` needs `unsafe impl GlobalAlloc`

mod alloc;
mod claim;
mod combined;
mod common;
mod compressed;
mod crash;
mod doc_examples;
mod escape;
mod fast_path;
mod flight_process;
mod flight_record;
mod flush_step_bound;
mod hostile_lines;
mod io_errors;
mod json;
mod kill_finished_step;
mod lag;
mod pipeline;
mod reader_bounds;
mod reader_errors;
mod reader_strict_gaps;
mod roundtrip;
mod sampled;
mod schedule;
mod session;
mod threads;
mod validation;
mod vocab;
mod write_time;
