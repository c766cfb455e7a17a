//! The `dump` line of a flight-recorder dump: what triggered it, its evidence, its steps.

#[cfg(feature = "read")]
use serde::Deserialize;
use serde::Serialize;

use super::DumpTrigger;

/// `dump`: line 2 of a flight-recorder dump (a trace written from the recorder's in-memory
/// ring when a trigger fired), naming the trigger, its evidence and the steps the dump holds.
///
/// Like the header and the trailer it is a line about the trace, not an event: readers keep it
/// beside the header (`TraceReader::dump`, `ParsedTrace::dump`) and never hand it to an
/// event consumer, it is in no trailer count, and an ordinary trace has none. At most one per
/// trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct DumpRecord {
    /// What fired.
    pub trigger: DumpTrigger,
    /// The step in which it fired (the slow step itself for
    /// [`DumpTrigger::SlowStep`]).
    pub trigger_step: u64,
    /// The first step the dump holds (older steps had left the ring).
    pub first_step: u64,
    /// The last step the dump holds.
    pub last_step: u64,
    /// Why: the figures the trigger compared, the value or parameter it saw.
    pub evidence: DumpEvidence,
    /// This dump's number in the run, from 1.
    pub seq: u64,
    /// Triggers refused since the previous dump by the recorder's limits (count, bytes,
    /// interval) or because a dump was already waiting for its steps after.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suppressed: u64,
    /// Lines of the ring's steps left out of the dump to keep it a consistent trace on its
    /// own: ends of spans, frees of allocations and accounts of steps that began before the
    /// dump's first step, and spans not ended by its last step (with their references).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_lines: u64,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The evidence of a [`DumpRecord`]: every field optional, each trigger filling its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct DumpEvidence {
    /// The reason given to `TraceSession::dump` (trigger `call`), or the signal's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The slow step's duration, ns (trigger `slow_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ns: Option<u64>,
    /// The running median it exceeded, ns (trigger `slow_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ns: Option<u64>,
    /// The multiple of the median that fires the trigger (trigger `slow_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// How many earlier steps the median was taken over (trigger `slow_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// The non-finite value seen, as text (`NaN`, `inf`, `-inf`; trigger
    /// `non_finite_loss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The parameter whose gradient was non-finite (trigger `non_finite_gradient`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// The trigger file (trigger `file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}
