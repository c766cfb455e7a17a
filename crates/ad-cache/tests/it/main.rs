//! Integration tests for ad-cache: model-based properties, eviction, threads, collisions, AD.

mod behaviour;
mod collision;
mod common;
mod engine_cache;
mod explain;
mod graphs;
mod model;
mod stress;
mod waits;
