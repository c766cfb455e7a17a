//! Tests of the exports: Chrome trace JSON structure, nesting adjustments, streaming.
//!
//! Also folded stacks and folded sampled stacks.

mod chrome;
mod common;
mod folded;
mod folded_samples;
mod hostile;
mod outline;
