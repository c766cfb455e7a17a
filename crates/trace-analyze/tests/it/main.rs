//! Integration tests of trace-analyze: hand-computed analyses, goldens, linear work, step graphs,
//! comparison, gaps and truncated traces.

mod band;
mod beside_torch;
mod common;
mod compare;
mod flops;
mod golden;
mod hand;
mod heap;
mod hostile;
mod linear;
mod op_class;
mod phases;
mod producers;
mod props;
mod stacks;
mod steps;
mod torch;
