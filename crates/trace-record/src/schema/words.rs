//! The wire words: labels and counter names that a trace's writer and its readers agree on.
//!
//! Each is written by a recorder (trace-candle) and matched by a reader (trace-analyze, the
//! CLI, the report), so each is declared here once and both sides name the constant. They are
//! part of the format: changing one is a schema change (a new version), not a refactor.

/// The label of the `tensor` events trace-candle records, at backward, for the tensors the
/// autograd graph of a loss keeps alive (`Capture::autograd`); the analysis reads the
/// graph's nodes from them.
pub const AUTOGRAD_LABEL: &str = "autograd";

/// The label of a module span's input `tensor` event (trace-candle's profiled modules).
pub const MODULE_INPUT: &str = "module_input";

/// The label of a module span's output `tensor` event (trace-candle's profiled modules).
pub const MODULE_OUTPUT: &str = "module_output";

/// The counter trace-candle's `Capture::finish` writes with the number of spans its
/// `tracing` layer saw (absent when no layer was installed); the summary reports a layer
/// that saw none.
pub const TRACING_SPANS_COUNTER: &str = "trace_candle.tracing_spans";

/// The counter trace-candle's `Capture::finish` writes with its estimate, in nanoseconds, of
/// the time its own recording took on the threads that record (each kind of work timed at
/// finish, times how often the trace holds it); the summary reports it per step and as a
/// share of step time.
pub const OVERHEAD_COUNTER: &str = "trace_candle.overhead_ns";

/// The counter `TraceSession::record_loss` writes with the training loss (`null` when it is
/// not finite); a flight recorder fires on a non-finite one.
pub const LOSS_COUNTER: &str = "loss";

/// The counter trace-candle's `Capture::autograd` writes after the autograd graph's tensor
/// events with the logical bytes of the distinct storages they keep alive (each storage once,
/// views of parameters excluded: the figure the memory timeline adds up), so that the
/// gradients report gives the same bytes as the memory report.
pub const AUTOGRAD_STORAGE_BYTES_COUNTER: &str = "trace_candle.autograd_storage_bytes";

/// The counter written beside [`AUTOGRAD_STORAGE_BYTES_COUNTER`] with the number of those
/// distinct storages.
pub const AUTOGRAD_STORAGES_COUNTER: &str = "trace_candle.autograd_storages";

/// The counter written beside [`AUTOGRAD_STORAGES_COUNTER`] with how many of those storages
/// the recorder found only in the autograd graph (no captured op produced them, so their
/// creation time is unknown) and placed at the start of the step's latest forward phase: the
/// memory timeline holds them from then, as they were alive from some time in that forward.
pub const AUTOGRAD_AT_FORWARD_START_COUNTER: &str = "trace_candle.autograd_at_forward_start";

/// The counter written beside [`AUTOGRAD_STORAGES_COUNTER`] with how many of those storages
/// were found only in the autograd graph in a step with no forward phase, and placed at the
/// step's start (its boundary): the step's work, its forward among it, began there.
pub const AUTOGRAD_AT_STEP_START_COUNTER: &str = "trace_candle.autograd_at_step_start";

/// The counter written beside [`AUTOGRAD_STORAGES_COUNTER`] with how many of those storages
/// were found only in the autograd graph in a step with no forward phase and no known start
/// (the run's first step), and placed when they were found (the walk, just before backward):
/// the timeline holds them from later than they really lived. The storages in none of the
/// placement counters were recorded when they were created (a captured op produced them).
pub const AUTOGRAD_AT_WALK_COUNTER: &str = "trace_candle.autograd_at_walk";

/// The counter trace-candle writes (value 1, once per capture) when it records a backward
/// with no registered parameter: there are no gradient facts to look up, and readers say
/// why instead of only that there are none.
pub const BACKWARD_WITHOUT_PARAMETERS_COUNTER: &str = "trace_candle.backward_without_parameters";

/// The bit set in the storage and tensor ids of buffers trace-candle's `Capture::buffer_shape`
/// declares by shape: they have no Candle tensor, so their ids come from a range Candle's
/// counter does not reach (below 2^53, so JSON readers using doubles keep them exact).
/// Readers show such an id as a declared buffer, by its label, not as a number.
pub const DECLARED_BUFFER_BIT: u64 = 1 << 51;

/// A source path as a `frame` line's `file` holds it, shortened to what identifies it:
/// `candle-core-0.11.1/src/tensor.rs` for a crate from a Cargo registry, `library/core/src/...`
/// for the standard library, any other path as is. The sampler writes it at stop and the
/// analyses at read time (a killed run's raw stacks), so both name a frame alike.
///
/// ```
/// use trace_record::schema::short_source_path;
/// let registry = "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/candle-core-0.11.1/src/tensor.rs";
/// assert_eq!(short_source_path(registry), "candle-core-0.11.1/src/tensor.rs");
/// let std = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/hint.rs";
/// assert_eq!(short_source_path(std), "library/core/src/hint.rs");
/// assert_eq!(short_source_path("src/main.rs"), "src/main.rs");
/// ```
pub fn short_source_path(p: &str) -> String {
    if let Some(i) = p.find("/registry/src/") {
        let rest = &p[i + "/registry/src/".len()..];
        if let Some(j) = rest.find('/') {
            return rest[j + 1..].to_string();
        }
    }
    if p.starts_with("/rustc/")
        && let Some(i) = p.find("/library/")
    {
        return p[i + 1..].to_string();
    }
    p.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are wire format: traces on disk carry them, so their values never change
    /// without a schema version.
    #[test]
    fn the_wire_words_keep_their_values() {
        assert_eq!(
            [
                AUTOGRAD_LABEL,
                MODULE_INPUT,
                MODULE_OUTPUT,
                TRACING_SPANS_COUNTER,
                OVERHEAD_COUNTER,
                LOSS_COUNTER
            ],
            [
                "autograd",
                "module_input",
                "module_output",
                "trace_candle.tracing_spans",
                "trace_candle.overhead_ns",
                "loss"
            ]
        );
    }
}
