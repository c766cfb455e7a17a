//! Span names as every analysis shows them: `name#0` without its `#0` where no sibling is
//! numbered beyond 0, and what an export must know of the whole trace before it writes.
//!
//! trace-candle's `tracing` layer numbers spans by their position among same-named siblings
//! (`linear#0` .. `linear#3`), which tells siblings apart but is noise on a span alone
//! (`model#0/encoder#0`). The analyses (`tracegraph spans`, the report) drop that `#0` by
//! one rule, which [`SpanNames`] applies to the exports: a span `base#0` is shown as `base`
//! when no span with the same parent name and the same base name, anywhere in the trace, is
//! numbered above 0 (`base#1`, ...). Siblings are decided over the whole trace (not per step
//! or per parent instance), so a path is named alike in every step, and the same as in every
//! command. Names whose index is not a plain decimal number (`a#`, `a#x`, `#3`) are left as
//! they are, and ops are never renamed.
//!
//! The folded exports hold every distinct path until they write, so they apply the rule after
//! reading the trace. The Chrome export writes each span as it closes, before the trace has
//! shown every sibling: it needs the rule first, from a [`TraceOutline`] read in a first pass
//! ([`crate::outline`], beside the span nester it runs).

use crate::FastMap;

/// `name` split as `base#k`: the length of `base` and `k`, when `base` is not empty and `k`
/// is a decimal number that fits 32 bits (the rule the analyses apply when they load a trace).
pub(crate) fn sibling_index(name: &str) -> Option<(usize, u32)> {
    let (base, k) = name.rsplit_once('#')?;
    if base.is_empty() || k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    k.parse().ok().map(|k| (base.len(), k))
}

/// The sibling-index rule of one trace: per parent name and base name, the largest index
/// seen (see the module documentation). Empty, it shows every name as recorded.
///
/// Memory: one entry per distinct (parent name, base name) of a numbered span.
#[derive(Debug, Clone, Default)]
pub struct SpanNames {
    /// Base name → largest index, of root spans.
    roots: FastMap<String, u32>,
    /// Parent's name → base name → largest index.
    under: FastMap<String, FastMap<String, u32>>,
}

impl SpanNames {
    /// Notes a span named `name` whose parent is named `parent` (`None`: a root).
    pub(crate) fn observe(&mut self, parent: Option<&str>, name: &str) {
        let Some((at, k)) = sibling_index(name) else {
            return;
        };
        let map = match parent {
            None => &mut self.roots,
            Some(p) => match self.under.get_mut(p) {
                Some(m) => m,
                None => self.under.entry(p.to_string()).or_default(),
            },
        };
        let base = &name[..at];
        match map.get_mut(base) {
            Some(m) => *m = (*m).max(k),
            None => {
                map.insert(base.to_string(), k);
            }
        }
    }

    /// How many bytes of `name` (a span under a parent named `parent`, `None` for a root)
    /// are shown: all of them, or those before its `#0` when it has no numbered sibling.
    pub(crate) fn shown_len(&self, parent: Option<&str>, name: &str) -> usize {
        let Some((at, 0)) = sibling_index(name) else {
            return name.len();
        };
        let map = match parent {
            None => Some(&self.roots),
            Some(p) => self.under.get(p),
        };
        match map.and_then(|m| m.get(&name[..at])) {
            Some(0) => at,
            _ => name.len(),
        }
    }

    /// `name` (a span under a parent named `parent`, `None` for a root) as shown: without its
    /// `#0` when it has no numbered sibling, else as recorded.
    ///
    /// ```
    /// # use trace_export::SpanNames;
    /// let names = SpanNames::default();
    /// // An empty rule shows names as recorded.
    /// assert_eq!(names.show(Some("block#0"), "attn#0"), "attn#0");
    /// ```
    pub fn show<'a>(&self, parent: Option<&str>, name: &'a str) -> &'a str {
        &name[..self.shown_len(parent, name)]
    }
}

/// What an export needs to know of the whole trace before it writes its first event: the
/// span names the analyses show ([`SpanNames`]) and the driving thread before any span
/// (the thread of the first root span), on which an op recorded outside every span is drawn.
/// Made by [`crate::outline`] in a first pass over the trace.
#[derive(Debug, Clone, Default)]
pub struct TraceOutline {
    /// The sibling-index rule of the trace.
    pub names: SpanNames,
    /// The thread of the first root span (no enclosing span open), when the trace has one.
    pub first_driver: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::{SpanNames, sibling_index};

    #[test]
    fn indices_are_plain_decimal_suffixes() {
        assert_eq!(sibling_index("linear#3"), Some((6, 3)));
        assert_eq!(sibling_index("a#b#0"), Some((3, 0)));
        for name in ["linear", "#0", "a#", "a#x", "a#-1", "a#99999999999"] {
            assert_eq!(sibling_index(name), None, "{name}");
        }
    }

    #[test]
    fn a_lone_zero_is_dropped_and_siblings_keep_theirs() {
        let mut n = SpanNames::default();
        n.observe(None, "model#0");
        n.observe(Some("model#0"), "linear#0");
        n.observe(Some("model#0"), "linear#1");
        n.observe(Some("model#0"), "norm#0");
        // The same base under another parent name is another family.
        n.observe(Some("other"), "linear#0");
        assert_eq!(n.show(None, "model#0"), "model");
        assert_eq!(n.show(Some("model#0"), "linear#0"), "linear#0");
        assert_eq!(n.show(Some("model#0"), "linear#1"), "linear#1");
        assert_eq!(n.show(Some("model#0"), "norm#0"), "norm");
        assert_eq!(n.show(Some("other"), "linear#0"), "linear");
        // Never seen: as recorded.
        assert_eq!(n.show(Some("nowhere"), "x#0"), "x#0");
    }
}
