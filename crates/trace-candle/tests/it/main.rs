//! Integration tests of trace-candle (real Candle tensors and modules on the CPU).

mod demo;
