//! Waits on other threads' computations cannot hang: cycles, timeouts, workers a computation joins.
//!
//! Every scenario runs on its own thread and the test waits for it with a timeout, so a
//! regression fails the test instead of hanging it.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use ad_cache::{Cache, CacheError, CacheKey, FlightContext};

/// Runs `scenario` on a thread and returns its result, failing if it takes over 20 s.
fn within_time_limit<T: Send + 'static>(scenario: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(scenario());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("the scenario hung (no result in 20 s)"),
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
    started.recv_timeout(Duration::from_secs(20)).unwrap();
    let limit = Duration::from_millis(50);
    let waiter = {
        let cache = Arc::clone(&cache);
        within_time_limit(move || cache.get_or_insert_with_timeout(9, limit, || Ok::<_, String>(0)))
    };
    match waiter {
        Err(CacheError::Timeout {
            fingerprint,
            waited,
        }) => {
            assert_eq!(fingerprint, 9u64.fingerprint());
            assert!(waited >= limit, "waited {waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
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
    let (inner, outer) = within_time_limit({
        let cache = Arc::clone(&cache);
        move || {
            let mut inner = None;
            let outer = cache.get_or_insert_with(13, || {
                inner = Some(thread::scope(|s| {
                    s.spawn(|| {
                        cache.get_or_insert_with_timeout(13, Duration::from_millis(30), || {
                            Ok::<_, String>(0)
                        })
                    })
                    .join()
                    .unwrap()
                    .map(|v| *v)
                }));
                Ok::<_, String>(130)
            });
            (inner, outer.map(|v| *v))
        }
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
            let barrier = Arc::new(Barrier::new(6));
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    let cache = Arc::clone(&cache);
                    let barrier = Arc::clone(&barrier);
                    thread::spawn(move || {
                        barrier.wait();
                        cache
                            .get_or_insert_with(21, || {
                                thread::sleep(Duration::from_millis(20));
                                Ok::<_, String>(210)
                            })
                            .map(|v| *v)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        }
    });
    assert!(values.iter().all(|v| *v == Ok(210)), "{values:?}");
    assert_eq!(cache.stats().inserts, 1);
}
