//! The reader pipeline: parse on a second thread in batches while the caller consumes events.

use std::io::BufRead;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::fast::{PLACEHOLDER, Spare};
use crate::reader::{LineEvent, ReadError, TraceReader};

/// Events handed from the parsing thread to the caller at a time.
const BATCH: usize = 4096;
/// Batches in flight between the threads (bounds the memory held to a few MB).
const BATCHES_IN_FLIGHT: usize = 4;
/// Batches ever made: those in flight, the one being parsed and the one being consumed. The
/// parser waits for one to come back rather than make more, so steady state allocates and
/// frees none (and none of their events' memory).
const BATCHES: usize = BATCHES_IN_FLIGHT + 2;

impl<R: BufRead + Send> TraceReader<R> {
    /// Calls `f` on every remaining event, in file order, with parsing on a second thread.
    ///
    /// Parsing JSON is about half the cost of loading or exporting a trace, so a scoped thread
    /// parses batches of 4,096 events and sends them through a bounded channel (at most 4
    /// batches in flight, a few MB) while `f` runs on the calling thread.
    ///
    /// - Every event before a read error is passed to `f`; then the error is returned
    ///   (converted with `E::from`).
    /// - When `f` returns an error, no further event is passed to it, the parser stops at its
    ///   next batch and that error is returned.
    /// - On `Ok`, the reader is at the end: [`trailer`](Self::trailer),
    ///   [`is_incomplete`](Self::is_incomplete), [`partial_line`](Self::partial_line),
    ///   [`skipped_unknown`](Self::skipped_unknown) and [`lines_read`](Self::lines_read)
    ///   describe the whole trace. After an error the reader's position is unspecified.
    /// - A panic on the parsing thread is resumed on the calling thread.
    ///
    /// ```
    /// use trace_record::{ReadError, ReadOptions, Run, TraceReader, TraceSession};
    /// use trace_record::schema::{Event, Phase};
    ///
    /// let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Train, "cpu"));
    /// for _ in 0..3 {
    ///     session.step();
    /// }
    /// session.finish()?;
    /// let bytes = sink.bytes();
    /// let mut reader = TraceReader::new(&bytes[..], ReadOptions::default())?;
    /// let mut steps = Vec::new();
    /// reader.for_each_batched(|e| {
    ///     if let Event::Step(s) = e.event {
    ///         steps.push((e.line, s.index));
    ///     }
    ///     Ok::<(), ReadError>(())
    /// })?;
    /// assert_eq!(steps, [(2, 1), (3, 2), (4, 3)]);
    /// assert!(!reader.is_incomplete());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_each_batched<E, F>(&mut self, mut f: F) -> Result<(), E>
    where
        E: From<ReadError>,
        F: FnMut(LineEvent) -> Result<(), E>,
    {
        self.run_batched(|events| {
            for e in events {
                f(LineEvent {
                    line: e.line,
                    event: std::mem::replace(&mut e.event, PLACEHOLDER),
                })?;
            }
            Ok(())
        })
    }

    /// Like [`for_each_batched`](Self::for_each_batched), but `f` borrows each event instead
    /// of taking it, and the parsing thread reads the next lines into the same events again,
    /// reusing their strings and lists: in steady state nothing is allocated per event, and
    /// nothing is freed on the calling thread. The fastest way to read a whole trace when
    /// its events are looked at, not kept.
    ///
    /// Errors, order, early stops and the reader's state afterwards are as for
    /// [`for_each_batched`](Self::for_each_batched).
    ///
    /// ```
    /// use trace_record::{ReadError, ReadOptions, Run, TraceReader, TraceSession};
    /// use trace_record::schema::{Event, Phase};
    ///
    /// let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Train, "cpu"));
    /// for _ in 0..3 {
    ///     session.step();
    /// }
    /// session.finish()?;
    /// let bytes = sink.bytes();
    /// let mut reader = TraceReader::new(&bytes[..], ReadOptions::default())?;
    /// let mut steps = Vec::new();
    /// reader.for_each_batched_ref(|e| {
    ///     if let Event::Step(s) = &e.event {
    ///         steps.push((e.line, s.index));
    ///     }
    ///     Ok::<(), ReadError>(())
    /// })?;
    /// assert_eq!(steps, [(2, 1), (3, 2), (4, 3)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_each_batched_ref<E, F>(&mut self, mut f: F) -> Result<(), E>
    where
        E: From<ReadError>,
        F: FnMut(&LineEvent) -> Result<(), E>,
    {
        self.run_batched(|events| events.iter().try_for_each(&mut f))
    }

    /// Parses batches on a scoped thread and hands each batch's events to `consume` on this
    /// one (see [`for_each_batched`](Self::for_each_batched)).
    fn run_batched<E, C>(&mut self, mut consume: C) -> Result<(), E>
    where
        E: From<ReadError>,
        C: FnMut(&mut [LineEvent]) -> Result<(), E>,
    {
        std::thread::scope(|scope| {
            let (tx, rx) = sync_channel::<Batch>(BATCHES_IN_FLIGHT);
            // Emptied batches go back to the parser with their events, so steady state
            // allocates no batches and (when `consume` leaves the events in place) no events.
            let (recycle_tx, recycle_rx) = sync_channel::<Batch>(BATCHES);
            let parser = scope.spawn(move || parse_batches(self, &tx, &recycle_rx));
            let consumed = (|| -> Result<(), E> {
                for mut batch in &rx {
                    let len = batch.len;
                    consume(&mut batch.events[..len])?;
                    // Never full (it holds every batch); gone only when the parser stopped.
                    let _ = recycle_tx.try_send(batch);
                }
                Ok(())
            })();
            // Dropping the receiver stops a parser still sending (after `consume` failed), and
            // dropping the recycler one waiting for a batch to come back.
            drop(rx);
            drop(recycle_tx);
            let parsed = match parser.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            consumed?;
            parsed.map_err(E::from)
        })
    }
}

/// Events parsed in a row: the first `len` of `events` are this batch's; the others (and
/// the memory of all of them) are reused by the next batch parsed into it.
struct Batch {
    events: Vec<LineEvent>,
    len: usize,
}

/// The parsing thread: sends full batches, then the last partial one; stops at the first read
/// error (returned after the events before it were sent) or when the receiver is gone.
fn parse_batches<R: BufRead>(
    reader: &mut TraceReader<R>,
    tx: &SyncSender<Batch>,
    recycle: &Receiver<Batch>,
) -> Result<(), ReadError> {
    let mut made = 0;
    // A batch to parse into: one that came back, a new one while fewer than `BATCHES` were
    // made, else the next to come back (`None` when the consumer is gone).
    let mut fresh = || match recycle.try_recv() {
        Ok(b) => Some(b),
        Err(_) if made < BATCHES => {
            made += 1;
            Some(Batch {
                events: Vec::with_capacity(BATCH),
                len: 0,
            })
        }
        Err(_) => recycle.recv().ok(),
    };
    let mut spare = Spare::default();
    let Some(mut batch) = fresh() else {
        return Ok(());
    };
    batch.len = 0;
    let result = loop {
        if batch.len == batch.events.len() {
            batch.events.push(LineEvent {
                line: 0,
                event: PLACEHOLDER,
            });
        }
        let slot = &mut batch.events[batch.len];
        match reader.next_into(&mut slot.event, &mut spare) {
            Ok(Some(line)) => {
                slot.line = line;
                batch.len += 1;
                if batch.len == BATCH {
                    let full = std::mem::replace(
                        &mut batch,
                        Batch {
                            events: Vec::new(),
                            len: 0,
                        },
                    );
                    if tx.send(full).is_err() {
                        return Ok(());
                    }
                    match fresh() {
                        Some(b) => batch = b,
                        None => return Ok(()),
                    }
                    batch.len = 0;
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    if batch.len > 0 && tx.send(batch).is_err() {
        return Ok(());
    }
    result
}
