//! trace-analyze: analyses and exports over a read trace.

pub mod export;
