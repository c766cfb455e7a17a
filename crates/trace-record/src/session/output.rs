//! Where a session's lines go: the block buffer, the sink, counts and the first I/O error.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::json::LineBuf;
use crate::schema::{EventCounts, EventType};

/// Buffered bytes that trigger a block write.
pub const BLOCK_BYTES: usize = 256 * 1024;

/// The bytes written by an in-memory session (see [`TraceSession::in_memory`](crate::TraceSession::in_memory)).
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    pub(super) bytes: Arc<Mutex<Vec<u8>>>,
}

impl MemorySink {
    /// A copy of everything written so far: the header from the start, then blocks written
    /// when full, at each step, every [`Run::flush_interval`](crate::Run::flush_interval) and
    /// at finish.
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
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) struct Output {
    pub(super) sink: Box<dyn Write + Send>,
    pub(super) buf: LineBuf,
    /// Counts of the events in `buf` (not yet written).
    pub(super) pending: EventCounts,
    /// Counts of events written.
    pub(super) counts: EventCounts,
    pub(super) bytes: u64,
    pub(super) dropped: u64,
    pub(super) error: Option<io::Error>,
    pub(super) finished: bool,
}

impl Output {
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
        }
        if self.buf.len() >= BLOCK_BYTES {
            self.write_block();
        }
    }

    pub(super) fn write_block(&mut self) {
        if self.buf.len() == 0 || self.error.is_some() {
            return;
        }
        match self.sink.write_all(self.buf.bytes()) {
            Ok(()) => {
                self.bytes += self.buf.len() as u64;
                self.counts += self.pending;
            }
            Err(e) => {
                self.dropped += self.pending.total();
                self.error = Some(e);
            }
        }
        self.pending = EventCounts::default();
        self.buf.clear();
    }

    pub(super) fn flush_sink(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.sink.flush()
        {
            self.error = Some(e);
        }
    }
}
