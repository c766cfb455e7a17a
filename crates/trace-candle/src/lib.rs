//! trace-candle: capture Candle tensors, ops, modules and training steps into a trace.
