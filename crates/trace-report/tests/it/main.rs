//! Tests of the HTML report: self-contained, escaped, the embedded data round-trips, caps stated.
//!
//! Also the gradients section, the sampled flame graph and the sampled op table beside it,
//! and the torch section.

mod flame;
mod gradients;
mod heap;
mod html;
mod sampled_ops;
mod torch;
