//! The capture's heap tracking (feature `heap`): `track_heap`, `stop_heap`, `heap_stats`.
//!
//! The tracker is trace-heap's (one per process, since there is one global allocator); the
//! program declares [`TrackingAlloc`](crate::TrackingAlloc) as its global allocator and the
//! capture starts the tracker for its session. While it runs, every span this crate opens or
//! ends publishes the thread's phase and innermost open span as the current scope (the
//! tracker holds a [`trace_sampler::ScopeDemand`]), so each allocation is attributed to it,
//! and a worker thread's to the driving thread's.

use crate::{Capture, HeapConfig, HeapError, HeapStats};

impl Capture {
    /// Starts tracking the process's heap allocations into this capture's session, inside its
    /// recorded windows, until [`Capture::stop_heap`]. Needs the tracking allocator, one line
    /// in the program's binary:
    ///
    /// ```no_run
    /// #[global_allocator]
    /// static ALLOC: trace_candle::TrackingAlloc = trace_candle::TrackingAlloc::system();
    ///
    /// # use trace_candle::{Capture, HeapConfig, Phase, Run};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let capture = Capture::open("infer.trace.jsonl", Run::new("infer", Phase::Infer, "cpu"))?;
    /// capture.track_heap(HeapConfig::default())?; // allocations of 4 KiB and more, one by one
    /// // ... the model's forward passes, with `capture.step()` per step ...
    /// capture.stop_heap();
    /// capture.finish()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Each allocation at or above [`HeapConfig::threshold`] becomes a `heap_alloc` line with
    /// its size, time, thread, phase and innermost open span, and its free a `heap_free` line;
    /// smaller ones are counted per span and step. `tracegraph memory` shows them as the
    /// "heap (tracked)" view, apart from the logical bytes. Stop the tracker with
    /// [`Capture::stop_heap`] before finishing, so that its last lines are written.
    ///
    /// # Errors
    /// [`HeapError::NotInstalled`] without the tracking allocator, [`HeapError::Busy`] when a
    /// tracker already runs in the process, [`HeapError::InvalidThreshold`] for a zero
    /// threshold.
    pub fn track_heap(&self, config: HeapConfig) -> Result<(), HeapError> {
        trace_heap::start(self.session(), config)?;
        // The scope of a span already open (tracking started inside it) is published now.
        crate::exec_scope::publish(self.session());
        Ok(())
    }

    /// Stops heap tracking: writes the lines still buffered and the current step's sums and
    /// account, and returns what was accounted for (`None` when this capture was not
    /// tracking).
    pub fn stop_heap(&self) -> Option<HeapStats> {
        trace_heap::stop(self.session())
    }

    /// What heap tracking has accounted for so far; `None` when this capture is not tracking.
    pub fn heap_stats(&self) -> Option<HeapStats> {
        trace_heap::stats(self.session())
    }
}
