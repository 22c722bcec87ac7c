//! Benchmarks and evaluation protocols.

pub mod overlap;
