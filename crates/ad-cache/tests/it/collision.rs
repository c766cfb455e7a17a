//! Collision safety: unequal keys forced onto one fingerprint never see each other's value.

use std::sync::Arc;

use ad_cache::Cache;

use crate::common::{Blob, ForcedKey};

#[test]
fn a_fingerprint_match_with_another_key_is_a_counted_miss() {
    let cache: Cache<ForcedKey, Blob> = Cache::new();
    let a = ForcedKey {
        fingerprint: 7,
        id: 1,
    };
    let b = ForcedKey {
        fingerprint: 7,
        id: 2,
    };
    cache.insert(a.clone(), Blob { id: 100, weight: 0 });
    assert!(cache.get(&b).is_none(), "b must not see a's value");
    assert!(!cache.contains(&b));
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.collisions), (0, 1, 1));

    // Computing b displaces a (one entry per fingerprint) and returns b's own value.
    let got = cache.get_or_insert_with(b.clone(), || Ok::<_, ()>(Blob { id: 200, weight: 0 }));
    assert_eq!(got.unwrap().id, 200);
    assert_eq!(cache.get(&b).unwrap().id, 200);
    assert!(cache.get(&a).is_none(), "a's slot was taken by b");
    let s = cache.stats();
    // get(b); the miss of get_or_insert_with(b); the insert displacing a; get(a).
    assert_eq!(s.collisions, 4);
    assert_eq!(s.evictions, 1);
    assert_eq!(s.entries, 1);
    assert!(cache.remove(&a).is_none());
    assert_eq!(cache.len(), 1);
}

#[test]
fn a_colliding_key_waiting_on_another_keys_flight_gets_its_own_value() {
    use std::sync::mpsc;
    let cache: Arc<Cache<ForcedKey, Blob>> = Arc::new(Cache::new());
    let a = ForcedKey {
        fingerprint: 9,
        id: 1,
    };
    let b = ForcedKey {
        fingerprint: 9,
        id: 2,
    };
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let leader = {
        let cache = Arc::clone(&cache);
        std::thread::spawn(move || {
            cache
                .get_or_insert_with(a, || {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    Ok::<_, std::convert::Infallible>(Blob { id: 1, weight: 0 })
                })
                .unwrap()
        })
    };
    started_rx.recv().unwrap();
    let other = {
        let cache = Arc::clone(&cache);
        std::thread::spawn(move || {
            cache
                .get_or_insert_with(b, || {
                    Ok::<_, std::convert::Infallible>(Blob { id: 2, weight: 0 })
                })
                .unwrap()
        })
    };
    // Whether the second caller is already waiting on the first flight or not, it must
    // end up with its own key's value.
    std::thread::sleep(std::time::Duration::from_millis(20));
    release_tx.send(()).unwrap();
    assert_eq!(leader.join().unwrap().id, 1);
    assert_eq!(other.join().unwrap().id, 2);
}
