//! The suite's one fake Kubernetes API, shared with the library's unit tests and
//! `examples/fake_api.rs` (which includes this file by `#[path]`): see
//! `src/test_api.rs`.
#![allow(dead_code)]

#[path = "../../src/test_api.rs"]
mod test_api;

pub use test_api::*;
