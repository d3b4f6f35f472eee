//! The operator's integration tests, one test binary (each binary links the whole dependency
//! graph): the webhook app over real TLS, conversion, OpenKruise conformance, pinning, the
//! admission properties, and the binary's command line as a user runs it.

mod arb;
mod cli;
mod cli_conventions;
mod common;
mod conversion;
mod house;
mod kruise_conformance;
mod lease_model;
mod pinning;
mod properties;
mod responses;
mod webhook;
