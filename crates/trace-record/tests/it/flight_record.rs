//! The flight recorder: dumps by trigger, their steps, their validity, their bounds.

use std::cell::Cell;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use trace_record::schema::{
    AllocKind, DumpRecord, DumpTrigger, Event, EventCounts, GradientState, MemoryCategory, SpanKind,
};
use trace_record::{
    FlightConfig, FlightStats, MemoryRecord, OpRecord, ReadOptions, Run, TraceSession, read_trace,
    validate_file,
};

use crate::common::{op_count, run, step_indices};

/// Step duration of an ordinary step in these tests.
const STEP: Duration = Duration::from_millis(10);

/// A flight session `t` on a mock clock, and the allocation [`Rig::work`] carries from one
/// step into the next.
struct Rig {
    s: TraceSession,
    mock: Arc<quanta::Mock>,
    carry: Cell<Option<u64>>,
}

impl Rig {
    /// Dumps into `dir`, with no minimum interval between dumps unless `cfg` sets one.
    fn new(dir: &Path, cfg: impl FnOnce(FlightConfig) -> FlightConfig) -> Self {
        Self::start(run(), FlightConfig::new(dir), cfg)
    }

    /// Writes `file` beside its ring (dumps in `dir`), with `run`'s flush settings.
    fn beside(
        dir: &Path,
        file: &Path,
        run: Run,
        cfg: impl FnOnce(FlightConfig) -> FlightConfig,
    ) -> Self {
        Self::start(run, FlightConfig::new(dir).beside_file(file), cfg)
    }

    fn start(run: Run, base: FlightConfig, cfg: impl FnOnce(FlightConfig) -> FlightConfig) -> Self {
        let (clock, mock) = quanta::Clock::mock();
        mock.increment(Duration::from_secs(1));
        let cfg = cfg(base.min_interval(Duration::ZERO));
        let s = TraceSession::flight_with_clock(run.run_id("t"), cfg, clock).unwrap();
        Self {
            s,
            mock,
            carry: Cell::new(None),
        }
    }

    /// Step `i`'s work, the step not ended: a span straddling the boundary (opened here,
    /// closed next step), an allocation freed next step, a contained span with an op, and the
    /// clock advanced by `dur`.
    fn work(&self, i: u64, dur: Duration) {
        let s = &self.s;
        let mem = |kind, storage| MemoryRecord {
            kind,
            storage,
            tensor: storage,
            bytes: 64,
            device: "cpu",
            category: MemoryCategory::Activation,
        };
        {
            let _span = s.span("forward", SpanKind::Module, None);
            let t = s.now_ns();
            s.record_op(&OpRecord {
                name: "matmul",
                inputs: &[1, 2],
                outputs: &[3],
                shape: &[4, 4],
                dtype: "f32",
                device: "cpu",
                start_ns: t,
                dur_ns: 1,
                in_bytes: 128,
                out_bytes: 64,
                category: None,
                flops: Some(128),
            });
            s.record_memory(&mem(AllocKind::Alloc, 1000 + i));
        }
        if let Some(prev) = self.carry.replace(Some(1000 + i)) {
            s.record_memory(&mem(AllocKind::Free, prev));
        }
        self.mock.increment(dur);
    }

    /// Steps `steps`, each: the work of an ordinary step ([`STEP`]), then `each(session, i)`,
    /// then `step()`.
    fn steps(&self, steps: Range<u64>, mut each: impl FnMut(&TraceSession, u64)) {
        for i in steps {
            self.work(i, STEP);
            each(&self.s, i);
            self.s.step();
        }
    }

    /// Finishes the session; its flight stats then.
    fn finish(&self) -> FlightStats {
        self.s.finish().unwrap();
        self.s.flight_stats().unwrap()
    }
}

/// The `dump` line of the dump at `path`.
fn dump_record(path: &Path) -> DumpRecord {
    read_trace(path).unwrap().dump.unwrap()
}

/// The `dump` line of the one dump `stats` lists, once that dump is strictly valid.
fn only_dump(stats: &FlightStats) -> DumpRecord {
    assert_eq!(stats.dumps.len(), 1, "{stats:?}");
    assert_strictly_valid(&stats.dumps[0]);
    dump_record(&stats.dumps[0])
}

/// Every dump in `dir` (not the hidden temporary files), sorted.
pub(crate) fn dumps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    v.sort();
    v
}

/// Strictly valid: reads strictly, no structural issue, a complete trailer whose counts are
/// the events read.
pub(crate) fn assert_strictly_valid(path: &Path) {
    let v = validate_file(path, ReadOptions::strict()).unwrap();
    assert!(v.issues.is_empty(), "{}: {:?}", path.display(), v.issues);
    assert!(!v.incomplete, "{}", path.display());
    assert!(v.partial_line.is_none());
    assert_eq!(v.trailer.unwrap().counts, v.counts, "{}", path.display());
}

/// The duration of every step in the dump by its `step` lines (the last step has none after).
fn step_durations(path: &Path) -> Vec<(u64, u64)> {
    let t = read_trace(path).unwrap();
    let steps: Vec<(u64, u64)> = t
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Step(s) => Some((s.index, s.ts)),
            _ => None,
        })
        .collect();
    steps
        .windows(2)
        .map(|w| (w[0].0, w[1].1 - w[0].1))
        .collect()
}

#[test]
fn a_slow_step_makes_one_dump_of_the_steps_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(3).after(2).slow_step(3.0, 8));
    let outer = rig.s.span("train", SpanKind::Function, None);
    for i in 0..40 {
        rig.work(i, if i == 20 { STEP * 10 } else { STEP });
        rig.s.step();
    }
    drop(outer);
    let stats = rig.finish();
    assert_eq!(stats.dumps, dumps(dir.path()));
    let d = only_dump(&stats);
    let path = &stats.dumps[0];
    assert!(
        path.ends_with("t-slow_step-steps17-22.jsonl"),
        "{}",
        path.display()
    );
    assert_eq!(d.trigger, DumpTrigger::SlowStep);
    assert_eq!((d.trigger_step, d.first_step, d.last_step), (20, 17, 22));
    assert_eq!(d.evidence.step_ns, Some(100_000_000));
    assert_eq!(d.evidence.median_ns, Some(10_000_000));
    assert!(d.cut_lines > 0, "the free of step 16's allocation is cut");
    // Steps 17..=22 are there, and step 20 is the slowest of them.
    let durs = step_durations(path);
    assert_eq!(
        durs.iter().map(|d| d.0).collect::<Vec<_>>(),
        [17, 18, 19, 20, 21, 22]
    );
    let slowest = durs.iter().max_by_key(|d| d.1).unwrap();
    assert_eq!(*slowest, (20, 100_000_000));
}

#[test]
fn a_non_finite_loss_makes_one_dump() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(2));
    rig.steps(0..30, |s, i| {
        s.record_loss(if i == 15 { f64::NAN } else { 1.0 });
    });
    let d = only_dump(&rig.finish());
    assert_eq!(d.trigger, DumpTrigger::NonFiniteLoss);
    assert_eq!((d.trigger_step, d.first_step, d.last_step), (15, 13, 15));
    assert_eq!(d.evidence.value.as_deref(), Some("NaN"));
}

#[test]
fn a_non_finite_gradient_makes_one_dump_naming_the_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(1));
    rig.steps(0..10, |s, i| {
        let state = if i == 4 {
            GradientState::NonFinite
        } else {
            GradientState::Present
        };
        s.record_gradient("w1", state, (i != 4).then_some(1.0));
    });
    let d = only_dump(&rig.finish());
    assert_eq!(d.trigger, DumpTrigger::NonFiniteGradient);
    assert_eq!(d.evidence.param.as_deref(), Some("w1"));
    assert_eq!((d.first_step, d.last_step), (3, 4));
}

#[test]
fn a_trigger_firing_every_step_makes_no_more_dumps_than_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(1).max_dumps(3));
    rig.steps(0..50, |s, _| assert!(s.dump("every step")));
    let stats = rig.finish();
    assert_eq!(stats.dumps.len(), 3);
    assert_eq!(dumps(dir.path()).len(), 3);
    assert_eq!(stats.suppressed, 47);
    for p in &stats.dumps {
        assert_strictly_valid(p);
    }
}

#[test]
fn the_byte_budget_and_the_interval_refuse_dumps() {
    let dir = tempfile::tempdir().unwrap();
    // Each step is a few hundred bytes: a 2,000-byte budget holds a couple of dumps.
    let rig = Rig::new(dir.path(), |c| {
        c.before(2).max_dump_bytes(2_000).min_interval(STEP * 5)
    });
    rig.steps(0..100, |s, _| {
        s.dump("again");
    });
    let stats = rig.finish();
    let written: u64 = stats.dumps.len() as u64;
    assert!(written >= 1);
    // At most one dump per 5 steps by the interval, and the budget stops them sooner.
    assert!(written < 20, "{written}");
    assert_eq!(written + stats.suppressed, 100);
}

#[test]
fn steps_after_the_trigger_are_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(0).after(3));
    rig.steps(0..10, |s, i| {
        if i == 2 {
            s.dump("now");
        }
    });
    let d = only_dump(&rig.finish());
    assert_eq!((d.trigger_step, d.first_step, d.last_step), (2, 2, 5));
    assert_eq!(d.evidence.reason.as_deref(), Some("now"));
}

#[test]
fn a_session_dropped_without_finish_dumps_its_ring() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(2));
    rig.steps(0..6, |_, _| {});
    rig.work(6, STEP);
    drop(rig);
    let found = dumps(dir.path());
    assert_eq!(found.len(), 1);
    assert!(found[0].ends_with("t-exit-steps4-6.jsonl"), "{found:?}");
    assert_strictly_valid(&found[0]);
}

#[test]
fn the_ring_keeps_whole_steps_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.ring_bytes(65_536).dump_on_exit(false));
    rig.steps(0..200, |_, _| {});
    let stats = rig.s.flight_stats().unwrap();
    assert!(stats.ring_bytes <= 65_536, "{stats:?}");
    assert!(
        stats.ring_steps > 1 && stats.evicted_steps > 100,
        "{stats:?}"
    );
    assert_eq!(stats.ring_steps as u64 + stats.evicted_steps, 200);
    rig.s.finish().unwrap();
    assert!(dumps(dir.path()).is_empty());
}

#[test]
fn a_trigger_file_fires_when_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump-now");
    let rig = Rig::new(&dir.path().join("dumps"), |c| {
        c.before(1)
            .trigger_file(&file)
            .poll_interval(Duration::ZERO)
    });
    rig.steps(0..10, |_, i| {
        if i == 5 {
            std::fs::write(&file, b"").unwrap();
        }
    });
    let d = only_dump(&rig.finish());
    assert_eq!((d.trigger, d.trigger_step), (DumpTrigger::File, 5));
    assert!(file.exists(), "the trigger file is the user's");
}

#[test]
fn sampled_stacks_keep_their_frames_in_every_dump() {
    use trace_record::schema::{FrameEvent, SamplerEvent, SamplesEvent, StackEvent};
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::new(dir.path(), |c| c.before(1).ring_steps(3));
    rig.steps(0..20, |s, i| {
        let mut ev = Vec::new();
        if i == 0 {
            ev.push(Event::Frame(FrameEvent {
                id: 1,
                func: "main".into(),
                file: None,
                inlined: false,
            }));
            ev.push(Event::Stack(StackEvent {
                id: 1,
                frames: vec![1],
            }));
        }
        ev.push(Event::Samples(SamplesEvent {
            step: i,
            thread: 1,
            stack: 1,
            n: 2,
            phase: None,
            span: None,
        }));
        ev.push(Event::Sampler(SamplerEvent {
            step: i,
            hz: 1000,
            taken: 2,
            lost: 0,
            cpu_ns: Some(10_000_000),
            sampler_cpu_ns: None,
            ts: 0,
            dur: 10_000_000,
            source: None,
        }));
        s.record_sampled(&ev);
        if i == 15 {
            s.dump("stacks");
        }
    });
    let stats = rig.finish();
    only_dump(&stats);
    let t = read_trace(&stats.dumps[0]).unwrap();
    let mut counts = EventCounts::default();
    for e in &t.events {
        counts.add(e.event.event_type(), 1);
    }
    assert_eq!((counts.frame, counts.stack, counts.samples), (1, 1, 2));
}

/// The `step` indices and the number of `op` lines of a trace.
fn steps_and_ops(path: &Path) -> (Vec<u64>, usize) {
    let t = read_trace(path).unwrap();
    (step_indices(&t), op_count(&t))
}

#[test]
fn a_file_beside_the_ring_gets_every_step_and_a_slow_step_still_dumps() {
    // With the background writer (the default flush interval) and without one (each step
    // writes itself).
    for (k, flush) in [true, false].into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("whole-{k}.jsonl"));
        let dumps_dir = dir.path().join("dumps");
        let run = if flush {
            run()
        } else {
            run().flush_interval(None)
        };
        let rig = Rig::beside(&dumps_dir, &file, run, |c| {
            c.before(3).slow_step(3.0, 8).ring_bytes(16_384)
        });
        let outer = rig.s.span("train", SpanKind::Function, None);
        for i in 0..120 {
            rig.work(i, if i == 100 { STEP * 10 } else { STEP });
            rig.s.step();
        }
        if flush {
            // The recording thread wrote nothing itself: the background writer did.
            assert_eq!(rig.s.recording_write_ns(), 0, "flush {flush}");
        }
        // One more step's work, unfinished at `finish`: it reaches the file too.
        rig.work(120, STEP);
        drop(outer);
        let summary = rig.s.finish().unwrap();
        assert_eq!(summary.path.as_deref(), Some(file.as_path()));
        let stats = rig.s.flight_stats().unwrap();
        // The ring evicted most steps; the file has them all.
        assert!(stats.evicted_steps > 50, "{stats:?}");
        assert_strictly_valid(&file);
        let (steps, ops) = steps_and_ops(&file);
        assert_eq!(steps, (1..=120).collect::<Vec<u64>>(), "flush {flush}");
        assert_eq!(ops, 121, "flush {flush}");
        assert_eq!(summary.counts.op, 121);
        assert_eq!(read_trace(&file).unwrap().dump, None);
        // The dump is the ring's, as without a file.
        assert_eq!(stats.dumps, dumps(&dumps_dir));
        let d = only_dump(&stats);
        assert!(
            stats.dumps[0].ends_with("t-slow_step-steps97-100.jsonl"),
            "{stats:?}"
        );
        assert_eq!((d.trigger_step, d.first_step, d.last_step), (100, 97, 100));
    }
}

#[test]
fn a_file_beside_the_ring_ends_incomplete_and_the_ring_dumps_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.jsonl");
    let dumps_dir = dir.path().join("dumps");
    let rig = Rig::beside(&dumps_dir, &file, run(), |c| c.before(2));
    rig.steps(0..6, |_, _| {});
    rig.work(6, STEP);
    drop(rig);
    let found = dumps(&dumps_dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("t-exit-steps4-6.jsonl"), "{found:?}");
    assert_strictly_valid(&found[0]);
    // The file has every step, the unfinished one included, and says it is incomplete.
    let (steps, ops) = steps_and_ops(&file);
    assert_eq!((steps, ops), ((1..=6).collect::<Vec<u64>>(), 7));
    let v = validate_file(&file, ReadOptions::strict()).unwrap();
    assert!(v.incomplete, "{v:?}");
}

#[test]
fn a_file_beside_the_ring_is_claimed_as_open_claims_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taken.jsonl");
    std::fs::write(&file, b"someone's\n").unwrap();
    let cfg = FlightConfig::new(dir.path().join("dumps")).beside_file(&file);
    let err = TraceSession::flight(run(), cfg.clone()).unwrap_err();
    assert!(
        matches!(err, trace_record::TraceError::Exists { .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"someone's\n");
    // Asked to replace it, the session does.
    let s = TraceSession::flight(run().overwrite(true), cfg).unwrap();
    s.step();
    s.finish().unwrap();
    assert_strictly_valid(&file);
}

#[test]
fn a_compressed_file_beside_the_ring_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.jsonl.zst");
    let dumps_dir = dir.path().join("dumps");
    let rig = Rig::beside(&dumps_dir, &file, run(), |c| c.ring_bytes(16_384));
    rig.steps(0..50, |_, _| {});
    rig.finish();
    assert_eq!(
        std::fs::read(&file).unwrap()[..4],
        trace_record::ZSTD_MAGIC[..]
    );
    assert_strictly_valid(&file);
    let (steps, ops) = steps_and_ops(&file);
    assert_eq!((steps, ops), ((1..=50).collect::<Vec<u64>>(), 50));
    assert!(dumps(&dumps_dir).is_empty());
}
