//! The `RetainedBytes` trait: a deep, logical estimate of the bytes a cache entry keeps alive.

use std::sync::Arc;

/// A deep, logical estimate of what a value keeps alive.
///
/// # The rule
///
/// [`RetainedBytes::retained_bytes`] is the value's inline size ([`std::mem::size_of_val`]) plus
/// [`RetainedBytes::heap_bytes`], the heap memory the value *owns*: a `Vec`'s whole capacity, a
/// `String`'s capacity, a `Box`'s pointee, recursively. It is a logical estimate (allocator
/// headers and padding of the heap blocks are not counted), not process RSS. All arithmetic
/// saturates at `u64::MAX`.
///
/// Shared ownership is charged only when the value is its sole owner: an [`Arc`] is charged in
/// full (pointee, its heap, and the two reference counts) when the value holds the only strong
/// reference and there is no weak one; otherwise it is charged nothing beyond its pointer,
/// because whoever else holds it keeps it alive whether or not the cache does. The test runs
/// once, when the cache computes the entry's size at insert; later changes of the reference
/// counts do not re-price an entry.
pub trait RetainedBytes {
    /// True when values of this type own no heap memory at all, so containers can skip
    /// walking their elements. Leave it `false` unless [`heap_bytes`](Self::heap_bytes) is
    /// always zero.
    const HEAP_FREE: bool = false;

    /// Bytes of heap memory owned by this value, beyond its inline size.
    fn heap_bytes(&self) -> u64;

    /// Inline size plus [`heap_bytes`](Self::heap_bytes), saturating.
    fn retained_bytes(&self) -> u64 {
        (std::mem::size_of_val(self) as u64).saturating_add(self.heap_bytes())
    }
}

macro_rules! heap_free {
    ($($t:ty),* $(,)?) => {$(
        impl RetainedBytes for $t {
            const HEAP_FREE: bool = true;
            fn heap_bytes(&self) -> u64 {
                0
            }
        }
    )*};
}

heap_free!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    std::num::NonZeroUsize,
    std::num::NonZeroU64,
);

/// Saturating `count * size` as `u64`.
fn mul_bytes(count: usize, size: usize) -> u64 {
    (count as u64).saturating_mul(size as u64)
}

impl<T: RetainedBytes> RetainedBytes for [T] {
    const HEAP_FREE: bool = T::HEAP_FREE;
    fn heap_bytes(&self) -> u64 {
        if T::HEAP_FREE {
            return 0;
        }
        self.iter()
            .fold(0u64, |acc, x| acc.saturating_add(x.heap_bytes()))
    }
}

impl<T: RetainedBytes, const N: usize> RetainedBytes for [T; N] {
    const HEAP_FREE: bool = T::HEAP_FREE;
    fn heap_bytes(&self) -> u64 {
        self.as_slice().heap_bytes()
    }
}

impl RetainedBytes for str {
    const HEAP_FREE: bool = true;
    fn heap_bytes(&self) -> u64 {
        0
    }
}

impl<T: RetainedBytes> RetainedBytes for Vec<T> {
    fn heap_bytes(&self) -> u64 {
        mul_bytes(self.capacity(), std::mem::size_of::<T>())
            .saturating_add(self.as_slice().heap_bytes())
    }
}

impl RetainedBytes for String {
    fn heap_bytes(&self) -> u64 {
        self.capacity() as u64
    }
}

impl<T: RetainedBytes + ?Sized> RetainedBytes for Box<T> {
    fn heap_bytes(&self) -> u64 {
        let inner: &T = self;
        inner.retained_bytes()
    }
}

impl<T: RetainedBytes + ?Sized> RetainedBytes for Arc<T> {
    /// The pointee, its heap and the two counts when this is the sole owner; else zero.
    fn heap_bytes(&self) -> u64 {
        if Arc::strong_count(self) == 1 && Arc::weak_count(self) == 0 {
            let inner: &T = self;
            inner
                .retained_bytes()
                .saturating_add(2 * std::mem::size_of::<usize>() as u64)
        } else {
            0
        }
    }
}

impl<T: RetainedBytes> RetainedBytes for Option<T> {
    const HEAP_FREE: bool = T::HEAP_FREE;
    fn heap_bytes(&self) -> u64 {
        self.as_ref().map_or(0, T::heap_bytes)
    }
}

impl<A: RetainedBytes, B: RetainedBytes> RetainedBytes for (A, B) {
    const HEAP_FREE: bool = A::HEAP_FREE && B::HEAP_FREE;
    fn heap_bytes(&self) -> u64 {
        self.0.heap_bytes().saturating_add(self.1.heap_bytes())
    }
}

impl<A: RetainedBytes, B: RetainedBytes, C: RetainedBytes> RetainedBytes for (A, B, C) {
    const HEAP_FREE: bool = A::HEAP_FREE && B::HEAP_FREE && C::HEAP_FREE;
    fn heap_bytes(&self) -> u64 {
        self.0
            .heap_bytes()
            .saturating_add(self.1.heap_bytes())
            .saturating_add(self.2.heap_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_are_their_size() {
        assert_eq!(7u64.retained_bytes(), 8);
        assert_eq!(1.5f64.retained_bytes(), 8);
        assert_eq!(true.retained_bytes(), 1);
    }

    #[test]
    fn vec_counts_capacity_and_element_heap() {
        let v: Vec<u32> = Vec::with_capacity(10);
        assert_eq!(v.heap_bytes(), 40);
        let nested = vec![String::with_capacity(5), String::with_capacity(7)];
        let expect = (nested.capacity() * std::mem::size_of::<String>()) as u64 + 12;
        assert_eq!(nested.heap_bytes(), expect);
    }

    #[test]
    fn box_and_slices() {
        let b: Box<[u16]> = vec![1u16, 2, 3].into_boxed_slice();
        assert_eq!(b.heap_bytes(), 6);
        let s: Box<str> = "hello".into();
        assert_eq!(s.heap_bytes(), 5);
    }

    #[test]
    fn shared_arc_is_not_charged() {
        let a = Arc::new(vec![0u8; 100]);
        let sole = a.heap_bytes();
        assert!(sole >= 100 + 24);
        let other = Arc::clone(&a);
        assert_eq!(a.heap_bytes(), 0);
        drop(other);
        assert_eq!(a.heap_bytes(), sole);
    }

    #[test]
    fn saturates() {
        assert_eq!(mul_bytes(usize::MAX, usize::MAX), u64::MAX);
    }
}
