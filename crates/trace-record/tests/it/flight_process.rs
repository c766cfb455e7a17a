//! The flight recorder in a child process: SIGUSR2, SIGKILL while dumping, memory over
//! 10,000 steps. Each test re-runs this test binary filtered to itself as the child.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use trace_record::schema::{DumpTrigger, SpanKind};
use trace_record::{FlightConfig, TraceSession, read_trace};

use crate::common::{large_op, rerun, run, wait_for_line};
use crate::flight_record::{assert_strictly_valid, dumps};

const DIR_ENV: &str = "TRACE_RECORD_FLIGHT_CHILD_DIR";

fn child(test: &str, dir: &Path) -> Child {
    rerun(test)
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// One op in a span of its own.
fn op(s: &TraceSession, i: u64) {
    let _span = s.span("step", SpanKind::Module, None);
    large_op(s, i);
}

fn kill(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn sigusr2_makes_one_dump() {
    const TEST: &str = "flight_process::sigusr2_makes_one_dump";
    if let Ok(dir) = std::env::var(DIR_ENV) {
        let s = TraceSession::flight(
            run().run_id("sig"),
            FlightConfig::new(&dir).before(2).on_signal(),
        )
        .unwrap();
        println!("ready");
        let deadline = Instant::now() + Duration::from_mins(1);
        let mut i = 0;
        // Steps until the dump is written (or a minute passed: the parent then fails).
        while s.flight_stats().unwrap().dumps.is_empty() && Instant::now() < deadline {
            op(&s, i);
            s.step();
            i += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        s.finish().unwrap();
        std::process::exit(0);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = child(TEST, dir.path());
    wait_for_line(&mut c, "ready", TEST);
    kill(c.id(), "-USR2");
    assert!(c.wait().unwrap().success());
    let found: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_strictly_valid(&found[0]);
    let d = read_trace(&found[0]).unwrap().dump.unwrap();
    assert_eq!(d.trigger, DumpTrigger::Signal);
}

#[test]
fn sigkill_while_dumping_leaves_no_partial_dump_under_a_final_name() {
    const TEST: &str =
        "flight_process::sigkill_while_dumping_leaves_no_partial_dump_under_a_final_name";
    if let Ok(dir) = std::env::var(DIR_ENV) {
        let s = TraceSession::flight(
            run().run_id("kill"),
            FlightConfig::new(&dir)
                .before(50)
                .max_dumps(u64::MAX)
                .max_dump_bytes(u64::MAX)
                .min_interval(Duration::ZERO),
        )
        .unwrap();
        let mut i = 0;
        loop {
            for _ in 0..200 {
                op(&s, i);
                i += 1;
            }
            s.dump("always");
            s.step();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = child(TEST, dir.path());
    let deadline = Instant::now() + Duration::from_mins(1);
    while dumps(dir.path()).len() < 3 {
        assert!(Instant::now() < deadline, "no dumps in 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    c.kill().unwrap();
    assert!(!c.wait().unwrap().success());
    let found = dumps(dir.path());
    assert!(found.len() >= 3);
    for p in &found {
        assert_strictly_valid(p);
    }
}

/// Resident memory of this process, bytes (Linux).
#[cfg(target_os = "linux")]
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[cfg(target_os = "linux")]
#[test]
fn resident_memory_over_10000_steps_stays_within_the_ring_bound() {
    const TEST: &str =
        "flight_process::resident_memory_over_10000_steps_stays_within_the_ring_bound";
    /// The ring's bound.
    const RING: usize = 2 << 20;
    /// What may come beside it: the current step's buffer, the ring's deque, the session's
    /// block buffer (256 KiB + 64 KiB), thread stacks touched, allocator slack.
    const CONSTANT: u64 = 6 << 20;
    if let Ok(dir) = std::env::var(DIR_ENV) {
        let s = TraceSession::flight(
            run().run_id("mem"),
            FlightConfig::new(&dir).ring_bytes(RING).dump_on_exit(false),
        )
        .unwrap();
        // Warm up what every session touches once, then measure.
        for i in 0..10 {
            op(&s, i);
            s.step();
        }
        let before = rss();
        for i in 0..10_000u64 {
            for k in 0..20 {
                op(&s, i * 20 + k);
            }
            s.step();
        }
        let after = rss();
        let stats = s.flight_stats().unwrap();
        println!(
            "result growth={} ring={} evicted={}",
            after.saturating_sub(before),
            stats.ring_bytes,
            stats.evicted_steps
        );
        s.finish().unwrap();
        std::process::exit(0);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = child(TEST, dir.path());
    let line = wait_for_line(&mut c, "result", TEST);
    assert!(c.wait().unwrap().success());
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (growth, ring, evicted) = (field("growth="), field("ring="), field("evicted="));
    assert!(ring <= RING as u64);
    // The steps recorded are many times the bound: most left the ring.
    assert!(evicted > 9_000, "{line}");
    assert!(growth <= RING as u64 + CONSTANT, "{line}");
}
