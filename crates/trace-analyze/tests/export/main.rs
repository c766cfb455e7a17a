//! Tests of the exports: Chrome trace JSON structure, nesting adjustments, folded stacks and the HTML report.

mod chrome;
mod common;
mod folded;
mod html;
