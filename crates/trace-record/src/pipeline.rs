//! The reader pipeline: parse on a second thread in batches while the caller consumes events.

use std::io::BufRead;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::reader::{LineEvent, ReadError, TraceReader};

/// Events handed from the parsing thread to the caller at a time.
const BATCH: usize = 4096;
/// Batches in flight between the threads (bounds the memory held to a few MB).
const BATCHES_IN_FLIGHT: usize = 4;

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
        std::thread::scope(|scope| {
            let (tx, rx) = sync_channel::<Vec<LineEvent>>(BATCHES_IN_FLIGHT);
            // Emptied batches go back to the parser, so steady state allocates no batches.
            let (recycle_tx, recycle_rx) = sync_channel::<Vec<LineEvent>>(BATCHES_IN_FLIGHT + 1);
            let parser = scope.spawn(move || parse_batches(self, &tx, &recycle_rx));
            let consumed = consume(&rx, &recycle_tx, &mut f);
            // Dropping the receiver stops a parser still sending (after `f` failed).
            drop(rx);
            let parsed = match parser.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            consumed?;
            parsed.map_err(E::from)
        })
    }
}

/// The parsing thread: sends full batches, then the last partial one; stops at the first read
/// error (returned after the events before it were sent) or when the receiver is gone.
fn parse_batches<R: BufRead>(
    reader: &mut TraceReader<R>,
    tx: &SyncSender<Vec<LineEvent>>,
    recycle: &Receiver<Vec<LineEvent>>,
) -> Result<(), ReadError> {
    let fresh = || {
        recycle
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH))
    };
    let mut batch = fresh();
    let result = loop {
        match reader.next_event() {
            Ok(Some(e)) => {
                batch.push(e);
                if batch.len() == BATCH && tx.send(std::mem::replace(&mut batch, fresh())).is_err()
                {
                    return Ok(());
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    if !batch.is_empty() && tx.send(batch).is_err() {
        return Ok(());
    }
    result
}

/// The calling thread: hands every event to `f` in order until the parser is done or `f`
/// fails.
fn consume<E>(
    rx: &Receiver<Vec<LineEvent>>,
    recycle: &SyncSender<Vec<LineEvent>>,
    f: &mut impl FnMut(LineEvent) -> Result<(), E>,
) -> Result<(), E> {
    for mut batch in rx {
        for event in batch.drain(..) {
            f(event)?;
        }
        // Full when the parser is slow to take them back; then the batch is just freed.
        let _ = recycle.try_send(batch);
    }
    Ok(())
}
