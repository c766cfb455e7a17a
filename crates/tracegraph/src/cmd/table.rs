//! Aligned text tables: left-aligned text columns, right-aligned numbers.

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

    /// Adds a row (missing cells print empty).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
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
                w[i] = w[i].max(c.chars().count());
            }
        });
        let mut l = String::new();
        let mut one = |cells: &[String]| {
            l.clear();
            for (i, (&width, &right)) in w.iter().zip(&self.right).enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                let pad = width.saturating_sub(c.chars().count());
                if i > 0 {
                    l.push_str("  ");
                }
                if right {
                    l.extend(std::iter::repeat_n(' ', pad));
                    l.push_str(c);
                } else {
                    l.push_str(c);
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
