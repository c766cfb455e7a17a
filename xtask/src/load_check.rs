//! `cargo xtask load-check`: the README's test command on a machine kept busy.
//!
//! Tests never depend on speed or load (docs: "Tests never depend on speed or load"): a test's
//! outcome is the same on an idle and on a saturated machine. This command checks that the
//! way a newcomer would break it, by running the README's test command, `cargo test
//! --workspace` (plus any arguments given after `--`), while other processes keep every
//! core busy: two busy loops per core by default (`--per-core N`), each a `sh` loop at the
//! normal priority, competing with the tests for the CPU. It reports pass or fail with the
//! wall time taken and the load average before and after, and exits non-zero when the tests
//! fail.
//!
//! The busy loops are ended on every way out: a guard kills and reaps them when the check
//! returns, fails or panics; Ctrl-C reaches them as it reaches the tests (they are in the
//! terminal's process group); and each loop also ends by itself within a moment once this
//! process is gone (it checks that its pid is alive between rounds), so not even a SIGKILL of
//! the check leaves them spinning.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The full usage of the command.
const USAGE: &str = "\
usage: cargo xtask load-check [--per-core N] [-- ARGS]

Runs `cargo test --workspace ARGS` (the README's test command) while N busy loops per core
(default 2) keep every core busy, then reports pass or fail and the wall time.";

/// The busy loops per core when not given.
const DEFAULT_PER_CORE: usize = 2;

/// Runs the check from the workspace `root` with the command's `args`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let Some(opts) = parse(args)? else {
        println!("{USAGE}");
        return Ok(());
    };
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let loops = cores * opts.per_core;
    let mut test = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    test.current_dir(root)
        .args(["test", "--workspace"])
        .args(&opts.test_args);
    let before = load_average();
    let busy = Spinners::start(loops)?;
    eprintln!(
        "load-check: {loops} busy loop(s) ({} per core × {cores} core(s)) running; load \
         average {before}; running {test:?}",
        opts.per_core
    );
    let started = Instant::now();
    let status = test
        .status()
        .with_context(|| format!("failed to start {test:?}"));
    let wall = started.elapsed();
    let after = load_average();
    drop(busy);
    let status = status?;
    let verdict = if status.success() { "passed" } else { "FAILED" };
    eprintln!(
        "load-check: `cargo test --workspace` {verdict} in {:.1} s under {loops} busy loop(s) \
         on {cores} core(s) (load average {before} before, {after} at the end)",
        wall.as_secs_f64()
    );
    if !status.success() {
        bail!("the tests failed under load ({status})");
    }
    Ok(())
}

/// The command's options.
#[derive(Debug, PartialEq)]
struct Options {
    per_core: usize,
    test_args: Vec<String>,
}

/// Reads the command's arguments; `None` when help was asked for.
fn parse(args: &[String]) -> Result<Option<Options>> {
    let mut opts = Options {
        per_core: DEFAULT_PER_CORE,
        test_args: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--" => {
                opts.test_args = it.cloned().collect();
                break;
            }
            "-h" | "--help" => return Ok(None),
            "--per-core" => {
                let n = it
                    .next()
                    .with_context(|| format!("--per-core needs a number\n\n{USAGE}"))?;
                opts.per_core =
                    n.parse().ok().filter(|&n| n > 0).with_context(|| {
                        format!("--per-core needs a positive number, not `{n}`")
                    })?;
            }
            other => bail!("unknown load-check argument `{other}`\n\n{USAGE}"),
        }
    }
    Ok(Some(opts))
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), or `unknown`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_string(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// Busy-loop processes, killed and reaped when dropped.
#[derive(Debug)]
struct Spinners {
    children: Vec<Child>,
}

impl Spinners {
    /// Starts `n` busy loops that end by themselves once this process is gone.
    fn start(n: usize) -> Result<Spinners> {
        Spinners::watching(n, std::process::id())
    }

    /// Starts `n` busy loops that run while process `pid` is alive (and until dropped). If one
    /// fails to start, those already started are killed (the guard is dropped).
    fn watching(n: usize, pid: u32) -> Result<Spinners> {
        let mut busy = Spinners {
            children: Vec::with_capacity(n),
        };
        for _ in 0..n {
            // Arithmetic in the shell, checking between rounds (a few ms each) that `pid` is
            // still there. Stdin closed, output discarded.
            let child = Command::new("sh")
                .args([
                    "-c",
                    "while kill -0 \"$0\" 2>/dev/null; do i=0; \
                     while [ \"$i\" -lt 2000 ]; do i=$((i + 1)); done; done",
                    &pid.to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting a busy loop (`sh`)")?;
            busy.children.push(child);
        }
        Ok(busy)
    }

    /// The loops' process ids.
    #[cfg(test)]
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for child in &mut self.children {
            // Already gone (it ended by itself) is fine; so is a kill that fails for it.
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Whether process `pid` exists and is not a zombie.
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            let state = s[s.rfind(')').map_or(0, |i| i + 1)..].trim_start();
            !state.starts_with('Z')
        })
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn arguments_after_the_separator_go_to_cargo_test() {
        let o = parse(&args(&[])).unwrap().unwrap();
        assert_eq!((o.per_core, o.test_args.len()), (DEFAULT_PER_CORE, 0));
        let o = parse(&args(&[
            "--per-core",
            "3",
            "--",
            "-p",
            "trace-sampler",
            "--",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(o.per_core, 3);
        assert_eq!(o.test_args, args(&["-p", "trace-sampler", "--"]));
        assert_eq!(parse(&args(&["--help"])).unwrap(), None);
        for bad in [
            &["--per-core"][..],
            &["--per-core", "0"],
            &["--per-core", "x"],
            &["-p"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_guard_kills_its_busy_loops_when_dropped() {
        let busy = Spinners::start(2).unwrap();
        let pids = busy.pids();
        assert_eq!(pids.len(), 2);
        assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
        drop(busy);
        // Killed and reaped: gone at once.
        assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
    }

    #[test]
    fn the_guard_kills_its_loops_on_an_error_path_too() {
        let pids = std::cell::RefCell::new(Vec::new());
        let failing = || -> Result<()> {
            let busy = Spinners::start(1)?;
            pids.borrow_mut().extend(busy.pids());
            bail!("a failure while the loops run")
        };
        assert!(failing().is_err());
        let pids = pids.into_inner();
        assert_eq!(pids.len(), 1);
        assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
    }

    #[test]
    fn a_busy_loop_ends_by_itself_once_the_process_it_watches_is_gone() {
        // A process that is gone at once: the loop watching it ends without being killed.
        let mut short = Command::new("true").spawn().unwrap();
        let gone = short.id();
        short.wait().unwrap();
        let mut busy = Spinners::watching(1, gone).unwrap();
        let child = &mut busy.children[0];
        // Only a hang guard: the loop checks between rounds of a few milliseconds.
        let deadline = Instant::now() + Duration::from_mins(2);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the loop never noticed");
            std::thread::sleep(Duration::from_millis(10));
        };
        // It exited on its own (a kill would have been a signal).
        assert!(status.code().is_some(), "{status}");
    }
}
