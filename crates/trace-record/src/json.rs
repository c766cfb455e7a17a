//! The JSON writer: escaped strings, integers, floats and small objects appended to bytes.
//!
//! One writer for everything this workspace writes as JSON by hand: the trace encoder's event
//! lines, the Chrome Trace Event export and the trace generators of the test kit.
//!
//! - Strings ([`push_str`]) are escaped per RFC 8259: quote, backslash and every control
//!   character (`\n`, `\r`, `\t`, `\b`, `\f` by name, the others as `\u00XX` in lower-case
//!   hex); every other character, DEL and non-ASCII included, passes through as UTF-8.
//! - Integers ([`push_u64`], [`push_i64`]) are written without a per-digit loop (8 digits at
//!   a time with SWAR arithmetic); the output equals `v.to_string()`.
//! - Floats ([`push_f64`]) are the shortest form that reads back to the same `f64` (`ryu`:
//!   `0.25`, `1.0`, `1e-7`, `1e16`); NaN and the infinities, which JSON cannot express, are
//!   written as `null`.
//! - [`push_micros`] writes nanoseconds as microseconds with exactly three decimals, the
//!   time unit of the Chrome Trace Event Format.
//! - [`Object`] writes `{"key":value,...}` with the commas in place.
//!
//! ```
//! use trace_record::json;
//! let mut out = Vec::new();
//! let mut o = json::Object::new(&mut out);
//! o.str("name", "say \"hi\"\n").u64("pid", 41).micros("ts", 12_345_678).f64("v", 0.25);
//! o.finish();
//! assert_eq!(out, br#"{"name":"say \"hi\"\n","pid":41,"ts":12345.678,"v":0.25}"#);
//! ```
//!
//! The trace encoder uses the same code through a cursor over a reused, already initialised
//! buffer that first makes room for a line's worst case and then writes with plain stores
//! (no allocation, no capacity checks per value).

/// Appends `s` as a JSON string literal, quotes included.
///
/// ```
/// let mut out = Vec::new();
/// trace_record::json::push_str(&mut out, "tab\there \u{1}");
/// assert_eq!(out, br#""tab\there \u0001""#);
/// ```
#[inline]
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    if is_clean(s) {
        out.extend_from_slice(s.as_bytes());
    } else {
        for_each_piece(s.as_bytes(), |p| out.extend_from_slice(p));
    }
    out.push(b'"');
}

/// Appends `v` in decimal (as `v.to_string()` would).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    with_cursor(out, INT, |c| c.uint(v));
}

/// Appends `v` in decimal (as `v.to_string()` would).
#[inline]
pub fn push_i64(out: &mut Vec<u8>, v: i64) {
    with_cursor(out, INT + 1, |c| {
        if v < 0 {
            c.byte(b'-');
        }
        c.uint(v.unsigned_abs());
    });
}

/// Appends `v` in its shortest round-trip form (`ryu`), or `null` when it is not finite.
///
/// ```
/// let mut out = Vec::new();
/// for v in [1.0, 0.1, 1e-7, f64::NAN] {
///     trace_record::json::push_f64(&mut out, v);
///     out.push(b' ');
/// }
/// assert_eq!(out, b"1.0 0.1 1e-7 null ");
/// ```
#[inline]
pub fn push_f64(out: &mut Vec<u8>, v: f64) {
    with_cursor(out, FLOAT, |c| c.float(v));
}

/// Appends nanoseconds `ns` as microseconds with exactly three decimals (`1234567` →
/// `1234.567`, `5` → `0.005`): exact, as the Chrome Trace Event Format's `ts` and `dur`.
#[inline]
pub fn push_micros(out: &mut Vec<u8>, ns: u64) {
    with_cursor(out, INT + 4, |c| c.micros(ns));
}

/// Appends `true` or `false`.
#[inline]
pub fn push_bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

/// Appends `[v,v,...]` of integers.
///
/// ```
/// let mut out = Vec::new();
/// trace_record::json::push_u64_array(&mut out, [3, 0, 18446744073709551615]);
/// assert_eq!(out, b"[3,0,18446744073709551615]");
/// ```
pub fn push_u64_array(out: &mut Vec<u8>, values: impl IntoIterator<Item = u64>) {
    out.push(b'[');
    for (i, v) in values.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_u64(out, v);
    }
    out.push(b']');
}

/// Writes one JSON object into a byte vector: `{` when made, `,"key":` before each value,
/// `}` at [`finish`](Object::finish). Keys are escaped like any string.
///
/// Values other than the typed ones go through [`key`](Object::key), which returns the
/// vector to append the value to (with the `push_*` functions or pre-formatted JSON).
///
/// ```
/// use trace_record::json::{self, Object};
/// let mut out = Vec::new();
/// let mut o = Object::new(&mut out);
/// json::push_u64_array(o.key("shape"), [2, 3]);
/// let mut args = Object::new(o.key("args"));
/// args.bool("grad", true);
/// args.finish();
/// o.finish();
/// assert_eq!(out, br#"{"shape":[2,3],"args":{"grad":true}}"#);
/// ```
#[derive(Debug)]
#[must_use = "an object is closed by `finish`"]
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    /// Starts an object (writes `{`).
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// Writes the separator and `"key":`; the caller appends the value to the returned vector.
    pub fn key(&mut self, key: &str) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        push_str(self.out, key);
        self.out.push(b':');
        self.out
    }

    /// `"key":"value"` (escaped).
    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        push_str(self.key(key), value);
        self
    }

    /// `"key":value` for an unsigned integer.
    pub fn u64(&mut self, key: &str, value: u64) -> &mut Self {
        push_u64(self.key(key), value);
        self
    }

    /// `"key":value` for a signed integer.
    pub fn i64(&mut self, key: &str, value: i64) -> &mut Self {
        push_i64(self.key(key), value);
        self
    }

    /// `"key":value` for a float ([`push_f64`]: `null` when not finite).
    pub fn f64(&mut self, key: &str, value: f64) -> &mut Self {
        push_f64(self.key(key), value);
        self
    }

    /// `"key":value` for nanoseconds written as microseconds ([`push_micros`]).
    pub fn micros(&mut self, key: &str, ns: u64) -> &mut Self {
        push_micros(self.key(key), ns);
        self
    }

    /// `"key":true` or `"key":false`.
    pub fn bool(&mut self, key: &str, value: bool) -> &mut Self {
        push_bool(self.key(key), value);
        self
    }

    /// `"key":json` for a value already formatted as JSON (written as is).
    pub fn raw(&mut self, key: &str, json: &str) -> &mut Self {
        self.key(key).extend_from_slice(json.as_bytes());
        self
    }

    /// Closes the object (writes `}`).
    pub fn finish(self) {
        self.out.push(b'}');
    }
}

/// Worst-case bytes of a float: ryu writes at most 24, `null` 4.
const FLOAT: usize = 32;

/// Runs `f` on a cursor over `out` with room for `bound` more bytes, keeping what it wrote.
#[inline(always)]
fn with_cursor(out: &mut Vec<u8>, bound: usize, f: impl FnOnce(&mut Cur<'_>)) {
    let len = out.len();
    out.resize(len + bound, 0);
    let mut c = Cur {
        buf: &mut out[..],
        pos: len,
    };
    f(&mut c);
    let pos = c.pos;
    out.truncate(pos);
}

/// Calls `emit` with the escaped form of `bytes`, piece by piece: runs of bytes that need no
/// escaping, and escape sequences.
#[inline]
fn for_each_piece(bytes: &[u8], mut emit: impl FnMut(&[u8])) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !needs_escape(b) {
            continue;
        }
        emit(&bytes[start..i]);
        let mut u = *b"\\u0000";
        emit(match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            _ => {
                u[4] = HEX[usize::from(b >> 4)];
                u[5] = HEX[usize::from(b & 0xf)];
                &u
            }
        });
        start = i + 1;
    }
    emit(&bytes[start..]);
}

/// A reused output buffer: `buf` is fully initialised and `pos` bytes of it are used.
#[derive(Debug, Default)]
pub(crate) struct LineBuf {
    buf: Vec<u8>,
    pos: usize,
}

impl LineBuf {
    /// An empty buffer with `capacity` initialised bytes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        LineBuf {
            buf: vec![0; capacity],
            pos: 0,
        }
    }

    pub(crate) fn from_vec(v: Vec<u8>) -> Self {
        let pos = v.len();
        LineBuf { buf: v, pos }
    }

    pub(crate) fn into_vec(mut self) -> Vec<u8> {
        self.buf.truncate(self.pos);
        self.buf
    }

    /// The bytes written.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    /// Bytes written.
    pub(crate) fn len(&self) -> usize {
        self.pos
    }

    /// Forgets the bytes written (keeps the memory).
    pub(crate) fn clear(&mut self) {
        self.pos = 0;
    }

    /// Appends raw bytes (a whole line, e.g. the header).
    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        self.write(bytes.len(), |c| c.raw(bytes));
    }

    /// A cursor with room for at least `bound` more bytes.
    #[inline]
    fn cursor(&mut self, bound: usize) -> Cur<'_> {
        let need = self.pos + bound;
        if need > self.buf.len() {
            self.buf.resize(need.max(2 * self.buf.len()), 0);
        }
        Cur {
            buf: &mut self.buf[..],
            pos: self.pos,
        }
    }

    /// Runs `f` on a cursor with room for `bound` bytes and keeps what it wrote.
    #[inline(always)]
    pub(crate) fn write(&mut self, bound: usize, f: impl FnOnce(&mut Cur<'_>)) {
        let mut c = self.cursor(bound);
        f(&mut c);
        let pos = c.pos;
        self.pos = pos;
    }
}

/// Writes into an initialised slice that has room for the line (see [`LineBuf::cursor`]).
pub(crate) struct Cur<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

/// Worst-case bytes of a string literal: quotes plus `\u00XX` for every byte.
#[inline]
pub(crate) fn str_bound(s: &str) -> usize {
    2 + 6 * s.len()
}

/// Worst-case bytes of an integer (20 digits) plus the slack of the 8-byte stores.
pub(crate) const INT: usize = 24;

/// Two-digit-per-lane SWAR: the 8 decimal digits of `v` (< 10^8), leading zeros included,
/// one per byte (values 0-9), in reading order when stored little-endian.
#[inline(always)]
fn digits8(v: u64) -> u64 {
    let x = (v / 10_000) | ((v % 10_000) << 32);
    let hi = ((x * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let y = hi | ((x - hi * 100) << 16);
    let hi = ((y * 103) >> 10) & 0x000f_000f_000f_000f;
    hi | ((y - hi * 10) << 8)
}

const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;
const E8: u64 = 100_000_000;

impl Cur<'_> {
    #[inline(always)]
    pub(crate) fn raw(&mut self, s: &[u8]) {
        self.buf[self.pos..self.pos + s.len()].copy_from_slice(s);
        self.pos += s.len();
    }

    #[inline(always)]
    pub(crate) fn byte(&mut self, b: u8) {
        self.buf[self.pos] = b;
        self.pos += 1;
    }

    #[inline(always)]
    fn word(&mut self, w: u64, len: usize) {
        self.buf[self.pos..self.pos + 8].copy_from_slice(&w.to_le_bytes());
        self.pos += len;
    }

    /// `v` (< 10^8) without leading zeros.
    #[inline(always)]
    fn var8(&mut self, v: u64) {
        if v == 0 {
            self.byte(b'0');
            return;
        }
        if v < 10_000 {
            // Shape dimensions and small ids: the same SWAR on one 4-digit lane.
            let hi = (v * 10_486) >> 20;
            let y = hi | ((v - hi * 100) << 16);
            let hi = ((y * 103) >> 10) & 0x000f_000f;
            let z = hi | ((y - hi * 10) << 8);
            let lead = (z.trailing_zeros() / 8) as usize;
            self.word((z >> (8 * lead)) | ASCII_ZEROS, 4 - lead);
            return;
        }
        let z = digits8(v);
        let lead = (z.trailing_zeros() / 8) as usize;
        self.word((z >> (8 * lead)) | ASCII_ZEROS, 8 - lead);
    }

    /// `v` in decimal: no call, no per-digit loop, 8-byte stores (needs [`INT`] bytes of room).
    #[inline(always)]
    pub(crate) fn uint(&mut self, v: u64) {
        if v < E8 {
            self.var8(v);
        } else if v < E8 * E8 {
            self.var8(v / E8);
            self.word(digits8(v % E8) | ASCII_ZEROS, 8);
        } else {
            self.var8(v / (E8 * E8));
            self.word(digits8((v / E8) % E8) | ASCII_ZEROS, 8);
            self.word(digits8(v % E8) | ASCII_ZEROS, 8);
        }
    }

    /// `ns` as microseconds with exactly three decimals (`1234567` → `1234.567`); needs
    /// [`INT`] + 4 bytes of room.
    #[inline]
    pub(crate) fn micros(&mut self, ns: u64) {
        self.uint(ns / 1000);
        let frac = ns % 1000;
        self.byte(b'.');
        self.byte(b'0' + (frac / 100) as u8);
        self.byte(b'0' + (frac / 10 % 10) as u8);
        self.byte(b'0' + (frac % 10) as u8);
    }

    #[inline]
    pub(crate) fn float(&mut self, v: f64) {
        if v.is_finite() {
            let mut b = ryu::Buffer::new();
            self.raw(b.format_finite(v).as_bytes());
        } else {
            self.raw(b"null");
        }
    }

    /// `s` as a JSON string literal, quotes included (needs [`str_bound`] bytes of room).
    #[inline]
    pub(crate) fn string(&mut self, s: &str) {
        self.byte(b'"');
        self.string_body(s);
        self.byte(b'"');
    }

    /// `"{s}#{k}"` as a JSON string literal (needs [`INT`] bytes of room beyond the string's).
    pub(crate) fn string_numbered(&mut self, s: &str, k: u32) {
        self.byte(b'"');
        self.string_body(s);
        self.byte(b'#');
        self.uint(u64::from(k));
        self.byte(b'"');
    }

    /// The characters of `s` inside a JSON string literal, escaped where needed.
    #[inline]
    fn string_body(&mut self, s: &str) {
        let bytes = s.as_bytes();
        if bytes.iter().any(|&b| needs_escape(b)) {
            self.escaped(bytes);
        } else {
            self.raw(bytes);
        }
    }

    #[cold]
    fn escaped(&mut self, bytes: &[u8]) {
        for_each_piece(bytes, |p| self.raw(p));
    }

    /// `s` as a JSON string literal when the caller already knows whether it needs escaping
    /// (`clean`: it does not).
    #[inline(always)]
    pub(crate) fn string_known(&mut self, s: &str, clean: bool) {
        if clean {
            self.byte(b'"');
            self.raw(s.as_bytes());
            self.byte(b'"');
        } else {
            self.string(s);
        }
    }

    /// An integer formatted once by [`Digits::of`] (needs [`INT`] bytes of room).
    #[inline(always)]
    pub(crate) fn digits(&mut self, d: &Digits) {
        self.word(d.words[0], d.first);
        if d.n > 1 {
            self.word(d.words[1], 8);
            if d.n > 2 {
                self.word(d.words[2], 8);
            }
        }
    }

    #[inline]
    pub(crate) fn uint_list(&mut self, vs: impl Iterator<Item = u64>) {
        self.byte(b'[');
        let mut first = true;
        for v in vs {
            if !first {
                self.byte(b',');
            }
            first = false;
            self.uint(v);
        }
        self.byte(b']');
    }
}

/// A decimal integer formatted once, held in registers (up to three 8-byte words of ASCII
/// digits) and written into several lines with plain stores.
#[derive(Clone, Copy)]
pub(crate) struct Digits {
    words: [u64; 3],
    /// Digits in the first word (1-8).
    first: usize,
    /// Words used (1-3); the words after the first hold 8 digits each.
    n: usize,
}

/// The ASCII digits of `v` (< 10^8) without leading zeros, as a little-endian word, and
/// their count.
#[inline(always)]
fn var8_word(v: u64) -> (u64, usize) {
    if v == 0 {
        return (u64::from(b'0'), 1);
    }
    let (z, width) = if v < 10_000 {
        let hi = (v * 10_486) >> 20;
        let y = hi | ((v - hi * 100) << 16);
        let hi = ((y * 103) >> 10) & 0x000f_000f;
        (hi | ((y - hi * 10) << 8), 4)
    } else {
        (digits8(v), 8)
    };
    let lead = (z.trailing_zeros() / 8) as usize;
    ((z >> (8 * lead)) | ASCII_ZEROS, width - lead)
}

impl Digits {
    #[inline(always)]
    pub(crate) fn of(v: u64) -> Self {
        if v < E8 {
            let (w, first) = var8_word(v);
            Digits {
                words: [w, 0, 0],
                first,
                n: 1,
            }
        } else if v < E8 * E8 {
            let (w, first) = var8_word(v / E8);
            Digits {
                words: [w, digits8(v % E8) | ASCII_ZEROS, 0],
                first,
                n: 2,
            }
        } else {
            let (w, first) = var8_word(v / (E8 * E8));
            Digits {
                words: [
                    w,
                    digits8((v / E8) % E8) | ASCII_ZEROS,
                    digits8(v % E8) | ASCII_ZEROS,
                ],
                first,
                n: 3,
            }
        }
    }
}

/// Whether `s` is written without escapes.
#[inline(always)]
pub(crate) fn is_clean(s: &str) -> bool {
    !s.as_bytes().iter().any(|&b| needs_escape(b))
}

/// Bytes that need escaping inside a JSON string: control characters, quote, backslash.
const ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Whether byte `b` needs escaping inside a JSON string.
#[inline(always)]
fn needs_escape(b: u8) -> bool {
    ESCAPE[usize::from(b)]
}

#[cfg(test)]
mod tests {
    use rand_xoshiro::SplitMix64;
    use rand_xoshiro::rand_core::{Rng, SeedableRng};

    use super::LineBuf;

    #[test]
    fn integers_match_display() {
        let mut vals: Vec<u64> = (0..20_000).collect();
        vals.extend([99_999_999, 100_000_000, u64::MAX]);
        let mut x = 1u64;
        for _ in 0..20 {
            vals.extend([x - 1, x, x + 1]);
            x = x.saturating_mul(10);
        }
        let mut rng = SplitMix64::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        for _ in 0..100_000 {
            let r = rng.next_u64();
            vals.push(r >> (r % 64));
        }
        for v in vals {
            let mut lb = LineBuf::default();
            lb.write(super::INT, |c| c.uint(v));
            assert_eq!(lb.bytes(), v.to_string().as_bytes(), "{v}");
            let mut lb = LineBuf::default();
            lb.write(super::INT, |c| c.digits(&super::Digits::of(v)));
            assert_eq!(lb.bytes(), v.to_string().as_bytes(), "digits {v}");
        }
    }
}
