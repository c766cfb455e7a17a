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
        let n = self.header.len();
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut l = String::new();
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
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = w.iter().map(|&k| "-".repeat(k)).collect();
        line(&rule, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out.pop();
        out
    }
}
