//! The live controller: flags (`args`), sources to hostnames (`hostnames`, pure, shared with
//! `render`), the permissions it needs (`rbac`) and the sync engine (`sync`).

pub mod args;
pub mod events;
pub mod hostnames;
pub mod lease;
pub mod metrics;
pub mod rbac;
pub mod revert;
pub mod sources;
pub mod sync;
