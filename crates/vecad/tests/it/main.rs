//! vecad integration tests: derivatives against finite differences, typed errors, the generator.

mod engine;
mod generator;
