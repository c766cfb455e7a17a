//! Tests of the HTML report: self-contained, escaped, the embedded data round-trips, caps are stated.

mod gradients;
mod html;
