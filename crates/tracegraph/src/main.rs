//! tracegraph: the command-line tool that profiles Candle runs and analyses their traces.

fn main() {}
