//! Integration tests for vecad: derivatives against finite differences, typed errors, the chain generator.

mod engine;
mod generator;
