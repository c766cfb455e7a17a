//! The writer thread of a compressed session: each block handed to it becomes one zstd frame.
//!
//! Recording threads never compress. When the session's block is written (full, on the flush
//! interval, at a step, at the end) the full buffer is swapped for a spare one and sent over a
//! bounded channel; this thread compresses it into one frame, writes the frame and hands the
//! buffer back for reuse. The recording side's cost per block is a buffer swap and a channel
//! send, less than the `write` syscall of a plain session. The channel holds
//! [`QUEUE_BLOCKS`] blocks: a writer that falls behind makes the block writes wait
//! (backpressure) instead of buffering without bound.
//!
//! What was written (counts, bytes, the first error) is kept in shared state that the session
//! folds into its own accounting ([`ZstdSink::absorb`]), at the latest when it closes.

use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use zstd::bulk::Compressor;
use zstd::stream::raw::CParameter;

use crate::compression::WRITE_WINDOW_LOG;
use crate::json::LineBuf;
use crate::schema::EventCounts;

/// Locks `m`, going on after a panic elsewhere (as the session's own lock does: a panic
/// while holding it leaves at worst a partial block, which the format tolerates).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Blocks that may wait for the writer thread before block writes wait for it.
pub(super) const QUEUE_BLOCKS: usize = 4;

enum Job {
    /// Compress the block into one frame and write it; the events it holds, by type.
    Block(LineBuf, EventCounts),
    /// Flush the sink.
    Flush,
}

/// What the writer has done since the session last looked.
#[derive(Default)]
struct Done {
    /// Jobs finished (in order).
    jobs: u64,
    counts: EventCounts,
    bytes: u64,
    dropped: u64,
    error: Option<io::Error>,
    /// Whether an error has ever been met (events after it are dropped).
    failed: bool,
    /// The writer thread has ended: no more jobs will finish.
    ended: bool,
}

#[derive(Default)]
struct Shared {
    done: Mutex<Done>,
    cv: Condvar,
}

/// Compresses and writes; runs on the writer thread (or inline when no thread could start).
struct Worker {
    sink: Box<dyn Write + Send>,
    compressor: Option<Compressor<'static>>,
    frame: Vec<u8>,
    shared: Arc<Shared>,
}

impl Worker {
    /// Does `job`, hands its emptied buffer to `give_back`, then marks the job finished (in
    /// that order: whoever waits for the job finds the buffer back for reuse).
    fn run(&mut self, job: Job, give_back: impl FnOnce(LineBuf)) {
        let failed = lock(&self.shared.done).failed;
        let (result, block) = match job {
            Job::Block(block, counts) => {
                if failed {
                    lock(&self.shared.done).dropped += counts.total();
                    (Ok(()), Some(block))
                } else {
                    let written = self
                        .frame_of(block.bytes())
                        .and_then(|()| self.sink.write_all(&self.frame).map(|()| self.frame.len()));
                    let mut d = lock(&self.shared.done);
                    match written {
                        Ok(n) => {
                            d.counts += counts;
                            d.bytes += n as u64;
                            (Ok(()), Some(block))
                        }
                        Err(e) => {
                            d.dropped += counts.total();
                            (Err(e), Some(block))
                        }
                    }
                }
            }
            Job::Flush if failed => (Ok(()), None),
            Job::Flush => (self.sink.flush(), None),
        };
        if let Some(mut block) = block {
            block.clear();
            give_back(block);
        }
        let mut d = lock(&self.shared.done);
        if let Err(e) = result {
            d.failed = true;
            d.error.get_or_insert(e);
        }
        d.jobs += 1;
        drop(d);
        self.shared.cv.notify_all();
    }

    /// Compresses `bytes` into `self.frame` as one whole frame.
    fn frame_of(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(c) = &mut self.compressor else {
            return Err(io::Error::other("the zstd compressor could not be created"));
        };
        self.frame.clear();
        self.frame
            .reserve(zstd::zstd_safe::compress_bound(bytes.len()));
        c.compress_to_buffer(bytes, &mut self.frame).map(|_| ())
    }
}

/// Marks the writer thread's end, however it ends (a panic included), so that nobody waits
/// for jobs it will never finish.
struct Ended(Arc<Shared>);

impl Drop for Ended {
    fn drop(&mut self) {
        lock(&self.0.done).ended = true;
        self.0.cv.notify_all();
    }
}

enum Mode {
    Thread {
        jobs: Option<SyncSender<Job>>,
        spares: Receiver<LineBuf>,
        thread: Option<JoinHandle<()>>,
    },
    /// The OS refused a thread: blocks are compressed where they are written.
    Inline {
        worker: Worker,
        /// The buffer of the last block written, for the next.
        spare: Option<LineBuf>,
    },
}

/// The compressing sink of a session: sends blocks to the writer thread.
pub(super) struct ZstdSink {
    mode: Mode,
    /// Bytes a fresh block buffer starts with.
    capacity: usize,
    shared: Arc<Shared>,
    /// Jobs sent.
    sent: u64,
}

/// A point in a [`ZstdSink`]'s work to wait for without holding the session's lock.
pub(super) struct Ticket {
    shared: Arc<Shared>,
    job: u64,
}

impl Ticket {
    /// Waits until the writer has finished every job up to the ticket's.
    pub(super) fn wait(&self) {
        let mut d = lock(&self.shared.done);
        while d.jobs < self.job && !d.ended {
            d = self
                .shared
                .cv
                .wait(d)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

fn compressor(level: i32) -> io::Result<Compressor<'static>> {
    let mut c = Compressor::new(level)?;
    // A checksum per frame lets readers tell a damaged frame from a trace.
    c.set_parameter(CParameter::ChecksumFlag(true))?;
    c.set_parameter(CParameter::WindowLog(WRITE_WINDOW_LOG))?;
    Ok(c)
}

impl ZstdSink {
    /// Starts the writer thread compressing at `level` into `sink`; block buffers it makes
    /// start with `capacity` bytes.
    pub(super) fn start(sink: Box<dyn Write + Send>, level: i32, capacity: usize) -> ZstdSink {
        let shared = Arc::new(Shared::default());
        let (compressor, error) = match compressor(level) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        if let Some(e) = error {
            let mut d = lock(&shared.done);
            d.failed = true;
            d.error = Some(e);
        }
        let worker = Worker {
            sink,
            compressor,
            frame: Vec::new(),
            shared: Arc::clone(&shared),
        };
        let (jobs, inbox) = mpsc::sync_channel::<Job>(QUEUE_BLOCKS);
        let (give_back, spares) = mpsc::channel::<LineBuf>();
        // The worker moves to the thread once it has started, so that a refused spawn keeps
        // it (and the file) here.
        let (hand_over, handed) = mpsc::channel::<Worker>();
        let ended = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("trace-record-zstd".into())
            .spawn(move || {
                let _ended = Ended(Arc::clone(&ended));
                let Ok(mut worker) = handed.recv() else {
                    return;
                };
                while let Ok(job) = inbox.recv() {
                    // The session may be gone already; the buffer is then freed.
                    worker.run(job, |block| {
                        let _ = give_back.send(block);
                    });
                }
                // Dropping the worker closes the sink (the file) on this thread.
            });
        let mode = match spawned {
            Ok(thread) => match hand_over.send(worker) {
                Ok(()) => Mode::Thread {
                    jobs: Some(jobs),
                    spares,
                    thread: Some(thread),
                },
                // The thread ended before taking it (it cannot, short of a panic).
                Err(mpsc::SendError(worker)) => Mode::Inline {
                    worker,
                    spare: None,
                },
            },
            Err(_) => Mode::Inline {
                worker,
                spare: None,
            },
        };
        ZstdSink {
            mode,
            capacity,
            shared,
            sent: 0,
        }
    }

    fn send(&mut self, job: Job) {
        match &mut self.mode {
            Mode::Thread { jobs: Some(tx), .. } => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    // The thread is gone (it panicked): nothing more can be written.
                    let mut d = lock(&self.shared.done);
                    if let Job::Block(_, counts) = job {
                        d.dropped += counts.total();
                    }
                    d.failed = true;
                    d.error
                        .get_or_insert_with(|| io::Error::other("the trace writer thread stopped"));
                    d.jobs += 1;
                }
            }
            Mode::Thread { jobs: None, .. } => {
                let mut d = lock(&self.shared.done);
                if let Job::Block(_, counts) = job {
                    d.dropped += counts.total();
                }
                d.jobs += 1;
            }
            Mode::Inline { worker, spare } => worker.run(job, |block| *spare = Some(block)),
        }
        self.sent += 1;
    }

    /// Hands `buf` (the block to write, events `counts`) to the writer and leaves a clean
    /// spare buffer in its place.
    pub(super) fn write_block(&mut self, buf: &mut LineBuf, counts: EventCounts) {
        let spare = match &mut self.mode {
            Mode::Thread { spares, .. } => spares.try_recv().ok(),
            Mode::Inline { spare, .. } => spare.take(),
        };
        let spare = spare.unwrap_or_else(|| LineBuf::with_capacity(self.capacity));
        let block = std::mem::replace(buf, spare);
        self.send(Job::Block(block, counts));
    }

    /// Asks the writer to flush the sink after the blocks sent so far.
    pub(super) fn flush(&mut self) {
        self.send(Job::Flush);
    }

    /// A ticket for everything sent so far.
    pub(super) fn ticket(&self) -> Ticket {
        Ticket {
            shared: Arc::clone(&self.shared),
            job: self.sent,
        }
    }

    /// Moves what the writer did since the last call into the session's accounting: events
    /// written by type, bytes written, events dropped, and the first error (when `error` has
    /// none yet).
    pub(super) fn absorb(
        &self,
        counts: &mut EventCounts,
        bytes: &mut u64,
        dropped: &mut u64,
        error: &mut Option<io::Error>,
    ) {
        let mut d = lock(&self.shared.done);
        *counts += std::mem::take(&mut d.counts);
        *bytes += std::mem::take(&mut d.bytes);
        *dropped += std::mem::take(&mut d.dropped);
        if let Some(e) = d.error.take()
            && error.is_none()
        {
            *error = Some(e);
        }
    }

    /// Writes everything sent, stops the writer thread and closes the sink.
    pub(super) fn close(&mut self) {
        if let Mode::Thread { jobs, thread, .. } = &mut self.mode {
            drop(jobs.take());
            if let Some(t) = thread.take() {
                // A panic on the writer thread has been reported already; what it wrote stays.
                let _ = t.join();
            }
        }
    }
}

impl Drop for ZstdSink {
    fn drop(&mut self) {
        self.close();
    }
}
