//! Sampled stacks: raw address sequences interned while steps are recorded, symbolized after.
//!
//! While sampling, [`RawStacks`] only interns each raw stack (its instruction pointers) under
//! a stack id and queues its `raw_stack` line (each address as a module and file address,
//! the `module` line before the first stack naming it: what a reader needs to symbolize the
//! stack itself when the run is killed before sampling stops): no debug information is read,
//! nothing is demangled (reading a binary's debug
//! information costs a Candle model's process 150 MiB and more of resident memory and a few
//! hundred milliseconds of CPU, which must not land in the recorded steps). When sampling
//! stops, [`RawStacks::resolve`] symbolizes every stack once, with the [`Symbols`] interner,
//! into the `frame` and `stack` events, then gives the symbolizer's caches back.
//!
//! Functions inlined at an address get frames of their own (from the line tables), marked
//! `inlined`, inside the frame of the function containing them.

use std::sync::atomic::{AtomicU64, Ordering};

use trace_record::schema::{Event, FrameEvent, RawStackEvent, StackEvent};

use crate::FastMap;
use crate::modules::Modules;

/// What an instruction pointer resolved to.
#[derive(Debug, Clone)]
struct IpInfo {
    /// Frame ids, outermost (the containing function) first, then the functions inlined into it.
    frames: Vec<u64>,
    /// In the sampler's signal handler or the unwinder it calls.
    handler: bool,
    /// The signal trampoline (`__restore_rt`).
    trampoline: bool,
}

/// The next stack id and frame id: unique in the process, so that a capture that stops
/// sampling and starts again into the same session (each start a new sampler thread, each
/// stop its own `frame` and `stack` lines) never defines an id twice.
static NEXT_STACK: AtomicU64 = AtomicU64::new(1);
static NEXT_FRAME: AtomicU64 = AtomicU64::new(1);

/// Raw stacks (instruction pointers, innermost first, as the handler read them), interned
/// by their address sequence while steps are recorded: the ids the `samples` lines name, whose
/// `stack` lines [`RawStacks::resolve`] writes once sampling stopped.
#[derive(Debug, Default)]
pub(super) struct RawStacks {
    ids: FastMap<Box<[usize]>, u64>,
    /// The mapped files the stacks point into.
    modules: Modules,
    /// `module` and `raw_stack` lines not yet written, in definition order.
    pending: Vec<Event>,
}

impl RawStacks {
    /// The stack id of a raw stack (interned: the same addresses get the same id). No
    /// symbolization: one hash lookup; for a stack not seen before, one allocation and its
    /// `raw_stack` line queued (each address looked up in the module map).
    pub(super) fn intern(&mut self, ips: &[usize]) -> u64 {
        if let Some(&id) = self.ids.get(ips) {
            return id;
        }
        let id = NEXT_STACK.fetch_add(1, Ordering::Relaxed);
        self.ids.insert(ips.into(), id);
        let frames = ips
            .iter()
            .map(|&ip| self.modules.locate(ip, &mut self.pending))
            .collect();
        self.pending
            .push(Event::RawStack(RawStackEvent { id, frames }));
        id
    }

    /// The `module` and `raw_stack` lines queued since the last call (each module before the
    /// first stack naming it). A recorded step ends with it: an address in no known mapping
    /// may read the process's map again.
    pub(super) fn take_raw(&mut self) -> Vec<Event> {
        self.modules.step_ended();
        std::mem::take(&mut self.pending)
    }

    /// No raw stack interned.
    pub(super) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Symbolizes every raw stack, in id order: the `frame` events (each before the first
    /// stack naming it) and one `stack` event per raw stack, under its id. Afterwards the
    /// symbolizer's caches (the binaries' parsed debug information) are given back.
    pub(super) fn resolve(self) -> Vec<Event> {
        let mut raw: Vec<(u64, Box<[usize]>)> =
            self.ids.into_iter().map(|(ips, id)| (id, ips)).collect();
        raw.sort_unstable_by_key(|&(id, _)| id);
        let mut symbols = Symbols::default();
        for (id, ips) in raw {
            symbols.stack(id, &ips);
        }
        let events = symbols.take_pending();
        drop(symbols);
        backtrace::clear_symbol_cache();
        events
    }
}

/// Interns frames and queues the `frame` / `stack` events not yet written.
#[derive(Debug, Default)]
struct Symbols {
    /// The signal handler's own function as this binary's debug info names it (resolved from
    /// its address once): with line tables only (`debug = "line-tables-only"`, what release
    /// builds here use) a function is named without its path (`on_sigprof`), so the name
    /// alone does not find it. `Some(None)` when it resolves to nothing known.
    #[allow(
        clippy::option_option,
        reason = "not resolved yet (None) against resolved to nothing known (Some(None))"
    )]
    handler_fn: Option<Option<(String, Option<String>)>>,
    by_ip: FastMap<usize, IpInfo>,
    frames: FastMap<(String, Option<String>, bool), u64>,
    /// Definitions not yet written, in definition order.
    pending: Vec<Event>,
    /// The frames of the stack being interned (kept between samples: no allocation per
    /// sample once a stack's depth was seen).
    scratch: Vec<u64>,
}

/// What `ip` resolves to: innermost (inlined) function first, the containing function last;
/// demangled names without their hash, shortened paths.
fn resolved(ip: usize) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
        let func = sym
            .name()
            .map_or_else(|| "[unknown]".to_string(), |n| format!("{n:#}"));
        let file = sym
            .filename()
            .map(|f| trace_record::schema::short_source_path(&f.to_string_lossy()));
        found.push((func, file));
    });
    found
}

impl Symbols {
    fn intern_frame(&mut self, func: String, file: Option<String>, inlined: bool) -> u64 {
        let key = (func, file, inlined);
        if let Some(&id) = self.frames.get(&key) {
            return id;
        }
        let next = NEXT_FRAME.fetch_add(1, Ordering::Relaxed);
        let (func, file, inlined) = key.clone();
        self.frames.insert(key, next);
        self.pending.push(Event::Frame(FrameEvent {
            id: next,
            func,
            file,
            inlined,
        }));
        next
    }

    fn resolve(&mut self, ip: usize) -> &IpInfo {
        if !self.by_ip.contains_key(&ip) {
            let handler_fn = self
                .handler_fn
                .get_or_insert_with(|| {
                    // The first instruction: the containing function itself, nothing inlined
                    // (one byte on: `resolve` looks up the byte before an address, as the
                    // call instruction before a return address).
                    let found = resolved(crate::signal::handler_address() + 1);
                    found.into_iter().last().filter(|(f, _)| f != "[unknown]")
                })
                .clone();
            let mut found = resolved(ip);
            if found.is_empty() {
                found.push(("[unknown]".to_string(), None));
            }
            let handler = found.iter().any(|frame| {
                let (f, _) = frame;
                f.contains("trace_sampler::signal::on_sigprof")
                    || f.starts_with("backtrace::")
                    || handler_fn.as_ref() == Some(frame)
            });
            let trampoline = found
                .iter()
                .all(|(f, _)| f == "__restore_rt" || f == "[unknown]");
            let last = found.len() - 1;
            let mut frames = Vec::with_capacity(found.len());
            for (i, (func, file)) in found.into_iter().enumerate().rev() {
                frames.push(self.intern_frame(func, file, i != last));
            }
            self.by_ip.insert(
                ip,
                IpInfo {
                    frames,
                    handler,
                    trampoline,
                },
            );
        }
        &self.by_ip[&ip]
    }

    /// Defines stack `id` as raw stack `ips` symbolized (instruction pointers, innermost
    /// first, starting inside the signal handler): the handler's own frames and the signal
    /// trampoline are cut off.
    fn stack(&mut self, id: u64, ips: &[usize]) {
        let mut start = 0;
        for (i, &ip) in ips.iter().enumerate().take(16) {
            if self.resolve(ip).handler {
                start = i + 1;
            }
        }
        // The signal trampoline (`__restore_rt`, unnamed where libc has no symbols) sits
        // between the handler and the interrupted function.
        if start > 0
            && let Some(&ip) = ips.get(start)
            && self.resolve(ip).trampoline
        {
            start += 1;
        }
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        // Every kept address but the interrupted one is a return address, looked up at the
        // byte before it (the call). The interrupted one (first after the handler and the
        // trampoline) is the exact instruction the signal stopped at: looked up at the byte
        // before, a sample taken at a function's first instruction would land in the padding
        // before it (`[unknown]`) or in the function before it in the binary.
        let interrupted = (start > 0).then_some(start);
        for (i, &ip) in ips.iter().enumerate().skip(start).rev() {
            let lookup = if interrupted == Some(i) {
                ip.saturating_add(1)
            } else {
                ip
            };
            frames.extend_from_slice(&self.resolve(lookup).frames);
        }
        self.pending.push(Event::Stack(StackEvent {
            id,
            frames: frames.clone(),
        }));
        self.scratch = frames;
    }

    /// The `frame` and `stack` events defined since the last call.
    fn take_pending(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> Vec<usize> {
        let mut ips = Vec::new();
        backtrace::trace(|f| {
            ips.push(f.ip() as usize);
            true
        });
        ips
    }

    #[test]
    fn a_stack_is_interned_once_and_symbolized_demangled_when_resolved() {
        let mut s = RawStacks::default();
        let ips = here();
        let a = s.intern(&ips);
        let b = s.intern(&ips);
        assert_eq!(a, b);
        let other = s.intern(&ips[1..]);
        assert_ne!(a, other);
        assert!(!s.is_empty());
        let pending = s.resolve();
        let names: Vec<&str> = pending
            .iter()
            .filter_map(|e| match e {
                Event::Frame(f) => Some(f.func.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.ends_with("sampler::symbols::tests::here")),
            "{names:?}"
        );
        // Demangled without the hash suffix (`::h` and 16 hex digits).
        let hashed = |n: &str| {
            n.rsplit_once("::h")
                .is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        };
        assert!(names.iter().all(|n| !hashed(n)), "{names:?}");
        // One `stack` line per raw stack, under its id, in id order.
        let stacks: Vec<u64> = pending
            .iter()
            .filter_map(|e| match e {
                Event::Stack(st) => Some(st.id),
                _ => None,
            })
            .collect();
        assert_eq!(stacks, vec![a, other]);
        // Frames come before the stack naming them, and each is defined once.
        let mut defined = std::collections::HashSet::new();
        for e in &pending {
            match e {
                Event::Frame(f) => assert!(defined.insert(f.id), "frame {} twice", f.id),
                Event::Stack(st) => {
                    assert!(st.frames.iter().all(|f| defined.contains(f)), "{st:?}");
                }
                _ => panic!("only frames and stacks: {e:?}"),
            }
        }
    }
}
