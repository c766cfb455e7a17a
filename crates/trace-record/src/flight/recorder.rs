//! The flight recorder's state inside a session: the ring, the triggers, the limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::dump::{Job, Writer, lock};
use super::ring::{Block, Ring};
use super::triggers::{FilePoll, SlowWindow};
use super::{FlightConfig, FlightStats};
use crate::json::LineBuf;
use crate::schema::{DumpEvidence, DumpRecord, DumpTrigger};

/// A trigger that fired in a step.
#[derive(Debug, Clone)]
pub(crate) struct Fired {
    pub(crate) trigger: DumpTrigger,
    pub(crate) step: u64,
    pub(crate) evidence: DumpEvidence,
}

/// A dump accepted by the limits, waiting for its last step.
struct Accepted {
    fired: Fired,
    last: u64,
    seq: u64,
    suppressed: u64,
}

/// The flight recorder of a session (kept in its output, under its lock).
pub(crate) struct Flight {
    cfg: FlightConfig,
    header: Arc<[u8]>,
    name: String,
    ring: Ring,
    /// `frame` and `stack` lines, kept for the whole run.
    pub(crate) interned: LineBuf,
    slow: Option<SlowWindow>,
    fired: Option<Fired>,
    waiting: Option<Accepted>,
    signal: Option<(Arc<AtomicBool>, signal_hook::SigId)>,
    file: Option<FilePoll>,
    last_dump_ns: Option<u64>,
    accepted: u64,
    reserved_bytes: u64,
    suppressed: u64,
    suppressed_since: u64,
    step_start_ns: u64,
    writer: Writer,
}

/// A run id as a file name part: ASCII letters, digits, `.`, `_`, `-` (others become `_`),
/// at most 96 bytes.
fn file_part(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(96)
        .collect();
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, 'r');
    }
    out
}

impl Flight {
    /// Starts the dump thread (and the SIGUSR2 flag when asked for).
    pub(crate) fn start(
        cfg: FlightConfig,
        header: &[u8],
        run_id: &str,
        now_ns: u64,
    ) -> std::io::Result<Flight> {
        std::fs::create_dir_all(&cfg.dir)?;
        let signal = if cfg.signal {
            let flag = Arc::new(AtomicBool::new(false));
            let id = signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&flag))?;
            Some((flag, id))
        } else {
            None
        };
        let poll_ns = u64::try_from(cfg.poll_interval.as_nanos()).unwrap_or(u64::MAX);
        Ok(Flight {
            ring: Ring::new(cfg.ring_bytes, cfg.ring_steps),
            slow: cfg.slow_step.map(|s| SlowWindow::new(s.factor, s.window)),
            file: cfg.trigger_file.clone().map(|p| FilePoll::new(p, poll_ns)),
            writer: Writer::start(cfg.dir.clone())?,
            cfg,
            header: header.into(),
            name: file_part(run_id),
            interned: LineBuf::default(),
            fired: None,
            waiting: None,
            signal,
            last_dump_ns: None,
            accepted: 0,
            reserved_bytes: 0,
            suppressed: 0,
            suppressed_since: 0,
            step_start_ns: now_ns,
        })
    }

    /// Whether non-finite values fire.
    pub(crate) fn on_non_finite(&self) -> bool {
        self.cfg.non_finite
    }

    /// Notes a trigger; the first of a step wins, later ones are counted as refused.
    pub(crate) fn fire(&mut self, fired: Fired) {
        if self.fired.is_some() {
            self.suppress();
        } else {
            self.fired = Some(fired);
        }
    }

    fn suppress(&mut self) {
        self.suppressed += 1;
        self.suppressed_since += 1;
    }

    /// Step `completed` ended at `end_ns` with `lines` (the session's buffer, moved in, shared
    /// with the trace file's queue when the session also writes one): into the ring, then the
    /// triggers. Returns a buffer for the next step to write over (an evicted step's, when no
    /// dump or file write holds it; else a new one).
    pub(crate) fn step_ended(
        &mut self,
        completed: u64,
        lines: Arc<Vec<u8>>,
        end_ns: u64,
    ) -> Vec<u8> {
        // Its bytes are kept as they are (initialised memory the next step writes over); a
        // new buffer is made the size of this step, so a step does not grow it line by line.
        let size = lines.len();
        let spare = self.ring.push(Block {
            index: completed,
            end_ns,
            bytes: lines,
        });
        let dur = end_ns.saturating_sub(self.step_start_ns);
        self.step_start_ns = end_ns;
        if let Some(s) = self.slow.as_mut().and_then(|w| w.observe(dur)) {
            self.fire(Fired {
                trigger: DumpTrigger::SlowStep,
                step: completed,
                evidence: DumpEvidence {
                    step_ns: Some(s.step_ns),
                    median_ns: Some(s.median_ns),
                    factor: Some(s.factor),
                    window: Some(s.window as u64),
                    ..DumpEvidence::default()
                },
            });
        }
        if self
            .signal
            .as_ref()
            .is_some_and(|(flag, _)| flag.swap(false, Ordering::Relaxed))
        {
            self.fire(Fired {
                trigger: DumpTrigger::Signal,
                step: completed,
                evidence: DumpEvidence {
                    reason: Some("SIGUSR2".into()),
                    ..DumpEvidence::default()
                },
            });
        }
        if let Some(f) = self.file.as_mut()
            && f.poll(end_ns)
        {
            let path = f.path.display().to_string();
            self.fire(Fired {
                trigger: DumpTrigger::File,
                step: completed,
                evidence: DumpEvidence {
                    path: Some(path),
                    ..DumpEvidence::default()
                },
            });
        }
        if let Some(f) = self.fired.take() {
            self.accept(f, end_ns, true);
        }
        if self.waiting.as_ref().is_some_and(|w| w.last <= completed) {
            self.send_waiting(Some((completed + 1, end_ns)));
        }
        spare.unwrap_or_else(|| vec![0; size])
    }

    /// Applies the limits to a fired trigger; an accepted one waits for its last step.
    fn accept(&mut self, fired: Fired, now_ns: u64, rate_limited: bool) {
        let first = fired.step.saturating_sub(self.cfg.before);
        let estimate = (self.ring.bytes_from(first) + self.interned.len()) as u64;
        let min_ns = u64::try_from(self.cfg.min_interval.as_nanos()).unwrap_or(u64::MAX);
        let too_soon = rate_limited
            && self
                .last_dump_ns
                .is_some_and(|t| now_ns.saturating_sub(t) < min_ns);
        if self.waiting.is_some()
            || self.accepted >= self.cfg.max_dumps
            || too_soon
            || self.reserved_bytes.saturating_add(estimate) > self.cfg.max_dump_bytes
        {
            self.suppress();
            return;
        }
        self.accepted += 1;
        self.last_dump_ns = Some(now_ns);
        self.reserved_bytes += estimate;
        self.waiting = Some(Accepted {
            last: fired.step.saturating_add(self.cfg.after),
            fired,
            seq: self.accepted,
            suppressed: std::mem::take(&mut self.suppressed_since),
        });
    }

    /// Hands the waiting dump to the dump thread with the steps the ring holds of it.
    fn send_waiting(&mut self, boundary: Option<(u64, u64)>) {
        let Some(w) = self.waiting.take() else { return };
        let first = w.fired.step.saturating_sub(self.cfg.before);
        let blocks = self.ring.range(first, w.last);
        let (Some(a), Some(b)) = (blocks.first(), blocks.last()) else {
            return;
        };
        let (first_step, last_step) = (a.index, b.index);
        let boundary = boundary.filter(|&(i, _)| i == last_step + 1);
        let name = format!(
            "{}-{}-steps{first_step}-{last_step}.jsonl",
            self.name,
            w.fired.trigger.as_str()
        );
        self.writer.send(Job {
            name,
            header: Arc::clone(&self.header),
            record: DumpRecord {
                trigger: w.fired.trigger,
                trigger_step: w.fired.step,
                first_step,
                last_step,
                evidence: w.fired.evidence,
                seq: w.seq,
                suppressed: w.suppressed,
                cut_lines: 0,
            },
            interned: self.interned.bytes().to_vec(),
            blocks,
            boundary,
        });
    }

    /// The session ends: a waiting dump is written with the steps it has; on an exit other
    /// than `finish` (and when asked), the ring with the unfinished step `current` is dumped.
    pub(crate) fn close(&mut self, exit: bool, current: u64, lines: &[u8], now_ns: u64) {
        self.send_waiting(None);
        if exit && self.cfg.dump_on_exit {
            self.ring.push(Block {
                index: current,
                end_ns: now_ns,
                bytes: Arc::new(lines.to_vec()),
            });
            let fired = Fired {
                trigger: DumpTrigger::Exit,
                step: current,
                evidence: DumpEvidence::default(),
            };
            self.accept(fired, now_ns, false);
            self.send_waiting(None);
        }
        self.writer.join();
        if let Some((_, id)) = self.signal.take() {
            signal_hook::low_level::unregister(id);
        }
    }

    /// What the recorder did so far.
    pub(crate) fn stats(&self) -> FlightStats {
        let mut s = lock(&self.writer.stats).clone();
        s.suppressed = self.suppressed;
        s.ring_steps = self.ring.len();
        s.ring_bytes = self.ring.bytes();
        s.evicted_steps = self.ring.evicted();
        s.interned_bytes = self.interned.len();
        s
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Some((_, id)) = self.signal.take() {
            signal_hook::low_level::unregister(id);
        }
    }
}
