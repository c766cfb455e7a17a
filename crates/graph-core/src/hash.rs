//! Stable hashing: `StableHash`, the XXH3-128 `StableHasher`, `Fingerprint`.
//!
//! Also the order-independent `UnorderedFingerprint`.
//!
//! Everything here writes a documented byte encoding (see `docs/fingerprint.md`): fixed-width
//! little-endian integers, `u64` length prefixes for variable-length data, explicit tags for enum
//! variants and `Option`. The bytes are hashed with XXH3-128 from `xxhash-rust`, so a fingerprint
//! is the same on every platform and every Rust release. Neither `std::hash::Hash` nor
//! `DefaultHasher` is involved.

use std::fmt;
use std::sync::Arc;

use xxhash_rust::xxh3::{Xxh3Default, xxh3_128};

/// A 128-bit stable fingerprint (XXH3-128 of a canonical byte encoding).
///
/// Displayed (and parsed from [`Fingerprint::from_hex`]) as 32 lowercase hex digits of the
/// `u128`, most significant first; serialized as 16 little-endian bytes.
///
/// ```
/// use graph_core::Fingerprint;
/// let a = Fingerprint::of(&("matmul", [2u64, 3]));
/// let b = Fingerprint::of(&("matmul", [2u64, 3]));
/// assert_eq!(a, b);
/// assert_eq!(Fingerprint::from_hex(&a.to_string()), Some(a));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Fingerprint(pub u128);

impl Fingerprint {
    /// The fingerprint of one value's stable encoding (no domain tag).
    pub fn of<T: StableHash + ?Sized>(value: &T) -> Fingerprint {
        let mut h = StableHasher::new();
        value.stable_hash(&mut h);
        h.finish()
    }

    /// XXH3-128 of raw bytes.
    pub fn of_bytes(bytes: &[u8]) -> Fingerprint {
        Fingerprint(xxh3_128(bytes))
    }

    /// The order-independent fingerprint of a multiset of items (for a map, items are
    /// `(key, value)` tuples): the same items in any order give the same fingerprint.
    /// See [`UnorderedFingerprint`] for the combination.
    ///
    /// ```
    /// use graph_core::Fingerprint;
    /// let a = Fingerprint::of_unordered([(1u64, "x"), (2, "y")]);
    /// let b = Fingerprint::of_unordered([(2u64, "y"), (1, "x")]);
    /// assert_eq!(a, b);
    /// ```
    pub fn of_unordered<I>(items: I) -> Fingerprint
    where
        I: IntoIterator,
        I::Item: StableHash,
    {
        let mut u = UnorderedFingerprint::new();
        for item in items {
            u.add(&item);
        }
        u.finish()
    }

    /// The 16 little-endian bytes of the fingerprint.
    pub fn to_le_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    /// The fingerprint whose little-endian bytes are `bytes`.
    pub fn from_le_bytes(bytes: [u8; 16]) -> Fingerprint {
        Fingerprint(u128::from_le_bytes(bytes))
    }

    /// Parses the 32-hex-digit form written by `Display`; `None` when malformed.
    pub fn from_hex(s: &str) -> Option<Fingerprint> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(s, 16).ok().map(Fingerprint)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({:032x})", self.0)
    }
}

/// Bytes buffered before they are fed to the streaming XXH3 state.
const CHUNK: usize = 16 * 1024;
/// Initial buffer size (grows by doubling up to `CHUNK`).
const INITIAL: usize = 128;

/// A streaming XXH3-128 hasher over the stable byte encoding.
///
/// Writes are copied into a buffer and fed to XXH3 in chunks of 16 KiB, so the many small
/// writes of a graph encoding cost a copy each rather than a hash-state update each. The
/// result equals `xxh3_128` of the concatenated bytes.
///
/// ```
/// use graph_core::{Fingerprint, StableHasher};
/// let mut h = StableHasher::new();
/// h.write_u32(7);
/// h.write_str("add");
/// let mut bytes = 7u32.to_le_bytes().to_vec();
/// bytes.extend_from_slice(&3u64.to_le_bytes());
/// bytes.extend_from_slice(b"add");
/// assert_eq!(h.finish(), Fingerprint::of_bytes(&bytes));
/// ```
#[derive(Clone)]
pub struct StableHasher {
    /// Bytes buffered so far (`sink.buf[..pos]`). Kept apart from the sink so the slow paths,
    /// which take the sink, do not stop the optimiser from keeping `pos` in a register.
    pos: usize,
    sink: Sink,
}

/// The buffer and the XXH3 state behind it.
#[derive(Clone)]
struct Sink {
    /// `buf.len()` is the room; bytes past `pos` are scratch.
    buf: Vec<u8>,
    state: Option<Box<Xxh3Default>>,
    /// Grow the buffer instead of spilling it (an encoder that keeps every byte).
    keep_all: bool,
}

impl Sink {
    /// Feeds `buf[..pos]` to the streaming state.
    fn spill(&mut self, pos: usize) {
        self.state
            .get_or_insert_with(|| Box::new(Xxh3Default::new()))
            .update(&self.buf[..pos]);
    }

    /// Makes room for `n` more bytes after `pos` (`n <= CHUNK`); returns the new position.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, pos: usize, n: usize) -> usize {
        if pos + n <= CHUNK {
            self.buf.resize(CHUNK, 0);
            pos
        } else {
            self.spill(pos);
            if self.buf.len() < n {
                self.buf.resize(CHUNK, 0);
            }
            0
        }
    }

    /// Writes `bytes` at `pos`, growing the buffer up to `CHUNK` and spilling it to the
    /// state when full; returns the new position.
    #[cold]
    #[inline(never)]
    fn write_slow(&mut self, mut pos: usize, mut bytes: &[u8]) -> usize {
        while !bytes.is_empty() {
            let room = self.buf.len() - pos;
            if room == 0 {
                if self.keep_all {
                    let len = (self.buf.len().saturating_mul(2)).max(INITIAL);
                    self.buf.resize(len, 0);
                } else if self.buf.len() < CHUNK {
                    let len = (self.buf.len() * 2).clamp(INITIAL, CHUNK);
                    self.buf.resize(len, 0);
                } else {
                    self.spill(pos);
                    pos = 0;
                }
                continue;
            }
            let n = room.min(bytes.len());
            self.buf[pos..pos + n].copy_from_slice(&bytes[..n]);
            pos += n;
            bytes = &bytes[n..];
        }
        pos
    }

    #[inline(never)]
    fn finish(&self, pos: usize) -> Fingerprint {
        match &self.state {
            None => Fingerprint(xxh3_128(&self.buf[..pos])),
            Some(state) => {
                let mut s = (**state).clone();
                s.update(&self.buf[..pos]);
                Fingerprint(s.digest128())
            }
        }
    }
}

impl Default for StableHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StableHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StableHasher")
            .field("buffered", &self.pos)
            .field("streaming", &self.sink.state.is_some())
            .finish()
    }
}

macro_rules! write_int {
    ($($name:ident: $t:ty),* $(,)?) => {
        $(
            #[doc = concat!("Writes a `", stringify!($t), "` as fixed-width little-endian bytes.")]
            #[inline(always)]
            pub fn $name(&mut self, x: $t) {
                self.write_array(x.to_le_bytes());
            }
        )*
    };
}

impl StableHasher {
    /// An empty hasher.
    pub fn new() -> Self {
        StableHasher {
            pos: 0,
            sink: Sink {
                buf: vec![0; INITIAL],
                state: None,
                keep_all: false,
            },
        }
    }

    /// An empty hasher with its buffer already at full size (16 KiB), for long encodings.
    pub(crate) fn for_long_input() -> Self {
        StableHasher {
            pos: 0,
            sink: Sink {
                buf: vec![0; CHUNK],
                state: None,
                keep_all: false,
            },
        }
    }

    /// A hasher that starts with a domain and version tag: `write_str(domain)` then
    /// `write_u32(version)`.
    pub fn with_domain(domain: &str, version: u32) -> Self {
        let mut h = StableHasher::new();
        h.write_str(domain);
        h.write_u32(version);
        h
    }

    /// An encoder: keeps every byte written (its buffer grows instead of feeding XXH3),
    /// for [`bytes`](Self::bytes).
    pub(crate) fn encoder() -> Self {
        let mut h = StableHasher::new();
        h.sink.keep_all = true;
        h
    }

    /// Everything an [`encoder`](Self::encoder) was given since it was made or reset.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.sink.buf[..self.pos]
    }

    /// Forgets everything written so far (keeps the buffer's allocation).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.sink.state = None;
    }

    /// Writes a fixed-size array of bytes (the fast path of every integer write).
    #[inline(always)]
    fn write_array<const N: usize>(&mut self, bytes: [u8; N]) {
        let pos = self.pos;
        if let Some(dst) = self.sink.buf.get_mut(pos..pos + N) {
            dst.copy_from_slice(&bytes);
            self.pos = pos + N;
        } else {
            self.pos = self.sink.write_slow(pos, &bytes);
        }
    }

    /// Room for `n` bytes written through a [`Reserved`] writer that keeps its position in a
    /// register (the hot path of the graph encoding); `None` when `n` exceeds the chunk size.
    #[inline(always)]
    pub(crate) fn reserve(&mut self, n: usize) -> Option<Reserved<'_>> {
        if self.sink.buf.len() - self.pos < n {
            if n > CHUNK {
                return None;
            }
            self.pos = self.sink.make_room(self.pos, n);
        }
        let StableHasher { sink, pos } = self;
        let start = *pos;
        Some(Reserved {
            dst: sink.buf.get_mut(start..start + n)?,
            at: 0,
            pos,
        })
    }

    /// Writes raw bytes, without a length prefix.
    #[inline]
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        let pos = self.pos;
        if let Some(dst) = self.sink.buf.get_mut(pos..pos + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.pos = pos + bytes.len();
        } else {
            self.pos = self.sink.write_slow(pos, bytes);
        }
    }

    write_int!(
        write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64,
        write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64,
    );

    /// Writes a `u128` as 16 little-endian bytes (as two `u64` halves, low first: the same
    /// bytes, without a 16-byte store-to-load round trip).
    #[inline(always)]
    pub fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }

    /// Writes an `i128` as 16 little-endian bytes.
    #[inline(always)]
    pub fn write_i128(&mut self, x: i128) {
        self.write_u128(x as u128);
    }

    /// Writes a `usize` as a `u64` (the same bytes on 32- and 64-bit platforms).
    #[inline(always)]
    pub fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    /// Writes an `isize` as an `i64`.
    #[inline]
    pub fn write_isize(&mut self, x: isize) {
        self.write_i64(x as i64);
    }

    /// Writes a length prefix (a `u64`).
    #[inline]
    pub fn write_len(&mut self, len: usize) {
        self.write_u64(len as u64);
    }

    /// Writes an enum variant tag (one byte). Give every variant an explicit, fixed tag.
    #[inline]
    pub fn write_tag(&mut self, tag: u8) {
        self.write_u8(tag);
    }

    /// Writes a bool as one byte, 0 or 1.
    #[inline]
    pub fn write_bool(&mut self, b: bool) {
        self.write_u8(u8::from(b));
    }

    /// Writes a string: its UTF-8 length as a `u64`, then its bytes.
    #[inline]
    pub fn write_str(&mut self, s: &str) {
        self.write_len(s.len());
        self.write_bytes(s.as_bytes());
    }

    /// Writes a fingerprint as 16 little-endian bytes.
    #[inline]
    pub fn write_fingerprint(&mut self, fp: Fingerprint) {
        self.write_u128(fp.0);
    }

    /// The XXH3-128 of everything written so far. The hasher can keep being written to.
    #[inline]
    pub fn finish(&self) -> Fingerprint {
        self.sink.finish(self.pos)
    }
}

/// A reserved region of a [`StableHasher`]'s buffer; the bytes count when it is dropped.
pub(crate) struct Reserved<'a> {
    dst: &'a mut [u8],
    at: usize,
    pos: &'a mut usize,
}

impl Reserved<'_> {
    /// Writes a `u64` as 8 little-endian bytes (reserved room must remain).
    #[inline(always)]
    pub(crate) fn write_u64(&mut self, x: u64) {
        if let Some(d) = self.dst.get_mut(self.at..self.at + 8) {
            d.copy_from_slice(&x.to_le_bytes());
            self.at += 8;
        }
    }
}

impl Reserved<'_> {
    /// Writes the first `n` bytes of the little-endian words `src` by copying whole 16-byte
    /// chunks (no branch on the length for the usual short payloads): `src` must hold `n`
    /// bytes rounded up to 16 and the reserved room as many; the bytes copied past `n` are
    /// scratch, overwritten by the next write. Writes nothing when either is too short.
    #[inline(always)]
    pub(crate) fn write_padded_words(&mut self, src: &[u32], n: usize) {
        let mut off = 0;
        loop {
            let (Some(&[a, b, c, e]), Some(d)) = (
                src.get(off / 4..off / 4 + 4),
                self.dst.get_mut(self.at + off..self.at + off + 16),
            ) else {
                return;
            };
            let chunk =
                u128::from(a) | u128::from(b) << 32 | u128::from(c) << 64 | u128::from(e) << 96;
            d.copy_from_slice(&chunk.to_le_bytes());
            off += 16;
            if off >= n {
                break;
            }
        }
        self.at += n;
    }
}

impl Reserved<'_> {
    /// Writes the usual operation record in one go, without a branch on its shape: the
    /// header words `head` and `n_in`, the operand indices `v0` and `v1` (`v1` only when
    /// `n_in` is 2; `n_in` must be 1 or 2) and the first `tail_len` (at most 32) bytes of the
    /// little-endian words `tail`. Every part is stored at a fixed or computed offset (the
    /// tail over `v1` when there is one operand), then the record's length is kept. Needs 64
    /// bytes of reserved room; returns false, having written nothing, when there is less or
    /// the arguments are out of range (the caller then writes the record the general way).
    #[inline(always)]
    pub(crate) fn write_short_record(
        &mut self,
        [head, n_in, v0, v1]: [u64; 4],
        tail: &[u32; 8],
        tail_len: usize,
    ) -> bool {
        let Some(d) = self.dst.get_mut(self.at..self.at + 64) else {
            return false;
        };
        if !(1..=2).contains(&n_in) || tail_len > 32 {
            return false;
        }
        let mut t = [0u8; 32];
        for (chunk, w) in t.chunks_exact_mut(4).zip(tail) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        d[0..8].copy_from_slice(&head.to_le_bytes());
        d[8..16].copy_from_slice(&n_in.to_le_bytes());
        d[16..24].copy_from_slice(&v0.to_le_bytes());
        d[24..32].copy_from_slice(&v1.to_le_bytes());
        let tail_at = 16 + 8 * n_in as usize;
        d[tail_at..tail_at + 32].copy_from_slice(&t);
        self.at += tail_at + tail_len;
        true
    }
}

impl Drop for Reserved<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.pos += self.at;
    }
}

/// Types with a stable byte encoding for fingerprints.
///
/// Implementations must write the same bytes for equal values on every platform and Rust
/// release: use the fixed-width `write_*` methods, prefix variable-length data with its length
/// and give each enum variant an explicit tag. Values that are `==` must write the same bytes
/// (and, for [`structural_eq`](crate::structural_eq) to agree with fingerprints, values that
/// write the same bytes should be `==`).
///
/// ```
/// use graph_core::{Fingerprint, StableHash, StableHasher};
///
/// enum MyOp { Add, Scale(f64), Named(String) }
///
/// impl StableHash for MyOp {
///     fn stable_hash(&self, h: &mut StableHasher) {
///         match self {
///             MyOp::Add => h.write_tag(0),
///             MyOp::Scale(s) => { h.write_tag(1); s.stable_hash(h) }
///             MyOp::Named(n) => { h.write_tag(2); n.stable_hash(h) }
///         }
///     }
/// }
/// assert_ne!(Fingerprint::of(&MyOp::Add), Fingerprint::of(&MyOp::Scale(0.0)));
/// ```
pub trait StableHash {
    /// Writes this value's stable encoding into `h`.
    fn stable_hash(&self, h: &mut StableHasher);
}

macro_rules! stable_int {
    ($($t:ty => $m:ident),* $(,)?) => {
        $(
            impl StableHash for $t {
                #[inline]
                fn stable_hash(&self, h: &mut StableHasher) {
                    h.$m(*self);
                }
            }
        )*
    };
}

stable_int!(
    u8 => write_u8, u16 => write_u16, u32 => write_u32, u64 => write_u64, u128 => write_u128,
    i8 => write_i8, i16 => write_i16, i32 => write_i32, i64 => write_i64, i128 => write_i128,
    usize => write_usize, isize => write_isize, bool => write_bool,
);

impl StableHash for char {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_u32(*self as u32);
    }
}

/// Floats are encoded by their IEEE-754 bits: `0.0` and `-0.0` differ, and so do NaNs with
/// different payloads.
impl StableHash for f32 {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_u32(self.to_bits());
    }
}

/// Floats are encoded by their IEEE-754 bits: `0.0` and `-0.0` differ, and so do NaNs with
/// different payloads.
impl StableHash for f64 {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_u64(self.to_bits());
    }
}

impl StableHash for () {
    fn stable_hash(&self, _h: &mut StableHasher) {}
}

impl StableHash for str {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_str(self);
    }
}

impl StableHash for String {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_str(self);
    }
}

impl<T: StableHash> StableHash for [T] {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_len(self.len());
        for x in self {
            x.stable_hash(h);
        }
    }
}

impl<T: StableHash> StableHash for Vec<T> {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        self.as_slice().stable_hash(h);
    }
}

/// Arrays are encoded like slices (with a length prefix), so `[T; N]`, `Vec<T>` and `&[T]`
/// holding the same items write the same bytes.
impl<T: StableHash, const N: usize> StableHash for [T; N] {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        self.as_slice().stable_hash(h);
    }
}

impl<T: StableHash> StableHash for Option<T> {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            None => h.write_tag(0),
            Some(x) => {
                h.write_tag(1);
                x.stable_hash(h);
            }
        }
    }
}

impl<T: StableHash + ?Sized> StableHash for &T {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        (**self).stable_hash(h);
    }
}

impl<T: StableHash + ?Sized> StableHash for Box<T> {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        (**self).stable_hash(h);
    }
}

impl<T: StableHash + ?Sized> StableHash for Arc<T> {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        (**self).stable_hash(h);
    }
}

impl StableHash for Fingerprint {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_fingerprint(*self);
    }
}

macro_rules! stable_tuple {
    ($(($($n:tt $t:ident),+)),* $(,)?) => {
        $(
            impl<$($t: StableHash),+> StableHash for ($($t,)+) {
                #[inline]
                fn stable_hash(&self, h: &mut StableHasher) {
                    $( self.$n.stable_hash(h); )+
                }
            }
        )*
    };
}

stable_tuple!(
    (0 A),
    (0 A, 1 B),
    (0 A, 1 B, 2 C),
    (0 A, 1 B, 2 C, 3 D),
    (0 A, 1 B, 2 C, 3 D, 4 E),
    (0 A, 1 B, 2 C, 3 D, 4 E, 5 F),
);

/// Domain tag of [`UnorderedFingerprint::finish`].
pub const UNORDERED_DOMAIN: &str = "tracegraph.graph-core.unordered";
/// Version of the unordered combination.
pub const UNORDERED_VERSION: u32 = 1;

/// An order-independent fingerprint of a multiset (or of a map, as `(key, value)` items).
///
/// Each item is hashed on its own (XXH3-128 of its stable encoding, no domain tag) to a `u128`
/// `h`. The builder keeps three commutative accumulators: the item count, the wrapping sum of
/// all `h` and the XOR of all `h`. [`finish`](Self::finish) hashes
/// `domain "tracegraph.graph-core.unordered", version 1, count (u64), sum (u128), xor (u128)`.
/// Adding the same items in any order gives the same fingerprint; adding an item twice is not
/// the same as adding it once (it is a multiset, not a set).
///
/// ```
/// use graph_core::UnorderedFingerprint;
/// let mut a = UnorderedFingerprint::new();
/// a.add(&("w", 3u32));
/// a.add(&("b", 1u32));
/// let mut b = UnorderedFingerprint::new();
/// b.add(&("b", 1u32));
/// b.add(&("w", 3u32));
/// assert_eq!(a.finish(), b.finish());
/// ```
#[derive(Clone, Debug, Default)]
pub struct UnorderedFingerprint {
    count: u64,
    sum: u128,
    xor: u128,
    scratch: StableHasher,
}

impl UnorderedFingerprint {
    /// An empty multiset.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one item.
    pub fn add<T: StableHash + ?Sized>(&mut self, item: &T) {
        self.scratch.reset();
        item.stable_hash(&mut self.scratch);
        self.add_fingerprint(self.scratch.finish());
    }

    /// Adds one item given by its already computed item fingerprint (as [`Fingerprint::of`]
    /// would compute it).
    pub fn add_fingerprint(&mut self, item: Fingerprint) {
        self.count = self.count.wrapping_add(1);
        self.sum = self.sum.wrapping_add(item.0);
        self.xor ^= item.0;
    }

    /// Merges another multiset into this one (the union of both, with multiplicities).
    pub fn merge(&mut self, other: &UnorderedFingerprint) {
        self.count = self.count.wrapping_add(other.count);
        self.sum = self.sum.wrapping_add(other.sum);
        self.xor ^= other.xor;
    }

    /// How many items were added.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True when no item was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The fingerprint of the multiset.
    pub fn finish(&self) -> Fingerprint {
        let mut h = StableHasher::with_domain(UNORDERED_DOMAIN, UNORDERED_VERSION);
        h.write_u64(self.count);
        h.write_u128(self.sum);
        h.write_u128(self.xor);
        h.finish()
    }
}
