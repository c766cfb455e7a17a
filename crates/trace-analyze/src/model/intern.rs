//! String and shape interning: each distinct op name, span name, device or shape is stored once.

use std::collections::HashMap;

/// The hash map of the analyses, keyed by ids, interned names and shapes: foldhash, well mixed
/// in the low bits (structured ids such as `i << 40` spread over the buckets instead of
/// colliding), with a fixed seed so that no result depends on a process's random seed. Never
/// used for anything persisted (fingerprints come from graph-core's XXH3 encoding).
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// The id of an interned string of a trace (resolved with [`Trace::str`](crate::Trace::str)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

/// Stores each distinct string once and hands out compact [`Sym`] ids.
///
/// Interning a string that is already present allocates nothing.
#[derive(Debug, Default, Clone)]
pub(crate) struct Interner {
    map: FastMap<Box<str>, u32>,
    strings: Vec<Box<str>>,
}

impl Interner {
    /// An empty interner.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The id of `s`, adding it when new.
    pub(crate) fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.map.get(s) {
            return Sym(id);
        }
        let id = u32::try_from(self.strings.len()).unwrap_or(u32::MAX);
        self.strings.push(s.into());
        self.map.insert(s.into(), id);
        Sym(id)
    }

    /// The id of `s` when it was interned, without adding it.
    pub(crate) fn get(&self, s: &str) -> Option<Sym> {
        self.map.get(s).map(|&id| Sym(id))
    }

    /// The string of `sym` (empty for an id this interner never handed out).
    pub(crate) fn resolve(&self, sym: Sym) -> &str {
        self.strings.get(sym.0 as usize).map_or("", |s| s)
    }
}

/// The id of an interned shape of a trace (each distinct list of dimensions is stored once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeId(pub u32);

/// Stores each distinct tensor shape (list of dimensions) once.
#[derive(Debug, Default, Clone)]
pub(crate) struct ShapeInterner {
    map: FastMap<Box<[u64]>, u32>,
    shapes: Vec<Box<[u64]>>,
}

impl ShapeInterner {
    /// An empty shape interner.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The id of `dims`, adding it when new.
    pub(crate) fn intern(&mut self, dims: &[u64]) -> ShapeId {
        if let Some(&id) = self.map.get(dims) {
            return ShapeId(id);
        }
        let id = u32::try_from(self.shapes.len()).unwrap_or(u32::MAX);
        self.shapes.push(dims.into());
        self.map.insert(dims.into(), id);
        ShapeId(id)
    }

    /// The dimensions of `id` (empty for an id this interner never handed out).
    pub(crate) fn resolve(&self, id: ShapeId) -> &[u64] {
        self.shapes.get(id.0 as usize).map_or(&[], |s| s)
    }

    /// The shape formatted like `[32, 784]`.
    pub(crate) fn display(&self, id: ShapeId) -> String {
        format_shape(self.resolve(id))
    }
}

/// Formats dimensions like `[32, 784]`.
pub(crate) fn format_shape(dims: &[u64]) -> String {
    let mut s = String::with_capacity(2 + dims.len() * 4);
    s.push('[');
    for (i, d) in dims.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&d.to_string());
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_idempotent() {
        let mut i = Interner::new();
        let a = i.intern("matmul");
        let b = i.intern("add");
        assert_eq!(i.intern("matmul"), a);
        assert_ne!(a, b);
        assert_eq!(i.resolve(b), "add");
        assert_eq!(i.resolve(a), "matmul");
        assert_eq!(i.resolve(Sym(2)), "", "an id never handed out");
        assert_eq!((i.get("add"), i.get("relu")), (Some(b), None));
        let mut s = ShapeInterner::new();
        let x = s.intern(&[2, 3]);
        assert_eq!(s.intern(&[2, 3]), x);
        assert_eq!(s.display(x), "[2, 3]");
    }
}
