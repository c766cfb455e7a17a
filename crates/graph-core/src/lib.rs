//! graph-core: a computation graph of values and operations with stable, canonical fingerprints.
