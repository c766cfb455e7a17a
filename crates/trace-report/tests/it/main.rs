//! Tests of the HTML report: self-contained, escaped, the embedded data round-trips, caps stated.
//!
//! Also the gradients section and the sampled flame graph.

mod flame;
mod gradients;
mod heap;
mod html;
