//! Synthetic traces for tests and benchmarks: a repeated MLP-like training step with a chosen
//! number of ops, four events per op (tensor, op, alloc, free), written as schema-valid JSONL
//! by trace-record's own encoder (the same bytes a `TraceSession` writes).

use std::collections::BTreeMap;
use std::io::{self, Write};

use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use trace_record::schema::{
    AllocKind, Event, ExecStep, Header, MemoryCategory, MemoryEvent, OpEvent, Phase, RunMeta,
    SCHEMA_NAME, SCHEMA_VERSION, SpanEnd, SpanKind, SpanStart, StepEvent, TensorEvent, TimingMode,
};
use trace_record::{encode_event, encode_header, encode_trailer};

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Total number of ops (the step count is `ops / ops_per_step`, rounded up).
    pub ops: usize,
    /// Ops per training step.
    pub ops_per_step: usize,
    /// A step whose graph differs from the others (its 3rd op has another name), if any.
    pub changed_step: Option<u64>,
    /// Seed of the duration jitter (deterministic).
    pub seed: u64,
    /// Stop before the trailer (a truncated trace).
    pub truncate: bool,
    /// Every op's duration in percent of its generated value (100: as generated): a run of
    /// the same program on a faster or slower machine, for comparisons whose run-to-run
    /// spread a test constructs.
    pub speed_pct: u64,
    /// The header's rank and world size (one rank of a distributed run), if any.
    pub rank: Option<(u32, u32)>,
    /// The header's run id; `None`: `synthetic-{seed}`.
    pub run_id: Option<String>,
    /// Added to the header's wall-clock start: ranks of one job that started apart, each
    /// trace on its own clock.
    pub start_offset_ns: u64,
    /// Time every step's `train_step` span spends after its optimizer phase: a rank slowed
    /// on purpose by a chosen amount (tests of stragglers need no sleeping process).
    pub step_pause_ns: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            ops: 1000,
            ops_per_step: 100,
            changed_step: None,
            seed: 1,
            truncate: false,
            speed_pct: 100,
            rank: None,
            run_id: None,
            start_offset_ns: 0,
            step_pause_ns: 0,
        }
    }
}

const OP_NAMES: [&str; 6] = ["matmul", "add", "relu", "matmul", "add", "softmax"];
const PARAMS: usize = 4;

/// The header's device: events on it omit their `device` field, as a session writes them.
const DEVICE: &str = "cpu";

fn line<W: Write>(w: &mut W, buf: &mut Vec<u8>, e: &Event) -> io::Result<()> {
    buf.clear();
    encode_event(e, DEVICE, buf);
    w.write_all(buf)
}

/// Writes a synthetic trace to `w`. Each op contributes exactly four events (`tensor`, `op`,
/// `memory` alloc, `memory` free); each step adds a `step` event and four spans (the step,
/// forward, backward, optimizer). Returns the number of event lines written (header and
/// trailer excluded).
pub fn write_synthetic<W: Write>(w: &mut W, cfg: &SynthConfig) -> io::Result<u64> {
    let header = Header {
        schema: SCHEMA_NAME.to_string(),
        version: SCHEMA_VERSION,
        run: RunMeta {
            run_id: cfg
                .run_id
                .clone()
                .unwrap_or_else(|| format!("synthetic-{}", cfg.seed)),
            entrypoint: "synthetic::train".to_string(),
            phase: Phase::Train,
            device: DEVICE.to_string(),
            timing: TimingMode::Host,
            start_unix_ns: 1_700_000_000_000_000_000 + cfg.start_offset_ns,
            pid: 1,
            rank: cfg.rank.map(|r| r.0),
            world_size: cfg.rank.map(|r| r.1),
            schedule: None,
            tags: BTreeMap::new(),
            versions: BTreeMap::new(),
        },
    };
    let mut buf = Vec::with_capacity(256);
    encode_header(&header, &mut buf);
    w.write_all(&buf)?;
    // Duration jitter from the workspace's seeded generator: one stream per seed.
    let mut rng = SplitMix64::seed_from_u64(cfg.seed);
    let mut counts = trace_record::schema::EventCounts::default();
    let mut n = 0u64;
    let mut emit = |w: &mut W, e: Event, counts: &mut trace_record::schema::EventCounts| {
        counts.add(e.event_type(), 1);
        n += 1;
        line(w, &mut buf, &e)
    };
    let mut ts = 0u64;
    let mut next_id = 1u64;
    let mut id = || {
        let i = next_id;
        next_id += 1;
        i
    };
    // Parameters, allocated once before the first step.
    let mut params = Vec::new();
    for p in 0..PARAMS {
        let t = id();
        params.push(t);
        emit(
            w,
            Event::Tensor(TensorEvent {
                id: t,
                label: Some(format!("layer{p}.weight")),
                shape: vec![64, 64],
                dtype: "f32".into(),
                device: String::new(),
                requires_grad: true,
                bytes: 64 * 64 * 4,
                category: MemoryCategory::Parameter,
                span: None,
            }),
            &mut counts,
        )?;
        emit(
            w,
            Event::Memory(MemoryEvent {
                kind: AllocKind::Alloc,
                storage: t,
                tensor: t,
                bytes: 64 * 64 * 4,
                device: String::new(),
                category: MemoryCategory::Parameter,
                span: None,
                ts,
            }),
            &mut counts,
        )?;
    }
    let ops_per_step = cfg.ops_per_step.max(1);
    let steps = cfg.ops.div_ceil(ops_per_step);
    let mut done = 0usize;
    let mut span_id = 0u64;
    for step in 0..steps as u64 {
        ts += 100;
        emit(w, Event::Step(StepEvent { index: step, ts }), &mut counts)?;
        span_id += 1;
        let root = span_id;
        emit(
            w,
            Event::SpanStart(SpanStart {
                id: root,
                parent: None,
                name: "train_step".into(),
                kind: SpanKind::Function,
                step: None,
                thread: 0,
                ts,
            }),
            &mut counts,
        )?;
        let in_step = ops_per_step.min(cfg.ops - done);
        let phases = [
            (ExecStep::Forward, "forward", in_step / 2),
            (ExecStep::Backward, "backward", in_step / 4),
            (
                ExecStep::Optimizer,
                "optimizer",
                in_step - in_step / 2 - in_step / 4,
            ),
        ];
        let mut prev_out: Option<u64> = None;
        let mut pending_free: Vec<(u64, u64, MemoryCategory)> = Vec::new();
        let mut k = 0usize;
        for (exec, pname, nops) in phases {
            span_id += 1;
            let sid = span_id;
            ts += 10;
            emit(
                w,
                Event::SpanStart(SpanStart {
                    id: sid,
                    parent: Some(root),
                    name: pname.into(),
                    kind: SpanKind::Function,
                    step: Some(exec),
                    thread: 0,
                    ts,
                }),
                &mut counts,
            )?;
            let cat = match exec {
                ExecStep::Forward => MemoryCategory::Activation,
                ExecStep::Backward => MemoryCategory::Gradient,
                ExecStep::Optimizer => MemoryCategory::Temporary,
            };
            for _ in 0..nops {
                let mut name = OP_NAMES[k % OP_NAMES.len()];
                if cfg.changed_step == Some(step) && k == 2 {
                    name = "gelu";
                }
                let out = id();
                let inputs = match prev_out {
                    Some(p) => vec![p, params[k % PARAMS]],
                    None => vec![params[k % PARAMS]],
                };
                let dur = (1000 + (rng.next_u64() % 500) + 200 * (k % 3) as u64)
                    .saturating_mul(cfg.speed_pct)
                    / 100;
                let bytes = 32 * 64 * 4;
                emit(
                    w,
                    Event::Tensor(TensorEvent {
                        id: out,
                        label: None,
                        shape: vec![32, 64],
                        dtype: "f32".into(),
                        device: String::new(),
                        requires_grad: false,
                        bytes,
                        category: cat,
                        span: Some(sid),
                    }),
                    &mut counts,
                )?;
                emit(
                    w,
                    Event::Op(OpEvent {
                        span: Some(sid),
                        name: name.into(),
                        inputs,
                        outputs: vec![out],
                        shape: vec![32, 64],
                        dtype: "f32".into(),
                        device: String::new(),
                        ts,
                        dur,
                        in_bytes: 2 * bytes,
                        out_bytes: bytes,
                        category: Some(cat),
                        flops: None,
                        in_shapes: None,
                        in_dtypes: None,
                    }),
                    &mut counts,
                )?;
                ts += dur;
                emit(
                    w,
                    Event::Memory(MemoryEvent {
                        kind: AllocKind::Alloc,
                        storage: out,
                        tensor: out,
                        bytes,
                        device: String::new(),
                        category: cat,
                        span: Some(sid),
                        ts,
                    }),
                    &mut counts,
                )?;
                pending_free.push((out, bytes, cat));
                // Keep two outputs alive: free the one before the previous.
                if pending_free.len() > 2 {
                    let (t, b, c) = pending_free.remove(0);
                    emit(
                        w,
                        Event::Memory(MemoryEvent {
                            kind: AllocKind::Free,
                            storage: t,
                            tensor: t,
                            bytes: b,
                            device: String::new(),
                            category: c,
                            span: Some(sid),
                            ts,
                        }),
                        &mut counts,
                    )?;
                }
                prev_out = Some(out);
                ts += 5;
                k += 1;
                done += 1;
            }
            // Free what is left of this phase at its end (a free per op in all).
            for (t, b, c) in pending_free.drain(..) {
                emit(
                    w,
                    Event::Memory(MemoryEvent {
                        kind: AllocKind::Free,
                        storage: t,
                        tensor: t,
                        bytes: b,
                        device: String::new(),
                        category: c,
                        span: Some(sid),
                        ts,
                    }),
                    &mut counts,
                )?;
            }
            ts += 10;
            emit(w, Event::SpanEnd(SpanEnd { id: sid, ts }), &mut counts)?;
        }
        ts += 10 + cfg.step_pause_ns;
        emit(w, Event::SpanEnd(SpanEnd { id: root, ts }), &mut counts)?;
    }
    if !cfg.truncate {
        let trailer = trace_record::schema::Trailer {
            outcome: trace_record::schema::Outcome::Complete,
            counts,
            dropped: 0,
            ts: ts + 1,
        };
        let mut buf = Vec::with_capacity(256);
        encode_trailer(&trailer, &mut buf);
        w.write_all(&buf)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's generator is SplitMix64 with the seed as its state: the stream the
    /// demo's weights, vecad's graphs and the comparison bootstrap were written against.
    #[test]
    fn the_generator_is_splitmix64_seeded_with_the_seed_itself() {
        let mut rng = SplitMix64::seed_from_u64(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut rng = SplitMix64::seed_from_u64(1_477_776_061_723_855_037);
        assert_eq!(rng.next_u64(), 1_985_237_415_132_408_290);
    }

    #[test]
    fn the_same_seed_gives_the_same_trace_and_another_seed_other_durations() {
        let write = |seed| {
            let mut buf = Vec::new();
            let cfg = SynthConfig {
                ops: 50,
                ops_per_step: 10,
                seed,
                ..SynthConfig::default()
            };
            write_synthetic(&mut buf, &cfg).expect("write to a Vec");
            String::from_utf8(buf).expect("utf8")
        };
        assert_eq!(write(3), write(3));
        // Past the header (whose run id names the seed), only the op durations differ.
        let (a, b) = (write(3), write(4));
        assert_eq!(a.lines().count(), b.lines().count());
        assert!(a.lines().skip(1).ne(b.lines().skip(1)));
    }

    /// A rank's trace: its header names the rank, the run and a later start; a pause makes
    /// every step exactly that much longer, and nothing else differs.
    #[test]
    fn a_rank_with_a_pause_has_its_header_and_steps_that_much_longer() {
        let write = |rank: Option<(u32, u32)>, pause: u64| {
            let mut buf = Vec::new();
            let cfg = SynthConfig {
                ops: 30,
                ops_per_step: 10,
                rank,
                run_id: Some("job".into()),
                start_offset_ns: 5,
                step_pause_ns: pause,
                ..SynthConfig::default()
            };
            write_synthetic(&mut buf, &cfg).expect("write to a Vec");
            trace_record::read_trace_bytes(&buf).expect("a valid trace")
        };
        let plain = write(None, 0);
        let slow = write(Some((2, 4)), 1_000_000);
        assert_eq!(
            (slow.header.run.rank, slow.header.run.world_size),
            (Some(2), Some(4))
        );
        assert_eq!(plain.header.run.rank, None);
        assert_eq!(slow.header.run.run_id, "job");
        assert_eq!(slow.header.run.start_unix_ns, 1_700_000_000_000_000_005);
        let steps = |t: &trace_record::ParsedTrace| -> Vec<u64> {
            t.events
                .iter()
                .filter_map(|e| match &e.event {
                    Event::Step(s) => Some(s.ts),
                    _ => None,
                })
                .collect()
        };
        let (p, s) = (steps(&plain), steps(&slow));
        assert_eq!(p.len(), 3);
        for k in 0..3 {
            assert_eq!(s[k] - p[k], k as u64 * 1_000_000, "step {k}");
        }
        assert!(trace_record::validate(&slow).is_empty());
    }
}
