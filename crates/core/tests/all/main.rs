//! The core's integration tests, one test binary (each binary links the whole dependency graph).

mod crate_graph;
mod hot_model;
mod inject_fixtures;
mod rollout_fixtures;
mod rollout_model;
mod schema;
mod validate_fixtures;
