//! Waits on other threads' computations cannot hang: cycles, timeouts, workers a computation joins.
//!
//! Every scenario runs on its own thread and the test waits for it with a timeout, so a
//! regression fails the test instead of hanging it.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use ad_cache::{Cache, CacheError, CacheKey, DEFAULT_WAIT_LIMIT, FlightContext};

/// Runs `scenario` on a thread and returns its result, failing if it takes over 60 s (a
/// hang detector well above the cache's 10 s default wait limit, not a speed threshold).
fn within_time_limit<T: Send + 'static>(scenario: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(scenario());
    });
    match rx.recv_timeout(Duration::from_mins(1)) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("the scenario hung (no result in 60 s)"),
        Err(RecvTimeoutError::Disconnected) => panic!("the scenario panicked"),
    }
}

type Outcome = Result<u64, CacheError<String>>;

/// `keys.len()` threads; thread `i` computes `keys[i]` and, once every thread is inside its
/// computation, asks `caches[i]` for `keys[(i + 1) % n]` in `next[i]`. Returns each thread's
/// inner outcome and outer value.
fn ring(caches: Vec<Arc<Cache<u64, u64>>>, keys: Vec<u64>) -> Vec<(Outcome, u64)> {
    let n = keys.len();
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let own = Arc::clone(&caches[i]);
            let next = Arc::clone(&caches[(i + 1) % n]);
            let (key, wanted) = (keys[i], keys[(i + 1) % n]);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let mut inner = None;
                let outer = own.get_or_insert_with(key, || {
                    barrier.wait();
                    inner = Some(
                        next.get_or_insert_with(wanted, || Ok::<_, String>(wanted * 1000))
                            .map(|v| *v),
                    );
                    Ok::<_, String>(key * 10)
                });
                (
                    inner.unwrap_or_else(|| Err(CacheError::Compute("no inner".into()))),
                    *outer.unwrap(),
                )
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn check_ring(results: &[(Outcome, u64)], keys: &[u64]) {
    let n = keys.len();
    let cycles: Vec<_> = results
        .iter()
        .filter_map(|(inner, _)| match inner {
            Err(CacheError::WaitCycle { computations, .. }) => Some(*computations),
            _ => None,
        })
        .collect();
    assert_eq!(
        cycles,
        vec![n],
        "exactly one request closes the cycle: {results:?}"
    );
    for (i, (inner, outer)) in results.iter().enumerate() {
        assert_eq!(*outer, keys[i] * 10, "every computation finished");
        match inner {
            // The others waited and got the value their neighbour computed.
            Ok(v) => assert_eq!(*v, keys[(i + 1) % n] * 10),
            Err(CacheError::WaitCycle { fingerprint, .. }) => {
                assert_eq!(*fingerprint, keys[(i + 1) % n].fingerprint());
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// Asserts that `outcome` is a `Timeout` for `key` after waiting `limit` or longer; `context`
/// starts the message when it is something else.
fn assert_timed_out<T: std::fmt::Debug>(
    outcome: &Result<T, CacheError<String>>,
    key: u64,
    limit: Duration,
    context: &str,
) {
    match outcome {
        Err(CacheError::Timeout {
            fingerprint,
            waited,
        }) => {
            assert_eq!(*fingerprint, key.fingerprint());
            assert!(*waited >= limit, "waited {waited:?}");
        }
        other => panic!("{context}expected a timeout, got {other:?}"),
    }
}

/// Runs `work(i, barrier)` on threads `i` in `0..n` at once, all sharing one barrier of `n`;
/// returns their results in the order of `i`.
fn on_threads<T: Send>(n: usize, work: impl Fn(usize, &Barrier) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (work, barrier) = (&work, &barrier);
                s.spawn(move || work(i, barrier))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Computes `key` (value `value`) on a scenario thread; inside that computation a scoped
/// worker thread, with no `FlightContext`, runs `worker` on the cache and is joined. Returns
/// the worker's result (`None` if the computation never ran) and the outer request's.
fn with_joined_worker<T: Send + 'static>(
    cache: &Arc<Cache<u64, u64>>,
    key: u64,
    value: u64,
    worker: impl FnOnce(&Cache<u64, u64>) -> T + Send + 'static,
) -> (Option<T>, Outcome) {
    let cache = Arc::clone(cache);
    within_time_limit(move || {
        let mut inner = None;
        let outer = cache.get_or_insert_with(key, || {
            inner = Some(thread::scope(|s| {
                s.spawn(|| worker(&cache)).join().unwrap()
            }));
            Ok::<_, String>(value)
        });
        (inner, outer.map(|v| *v))
    })
}

/// A cache request (`get_or_insert_with` or `get_or_compute`), so one scenario runs through
/// either; the computation is `&mut dyn FnMut` since generic methods cannot be passed as
/// values.
type Request = fn(
    &Cache<u64, u64>,
    u64,
    &mut dyn FnMut() -> Result<u64, String>,
) -> Result<Arc<u64>, CacheError<String>>;

/// Two threads on `cache`: thread `i` requests `keys[i]` with `request`, and inside its
/// computation, once both threads are inside theirs, requests the other key with `request`
/// too (computing `wanted * 1000`, the error as a string through `?`); its own value is
/// `key * 10` plus the other's. Returns each thread's outcome, in the order of `keys`.
fn cross_requests(cache: &Arc<Cache<u64, u64>>, keys: [u64; 2], request: Request) -> Vec<Outcome> {
    let cache = Arc::clone(cache);
    within_time_limit(move || {
        on_threads(2, |i, barrier| {
            let (key, wanted) = (keys[i], keys[1 - i]);
            request(&cache, key, &mut || {
                barrier.wait();
                let other = request(&cache, wanted, &mut || Ok(wanted * 1000))
                    .map_err(|e| e.to_string())?;
                Ok(key * 10 + *other)
            })
            .map(|v| *v)
        })
    })
}

#[test]
fn two_threads_waiting_for_each_other_get_one_wait_cycle() {
    let cache = Arc::new(Cache::new());
    let results = within_time_limit({
        let cache = Arc::clone(&cache);
        move || ring(vec![Arc::clone(&cache), cache], vec![1, 2])
    });
    check_ring(&results, &[1, 2]);
    assert_eq!(cache.len(), 2, "both computations stored their values");
}

#[test]
fn a_cycle_of_three_is_found() {
    let cache = Arc::new(Cache::new());
    let results = within_time_limit(move || {
        ring(
            vec![Arc::clone(&cache), Arc::clone(&cache), cache],
            vec![3, 4, 5],
        )
    });
    check_ring(&results, &[3, 4, 5]);
}

#[test]
fn a_cycle_through_two_caches_is_found() {
    let (x, y) = (Arc::new(Cache::new()), Arc::new(Cache::new()));
    let results = within_time_limit(move || ring(vec![x, y], vec![6, 7]));
    check_ring(&results, &[6, 7]);
}

#[test]
fn a_wait_with_a_timeout_gives_up_and_the_computation_still_stores_its_value() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    let (release, blocked) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    let leader = {
        let cache = Arc::clone(&cache);
        thread::spawn(move || {
            cache.get_or_insert_with(9, || {
                let _ = started_tx.send(());
                let _ = blocked.recv_timeout(Duration::from_secs(20));
                Ok::<_, String>(90)
            })
        })
    };
    started.recv().unwrap();
    let limit = Duration::from_millis(50);
    let waiter = {
        let cache = Arc::clone(&cache);
        within_time_limit(move || cache.get_or_insert_with_timeout(9, limit, || Ok::<_, String>(0)))
    };
    assert_timed_out(&waiter, 9, limit, "");
    release.send(()).unwrap();
    assert_eq!(*leader.join().unwrap().unwrap(), 90);
    // The next request hits the value the slow computation stored.
    let again = cache.get_or_insert_with_timeout(9, limit, || Ok::<_, String>(0));
    assert_eq!(*again.unwrap(), 90);
    let s = cache.stats();
    assert_eq!((s.misses, s.hits), (2, 1));
}

#[test]
fn a_worker_joined_by_the_computation_is_reentrant_in_its_context() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    let (inner, outer) = within_time_limit({
        let cache = Arc::clone(&cache);
        move || {
            let mut inner = None;
            let outer = cache.get_or_insert_with(11, || {
                let ctx = FlightContext::current();
                inner = Some(thread::scope(|s| {
                    s.spawn(|| {
                        ctx.enter(|| {
                            // The same key: re-entrant. Another key: computed as usual.
                            let same = cache.get_or_insert_with(11, || Ok::<_, String>(0));
                            let other = cache.get_or_insert_with(12, || Ok::<_, String>(120));
                            (same.map(|v| *v), other.map(|v| *v))
                        })
                    })
                    .join()
                    .unwrap()
                }));
                Ok::<_, String>(110)
            });
            (inner, outer.map(|v| *v))
        }
    });
    let (same, other) = inner.unwrap();
    assert_eq!(
        same,
        Err(CacheError::Reentrant {
            fingerprint: 11u64.fingerprint()
        })
    );
    assert_eq!(other, Ok(120));
    assert_eq!(outer, Ok(110));
    // Outside the context the worker's thread is itself again.
    assert_eq!(FlightContext::current(), FlightContext::current());
}

#[test]
fn a_worker_without_the_context_is_bounded_by_its_timeout() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    let (inner, outer) = with_joined_worker(&cache, 13, 130, |cache| {
        cache
            .get_or_insert_with_timeout(13, Duration::from_millis(30), || Ok::<_, String>(0))
            .map(|v| *v)
    });
    assert!(
        matches!(inner, Some(Err(CacheError::Timeout { .. }))),
        "{inner:?}"
    );
    assert_eq!(outer, Ok(130));
}

#[test]
fn many_waiters_on_one_computation_are_no_cycle() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    let values = within_time_limit({
        let cache = Arc::clone(&cache);
        move || {
            on_threads(6, |_, barrier| {
                barrier.wait();
                cache
                    .get_or_insert_with(21, || {
                        thread::sleep(Duration::from_millis(20));
                        Ok::<_, String>(210)
                    })
                    .map(|v| *v)
            })
        }
    });
    assert!(values.iter().all(|v| *v == Ok(210)), "{values:?}");
    assert_eq!(cache.stats().inserts, 1);
}

/// The shape of a stolen `rayon::join` closure with a scoped std thread as the worker (the
/// real pool is below): the computation of a key joins a worker that asks for the same key
/// with plain `get_or_insert_with`, no `FlightContext`. The worker's wait ends at the
/// cache's default wait limit.
#[test]
fn a_joined_worker_asking_for_the_same_key_returns_within_the_default_limit() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    assert_eq!(cache.wait_limit(), Some(DEFAULT_WAIT_LIMIT));
    let (inner, outer) = with_joined_worker(&cache, 21, 210, |cache| {
        cache
            .get_or_insert_with(21, || Ok::<_, String>(0))
            .map(|v| *v)
    });
    match inner {
        Some(Err(CacheError::Timeout { waited, .. })) => assert!(waited >= DEFAULT_WAIT_LIMIT),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(outer, Ok(210));
    assert_eq!(cache.get(&21).as_deref(), Some(&210));
}

/// The real thing: on a rayon pool of 2 threads, the computation of a key does `rayon::join`
/// and the second closure asks for that key with plain `get_or_insert_with`. Whichever
/// thread runs the closure, the request returns and the computation is cached: run by the
/// computing thread itself (not stolen, or popped back), it is a request from inside the
/// key's own computation and fails at once with `Reentrant`; stolen by the other worker, it
/// waits for a computation that waits for it, which the cache cannot see, and fails with
/// `Timeout` at the default wait limit. Two rounds: in the first the joined closure can only
/// be stolen (the first closure waits until the second has started), in the second the
/// first closure returns at once and the pool decides.
#[test]
fn a_rayon_join_closure_asking_for_the_key_being_computed_returns_stolen_or_not() {
    for must_steal in [true, false] {
        let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
        let (computing, ran_on, inner, outer) = within_time_limit({
            let cache = Arc::clone(&cache);
            move || {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let computing = thread::current().id();
                    let mut joined = None;
                    let outer = cache.get_or_insert_with(51, || {
                        let (started_tx, started) = mpsc::channel::<()>();
                        let ((), b) = rayon::join(
                            move || {
                                if must_steal {
                                    // Only the other worker can start the second closure
                                    // while this one waits (bounded, should it never start).
                                    let _ = started.recv_timeout(Duration::from_secs(20));
                                }
                            },
                            || {
                                let _ = started_tx.send(());
                                let r = cache.get_or_insert_with(51, || Ok::<_, String>(0));
                                (thread::current().id(), r.map(|v| *v))
                            },
                        );
                        joined = Some(b);
                        Ok::<_, String>(510)
                    });
                    let (ran_on, inner) = joined.unwrap();
                    (computing, ran_on, inner, outer.map(|v| *v))
                })
            }
        });
        if ran_on == computing {
            assert_eq!(
                inner,
                Err(CacheError::Reentrant {
                    fingerprint: 51u64.fingerprint()
                }),
                "run by the computing thread (must_steal: {must_steal})"
            );
        } else {
            assert_timed_out(
                &inner,
                51,
                DEFAULT_WAIT_LIMIT,
                &format!("stolen (must_steal: {must_steal}): "),
            );
        }
        assert_eq!(outer, Ok(510));
        assert_eq!(
            cache.get(&51).as_deref(),
            Some(&510),
            "the computation is cached"
        );
    }
}

/// The same shape through `get_or_compute`: the refused worker computes its value without
/// the cache, and the computation that joined it succeeds and is cached.
#[test]
fn get_or_compute_lets_a_joined_worker_compute_without_the_cache() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    cache.set_wait_limit(Some(Duration::from_millis(50)));
    let (inner, outer) = with_joined_worker(&cache, 22, 220, |cache| {
        cache.get_or_compute(22, || Ok::<_, String>(7)).map(|v| *v)
    });
    assert_eq!(inner, Some(Ok(7)), "computed by the worker, not cached");
    assert_eq!(outer, Ok(220));
    assert_eq!(cache.get(&22).as_deref(), Some(&220));
    cache.set_wait_limit(None);
    assert_eq!(cache.wait_limit(), None);
}

/// Two threads, each computing its key and asking for the other's inside with `?`: the
/// request that closes the cycle fails (and so does its computation), the other thread
/// retries the failed key with its own computation, and both values end up cached.
#[test]
fn with_question_marks_only_the_request_closing_a_cycle_fails() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    let results = cross_requests(&cache, [31, 32], |c, k, f| c.get_or_insert_with(k, f));
    let failed: Vec<usize> = (0..2).filter(|&i| results[i].is_err()).collect();
    assert_eq!(failed.len(), 1, "one request closes the cycle: {results:?}");
    let (lost, won) = if failed[0] == 0 { (31, 32) } else { (32, 31) };
    // The winner computed the loser's key with its own (inner) computation.
    assert_eq!(cache.get(&lost).as_deref(), Some(&(lost * 1000)));
    assert_eq!(cache.get(&won).as_deref(), Some(&(won * 10 + lost * 1000)));
    match &results[failed[0]] {
        Err(CacheError::Compute(msg)) => assert!(msg.contains("cycle"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

/// `get_or_compute` in the same cycle: every thread gets a value.
#[test]
fn with_get_or_compute_every_thread_of_a_cycle_gets_a_value() {
    let cache: Arc<Cache<u64, u64>> = Arc::new(Cache::new());
    let results = cross_requests(&cache, [41, 42], |c, k, f| c.get_or_compute(k, f));
    let values: Vec<u64> = results.into_iter().map(|r| r.unwrap()).collect();
    // The request closing the cycle computed the other key itself (uncached); the other
    // thread waited for the closer's value.
    let closer_0 = [41 * 10 + 42 * 1000, 42 * 10 + 41 * 10 + 42 * 1000];
    let closer_1 = [41 * 10 + 42 * 10 + 41 * 1000, 42 * 10 + 41 * 1000];
    assert!(values == closer_0 || values == closer_1, "{values:?}");
    assert_eq!(cache.get(&41).as_deref(), Some(&values[0]));
    assert_eq!(cache.get(&42).as_deref(), Some(&values[1]));
}
