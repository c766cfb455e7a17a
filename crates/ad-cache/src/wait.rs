//! The process-wide wait-for graph of single-flight computations, and `FlightContext`.
//!
//! Every computation a cache runs for a missing key (a *flight*) has a leader: the thread
//! that runs it, or the computation that thread acts for (see [`FlightContext`]). A request
//! that finds another leader's flight for its key waits for it; before it does, it records
//! the edge "this actor waits for that flight" here and follows the edges from the flight's
//! leader. Reaching itself means the wait would close a cycle (each computation waiting for
//! the next): that request fails with [`CacheError::WaitCycle`](crate::CacheError::WaitCycle)
//! instead, and every other request of the cycle proceeds. The graph is shared by all caches
//! of the process, so cycles through several caches are found too.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

/// Who leads or waits: a thread, or the thread whose computation it works for.
pub(crate) type Actor = ThreadId;

thread_local! {
    /// The computation this thread works for, when it entered a [`FlightContext`].
    static ACTING_FOR: Cell<Option<ThreadId>> = const { Cell::new(None) };
    /// The flights this thread is computing, innermost last.
    static LEADING: RefCell<Vec<Arc<FlightMark>>> = const { RefCell::new(Vec::new()) };
}

/// Notes that the current thread runs `mark`'s computation until [`end_leading`].
pub(crate) fn begin_leading(mark: &Arc<FlightMark>) {
    let _ = LEADING.try_with(|l| l.borrow_mut().push(Arc::clone(mark)));
}

/// Notes that the current thread's innermost computation returned.
pub(crate) fn end_leading() {
    let _ = LEADING.try_with(|l| l.borrow_mut().pop());
}

/// A request made from inside computations was refused (re-entrant, cycle, time limit):
/// marks every computation the current thread runs, and `also`, as *broken*. When a broken
/// computation fails, its waiters retry with their own computations instead of receiving
/// its error: the failure is likely that refusal, passed on with `?`, not an answer for the
/// key.
pub(crate) fn note_refused(also: Option<&Arc<FlightMark>>) {
    let _ = LEADING.try_with(|l| {
        for m in l.borrow().iter() {
            m.broken.store(true, Ordering::Release);
        }
    });
    if let Some(m) = also {
        m.broken.store(true, Ordering::Release);
    }
}

/// The actor of the current thread.
pub(crate) fn current_actor() -> Actor {
    ACTING_FOR
        .try_with(Cell::get)
        .ok()
        .flatten()
        .unwrap_or_else(|| thread::current().id())
}

/// The identity of the computations the current thread runs, to hand to worker threads
/// that one of those computations *waits for* (a scoped thread it joins, a `rayon::join`
/// or `scope` task).
///
/// A worker is a different thread, so without this the cache cannot know that the
/// computation it would wait for is itself blocked on the worker: a worker asking for the
/// key its parent computation is computing waits until the cache's
/// [`wait_limit`](crate::Cache::wait_limit) (default 10 s) and fails with
/// [`CacheError::Timeout`](crate::CacheError::Timeout) (or, through
/// [`Cache::get_or_compute`](crate::Cache::get_or_compute), computes without the cache). A
/// worker that runs inside [`enter`](FlightContext::enter) acts for the parent: such a
/// request fails at once with [`CacheError::Reentrant`](crate::CacheError::Reentrant), and
/// a cycle through the worker's waits is found as for the parent's own.
///
/// Enter it only for work the computation waits for: a detached thread that acts for a
/// computation which goes on without it gets `Reentrant` errors it should not.
///
/// ```
/// use std::convert::Infallible;
/// use ad_cache::{Cache, CacheError, FlightContext};
///
/// let cache: Cache<u64, u64> = Cache::new();
/// let r = cache.get_or_insert_with(1, || {
///     let ctx = FlightContext::current();
///     // The computation joins a worker that asks for the key being computed.
///     let inner = std::thread::scope(|s| {
///         s.spawn(|| ctx.enter(|| cache.get_or_insert_with(1, || Ok::<_, Infallible>(0))))
///             .join()
///     });
///     assert!(matches!(inner, Ok(Err(CacheError::Reentrant { .. }))));
///     Ok::<_, Infallible>(42)
/// });
/// assert_eq!(*r.unwrap(), 42);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlightContext {
    actor: Actor,
}

impl FlightContext {
    /// The context of the current thread (the one it entered, if any, else its own).
    pub fn current() -> Self {
        FlightContext {
            actor: current_actor(),
        }
    }

    /// Runs `f` on the current thread acting for this context's computations, then
    /// restores the thread's own identity (also when `f` panics).
    pub fn enter<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<ThreadId>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = ACTING_FOR.try_with(|a| a.set(self.0));
            }
        }
        let previous = ACTING_FOR
            .try_with(|a| a.replace(Some(self.actor)))
            .ok()
            .flatten();
        let _restore = Restore(previous);
        f()
    }
}

/// A flight as the wait-for graph sees it: its leader, and whether it has finished.
#[derive(Debug)]
pub(crate) struct FlightMark {
    leader: Actor,
    done: AtomicBool,
    /// A request made from inside the computation was refused (see [`note_refused`]).
    broken: AtomicBool,
}

impl FlightMark {
    /// A running flight led by the current actor.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(FlightMark {
            leader: current_actor(),
            done: AtomicBool::new(false),
            broken: AtomicBool::new(false),
        })
    }

    /// The flight's leader.
    pub(crate) fn leader(&self) -> Actor {
        self.leader
    }

    /// Marks the flight finished: nobody waiting for it is blocked by it any longer.
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }

    /// Whether a request from inside the computation was refused.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// Edges "actor waits for flight", several per actor when threads act for one computation.
static WAITS: LazyLock<Mutex<HashMap<Actor, Vec<Arc<FlightMark>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn waits() -> MutexGuard<'static, HashMap<Actor, Vec<Arc<FlightMark>>>> {
    WAITS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A recorded wait; dropping it removes the edge.
pub(crate) struct WaitEdge {
    actor: Actor,
    mark: Arc<FlightMark>,
}

impl Drop for WaitEdge {
    fn drop(&mut self) {
        let mut w = waits();
        if let Some(list) = w.get_mut(&self.actor) {
            if let Some(i) = list.iter().position(|m| Arc::ptr_eq(m, &self.mark)) {
                list.swap_remove(i);
            }
            if list.is_empty() {
                w.remove(&self.actor);
            }
        }
    }
}

/// Records that the current actor is about to wait for `mark`'s flight, or returns the
/// number of computations in the cycle that wait would close (the current one included).
pub(crate) fn begin_wait(mark: &Arc<FlightMark>) -> Result<WaitEdge, usize> {
    let me = current_actor();
    let mut w = waits();
    if !mark.is_done() {
        // Depth-first over unfinished flights from the flight's leader: each step goes from
        // an actor to the leader of a flight it waits for.
        let mut stack = vec![(mark.leader, 1usize)];
        let mut seen: Vec<Actor> = Vec::new();
        while let Some((actor, depth)) = stack.pop() {
            if actor == me {
                return Err(depth);
            }
            if seen.contains(&actor) {
                continue;
            }
            seen.push(actor);
            if let Some(list) = w.get(&actor) {
                for m in list.iter().filter(|m| !m.is_done()) {
                    stack.push((m.leader, depth + 1));
                }
            }
        }
    }
    w.entry(me).or_default().push(Arc::clone(mark));
    Ok(WaitEdge {
        actor: me,
        mark: Arc::clone(mark),
    })
}
