//! graph-core integration tests: one binary, one module per area.

mod builder;
mod common;
mod fingerprint;
mod props;
mod scale;
mod traverse;
mod view;
