//! The live controller's building blocks. `hostnames` is pure and shared with `render`.

pub mod hostnames;
