//! Aligned text tables: left-aligned text columns, right-aligned numbers.

use std::borrow::Cow;

/// The most characters of one cell a table prints (then `…`): a name or path read from a
/// trace can be as long as the trace's line limit.
pub(crate) const CELL_CHARS: usize = 512;

/// A cell made safe to print to a terminal: at most [`CELL_CHARS`] characters, control,
/// bidirectional-override and invisible characters escaped (`\u{202e}`), so a hostile name
/// read from a trace can neither flood the terminal nor reorder what is printed around it.
/// Borrowed, at no cost, when the cell is already safe.
pub(crate) fn printable(cell: &str) -> Cow<'_, str> {
    let safe = cell.len() <= CELL_CHARS && !cell.chars().any(|c| c.is_control() || hidden(c));
    if safe {
        Cow::Borrowed(cell)
    } else {
        Cow::Owned(trace_record::schema::shown_up_to(cell, CELL_CHARS))
    }
}

/// The formatting characters `shown_up_to` escapes beside controls (bidirectional overrides
/// and isolates, zero-width characters, line and paragraph separators, the byte order mark).
fn hidden(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
    )
}

/// A table of strings with a header row.
pub(crate) struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `columns`; a column whose name starts with `>` is right-aligned (the `>`
    /// is not printed).
    pub(crate) fn new(columns: &[&str]) -> Self {
        Table {
            header: columns
                .iter()
                .map(|c| c.trim_start_matches('>').to_string())
                .collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells print empty). Every cell is made safe to print
    /// ([`printable`]).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| match printable(&c) {
                    Cow::Borrowed(_) => c,
                    Cow::Owned(safe) => safe,
                })
                .collect(),
        );
    }

    /// True when no row was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, two spaces between columns, trailing spaces trimmed.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write_rows(
            |emit| self.rows.iter().for_each(|r| emit(r)),
            |l| {
                out.push_str(l);
                out.push('\n');
            },
        );
        out.pop();
        out
    }

    /// The table with rows made by `rows` (called twice: once to measure the columns, once
    /// to write), each line (no line end) passed to `line`; the rows added with
    /// [`Table::row`] are not part of it. For tables as long as a trace: no row is kept.
    pub(crate) fn write_rows(
        &self,
        rows: impl Fn(&mut dyn FnMut(&[String])),
        mut line: impl FnMut(&str),
    ) {
        let n = self.header.len();
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        rows(&mut |r: &[String]| {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(printable(c).chars().count());
            }
        });
        let mut l = String::new();
        let mut one = |cells: &[String]| {
            l.clear();
            for (i, (&width, &right)) in w.iter().zip(&self.right).enumerate() {
                let c = printable(cells.get(i).map_or("", String::as_str));
                let pad = width.saturating_sub(c.chars().count());
                if i > 0 {
                    l.push_str("  ");
                }
                if right {
                    l.extend(std::iter::repeat_n(' ', pad));
                    l.push_str(&c);
                } else {
                    l.push_str(&c);
                    l.extend(std::iter::repeat_n(' ', pad));
                }
            }
            line(l.trim_end());
        };
        one(&self.header);
        let rule: Vec<String> = w.iter().map(|&k| "-".repeat(k)).collect();
        one(&rule);
        rows(&mut one);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_cells_are_escaped_and_cut_and_safe_ones_borrowed() {
        assert!(matches!(printable("layer#0/attn"), Cow::Borrowed(_)));
        let long = format!("\u{202e}{}", "A".repeat(120_000));
        let mut t = Table::new(&["op", ">calls"]);
        t.row(vec![long, "1".into()]);
        let out = t.render();
        assert!(!out.contains('\u{202e}'), "no raw override");
        assert!(out.contains("\\u{202e}"), "escaped");
        for line in out.lines() {
            assert!(
                line.chars().count() < CELL_CHARS + 40,
                "cut: {}",
                line.chars().count()
            );
        }
        assert!(out.contains('…'));
    }
}
