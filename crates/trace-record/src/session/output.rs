//! Where a session's lines go: the block buffer, the sink, counts and the first I/O error.
//!
//! A plain sink is written in place, by whichever thread writes the block. A compressed one
//! (`ZstdSink`, with the `zstd` feature) hands the block to its writer thread, which compresses it into one zstd
//! frame; its counts, bytes and errors arrive later and are folded in ([`Output::sync`]).

use std::cell::Cell;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[cfg(feature = "zstd")]
use super::compressor::{Ticket, ZstdSink};
use crate::flight::recorder::Flight;
use crate::json::LineBuf;
use crate::schema::{EventCounts, EventType};

thread_local! {
    /// Set on threads that record beside the program (see [`record_beside_the_program`]).
    static BESIDE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one that records beside the program, not for it (a stack
/// sampler's or a heap tracker's own thread): the blocks it writes out are not counted in
/// [`TraceSession::recording_write_ns`](crate::TraceSession::recording_write_ns), which is
/// what recording takes from the program's own threads.
pub fn record_beside_the_program() {
    BESIDE.with(|b| b.set(true));
}

/// Buffered bytes that trigger a block write.
pub const BLOCK_BYTES: usize = 256 * 1024;

/// The bytes written by an in-memory session (see [`TraceSession::in_memory`](crate::TraceSession::in_memory)).
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    pub(super) bytes: Arc<Mutex<Vec<u8>>>,
}

impl MemorySink {
    /// A copy of everything written so far: the header from the start, then blocks written
    /// when full, every [`Run::flush_interval`](crate::Run::flush_interval), within
    /// [`Run::step_write_bound`](crate::Run::step_write_bound) of a step (at every step
    /// without an interval) and at finish.
    pub fn bytes(&self) -> Vec<u8> {
        lock(&self.bytes).clone()
    }
}

pub(super) struct SharedVec(pub(super) Arc<Mutex<Vec<u8>>>);

impl Write for SharedVec {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the buffers in a state worse than partial
    // data, which the format tolerates; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where written blocks go.
pub(super) enum Sink {
    /// Written as they are, by the thread that writes the block.
    Plain(Box<dyn Write + Send>),
    /// Compressed into zstd frames on the sink's writer thread.
    #[cfg(feature = "zstd")]
    Zstd(ZstdSink),
}

pub(super) struct Output {
    pub(super) sink: Sink,
    pub(super) buf: LineBuf,
    /// Counts of the events in `buf` (not yet written).
    pub(super) pending: EventCounts,
    /// Counts of events written.
    pub(super) counts: EventCounts,
    /// Counts of every event appended (written, handed to a writer thread or buffered).
    pub(super) appended: EventCounts,
    /// Bytes written to the sink (compressed bytes for a compressed sink).
    pub(super) bytes: u64,
    pub(super) dropped: u64,
    pub(super) error: Option<io::Error>,
    pub(super) finished: bool,
    /// When a block was last written out (or handed to the compressor).
    pub(super) written_at: Instant,
    /// `buf` holds a finished step (a `step()` came since the last write-out): the flusher
    /// writes it out at its next tick.
    pub(super) finished_step: bool,
    /// Nanoseconds recording threads spent writing blocks out (see
    /// [`TraceSession::recording_write_ns`](crate::TraceSession::recording_write_ns)).
    pub(super) recording_write_ns: u64,
    /// A flight recorder's ring and triggers: `buf` then holds the current step, which moves
    /// into the ring at the next `step()`, and nothing but [`Output::beside`]'s steps is
    /// written to the sink.
    pub(super) flight: Option<Box<Flight>>,
    /// A flight recorder writing a trace file beside its ring
    /// ([`FlightConfig::beside_file`](crate::FlightConfig::beside_file)): finished steps
    /// (their lines, shared with the ring, and their event counts) waiting to be written.
    pub(super) beside: Option<Vec<(Arc<Vec<u8>>, EventCounts)>>,
}

impl Output {
    /// An output writing to `sink` through `buf`, nothing written yet; with `error`, failed
    /// from the start (every event is counted as dropped).
    pub(super) fn new(sink: Sink, buf: LineBuf, error: Option<io::Error>) -> Output {
        Output {
            sink,
            buf,
            pending: EventCounts::default(),
            counts: EventCounts::default(),
            appended: EventCounts::default(),
            bytes: 0,
            dropped: 0,
            error,
            finished: false,
            written_at: Instant::now(),
            finished_step: false,
            recording_write_ns: 0,
            flight: None,
            beside: None,
        }
    }

    /// Appends the lines written by `f`, one per entry of `types` (their event types, in
    /// order), unless the session failed (all counted as dropped) or finished; writes the
    /// block when it is full.
    #[inline]
    pub(super) fn append_lines(&mut self, types: &[EventType], f: impl FnOnce(&mut LineBuf)) {
        if self.error.is_some() {
            self.dropped += types.len() as u64;
            return;
        }
        if self.finished {
            return;
        }
        f(&mut self.buf);
        for &ty in types {
            self.pending.add(ty, 1);
            self.appended.add(ty, 1);
        }
        if self.buf.len() >= BLOCK_BYTES && self.flight.is_none() {
            // The thread whose line filled the block writes it: time taken from its work.
            let start = Instant::now();
            self.write_block();
            self.add_recording_write(start);
        }
    }

    /// Adds the time since `start`, spent writing on a recording thread's behalf, to
    /// [`Output::recording_write_ns`].
    pub(super) fn add_recording_write(&mut self, start: Instant) {
        if BESIDE.with(Cell::get) {
            return;
        }
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.recording_write_ns = self.recording_write_ns.saturating_add(ns);
    }

    /// Writes the buffered lines out: a flight recorder's finished steps waiting for the file
    /// beside its ring, then (unless the session is a flight recorder, whose buffer holds the
    /// current step, bound for the ring) the block buffer.
    pub(super) fn write_block(&mut self) {
        self.finished_step = false;
        self.write_beside();
        if self.flight.is_some() {
            return;
        }
        if self.buf.len() == 0 || self.error.is_some() {
            return;
        }
        self.written_at = Instant::now();
        match &mut self.sink {
            Sink::Plain(w) => {
                match w.write_all(self.buf.bytes()) {
                    Ok(()) => {
                        self.bytes += self.buf.len() as u64;
                        self.counts += self.pending;
                    }
                    Err(e) => {
                        self.dropped += self.pending.total();
                        self.error = Some(e);
                    }
                }
                self.buf.clear();
            }
            #[cfg(feature = "zstd")]
            Sink::Zstd(z) => {
                z.write_block(&mut self.buf, self.pending);
                // Errors met so far stop further appends (as a plain sink's would).
                z.absorb(
                    &mut self.counts,
                    &mut self.bytes,
                    &mut self.dropped,
                    &mut self.error,
                );
            }
        }
        self.pending = EventCounts::default();
    }

    /// Writes the finished steps waiting in [`Output::beside`], in order; after an error the
    /// rest are counted as dropped.
    fn write_beside(&mut self) {
        let Some(queue) = self.beside.as_mut() else {
            return;
        };
        if queue.is_empty() {
            return;
        }
        self.written_at = Instant::now();
        match &mut self.sink {
            Sink::Plain(w) => {
                for (lines, counts) in queue.drain(..) {
                    if self.error.is_some() {
                        self.dropped += counts.total();
                        continue;
                    }
                    match w.write_all(&lines) {
                        Ok(()) => {
                            self.bytes += lines.len() as u64;
                            self.counts += counts;
                        }
                        Err(e) => {
                            self.dropped += counts.total();
                            self.error = Some(e);
                        }
                    }
                }
            }
            #[cfg(feature = "zstd")]
            Sink::Zstd(z) => {
                if self.error.is_some() {
                    for (_, counts) in queue.drain(..) {
                        self.dropped += counts.total();
                    }
                    return;
                }
                // One frame of the waiting steps (copied together: the compressor owns its
                // block).
                let size = queue.iter().map(|(l, _)| l.len()).sum();
                let mut block = LineBuf::with_capacity(size);
                let mut counts = EventCounts::default();
                for (lines, c) in queue.drain(..) {
                    block.extend(&lines);
                    counts += c;
                }
                z.write_block(&mut block, counts);
                z.absorb(
                    &mut self.counts,
                    &mut self.bytes,
                    &mut self.dropped,
                    &mut self.error,
                );
            }
        }
    }

    /// Whether the flusher, waking every `tick`, writes the block out now: when it holds
    /// lines and either a finished step or lines that would be older than `interval` at the
    /// next tick (the last write-out is `interval - tick` ago or more).
    /// A flight recorder writing a file beside its ring: when finished steps wait for it.
    pub(super) fn flush_due(&self, interval: Duration, tick: Duration) -> bool {
        if let Some(queue) = &self.beside {
            return !queue.is_empty();
        }
        self.buf.len() > 0
            && (self.finished_step || self.written_at.elapsed() >= interval.saturating_sub(tick))
    }

    pub(super) fn flush_sink(&mut self) {
        if self.error.is_some() {
            return;
        }
        match &mut self.sink {
            Sink::Plain(w) => {
                if let Err(e) = w.flush() {
                    self.error = Some(e);
                }
            }
            #[cfg(feature = "zstd")]
            Sink::Zstd(z) => z.flush(),
        }
    }

    /// For a compressed sink, a ticket for everything handed to its writer so far (wait on
    /// it without holding the output's lock); `None` for a plain sink, which has written
    /// everything already.
    #[cfg(feature = "zstd")]
    pub(super) fn ticket(&self) -> Option<Ticket> {
        match &self.sink {
            Sink::Plain(_) => None,
            Sink::Zstd(z) => Some(z.ticket()),
        }
    }

    /// Waits until everything handed to the sink is written and folds the outcome into the
    /// counts (no-op for a plain sink).
    #[cfg_attr(
        not(feature = "zstd"),
        allow(
            clippy::unused_self,
            reason = "without zstd every sink is plain and there is nothing to wait for"
        )
    )]
    pub(super) fn sync(&mut self) {
        #[cfg(feature = "zstd")]
        if let Some(t) = self.ticket() {
            t.wait();
        }
        #[cfg(feature = "zstd")]
        if let Sink::Zstd(z) = &self.sink {
            z.absorb(
                &mut self.counts,
                &mut self.bytes,
                &mut self.dropped,
                &mut self.error,
            );
        }
    }

    /// Writes everything, stops a compressed sink's writer thread and folds in its outcome.
    pub(super) fn close_sink(&mut self) {
        #[cfg(feature = "zstd")]
        if let Sink::Zstd(z) = &mut self.sink {
            z.close();
        }
        self.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> Output {
        Output::new(Sink::Plain(Box::new(io::sink())), LineBuf::default(), None)
    }

    #[test]
    fn a_finished_step_makes_the_next_tick_write_and_a_write_clears_it() {
        let (hour, tick) = (Duration::from_hours(1), Duration::from_mins(15));
        let mut o = output();
        // Just written, an hour's interval: nothing is due, with or without lines.
        assert!(!o.flush_due(hour, tick));
        o.append_lines(&[EventType::Marker], |b| {
            b.extend(b"{\"type\":\"marker\"}\n");
        });
        assert!(
            !o.flush_due(hour, tick),
            "lines alone wait for the interval"
        );
        o.finished_step = true;
        assert!(o.flush_due(hour, tick), "a finished step is due at once");
        o.write_block();
        assert!(!o.finished_step);
        assert_eq!(o.counts.marker, 1);
        // A finished step with nothing buffered (written by a full block) writes nothing.
        o.finished_step = true;
        assert!(!o.flush_due(hour, tick));
    }

    #[test]
    fn lines_are_due_one_tick_before_the_interval_runs_out() {
        let mut o = output();
        o.append_lines(&[EventType::Marker], |b| {
            b.extend(b"{\"type\":\"marker\"}\n");
        });
        // An interval no longer than the tick: due whenever lines wait.
        assert!(o.flush_due(Duration::from_millis(1), Duration::from_millis(1)));
        assert!(!o.flush_due(Duration::from_hours(2), Duration::from_hours(1)));
    }
}
