//! The page: the view model embedded as escaped JSON into the HTML template (CSS, scripts).
//!
//! The template (`assets/report.html`) and its assets (`report.css`, `hooks.js`, `report.js`)
//! are real files included at compile time. Placeholders are `{{name}}`; [`write_html`]
//! fills them in one pass over the template, so nothing from a trace is ever re-scanned for
//! placeholders.

use std::io::Write;

use crate::error::ReportError;
use crate::model::ReportData;

const TEMPLATE: &str = include_str!("assets/report.html");
const CSS: &str = include_str!("assets/report.css");
const HOOKS_JS: &str = include_str!("assets/hooks.js");
const REPORT_JS: &str = include_str!("assets/report.js");

/// `s` with `&`, `<`, `>`, `"` and `'` escaped for HTML text and attributes.
fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `data` as JSON safe inside a `<script>` element: `<`, `>` and `&` (which can only occur
/// inside JSON strings) become `\u003c`, `\u003e` and `\u0026`, so no string can close the
/// element or open a comment.
pub fn embedded_json(data: &ReportData) -> Result<String, ReportError> {
    let text = serde_json::to_string(data).map_err(ReportError::Json)?;
    let mut o = String::with_capacity(text.len() + 64);
    for c in text.chars() {
        match c {
            '<' => o.push_str("\\u003c"),
            '>' => o.push_str("\\u003e"),
            '&' => o.push_str("\\u0026"),
            c => o.push(c),
        }
    }
    Ok(o)
}

/// Writes the self-contained page for `data` to `out`.
pub fn write_html<W: Write>(data: &ReportData, mut out: W) -> Result<(), ReportError> {
    let json = embedded_json(data)?;
    let title = html_escape(&data.title);
    let mut page = String::with_capacity(TEMPLATE.len() + CSS.len() + REPORT_JS.len() + json.len());
    let mut rest = TEMPLATE;
    while let Some(open) = rest.find("{{") {
        page.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            page.push_str(&rest[open..]);
            rest = "";
            break;
        };
        let value = match &after[..close] {
            "version" => env!("CARGO_PKG_VERSION"),
            "title" => title.as_str(),
            "css" => CSS,
            "hooks_js" => HOOKS_JS,
            "report_js" => REPORT_JS,
            "data" => json.as_str(),
            other => return Err(ReportError::Template(other.to_string())),
        };
        page.push_str(value);
        rest = &after[close + 2..];
    }
    page.push_str(rest);
    out.write_all(page.as_bytes()).map_err(ReportError::Write)?;
    out.flush().map_err(ReportError::Write)
}

#[cfg(test)]
mod tests {
    use super::TEMPLATE;

    /// Every placeholder of the template is one `write_html` fills, and each is used.
    #[test]
    fn the_template_names_exactly_the_known_placeholders() {
        let mut found = Vec::new();
        let mut rest = TEMPLATE;
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let close = after.find("}}").expect("a closed placeholder");
            found.push(&after[..close]);
            rest = &after[close + 2..];
        }
        found.sort_unstable();
        found.dedup();
        assert_eq!(
            found,
            ["css", "data", "hooks_js", "report_js", "title", "version"]
        );
    }
}
