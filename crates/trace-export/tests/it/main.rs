//! Tests of the exports: Chrome trace JSON structure, nesting adjustments, streaming, and folded stacks.

mod chrome;
mod common;
mod folded;
mod hostile;
