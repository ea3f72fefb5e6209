//! The live controller: flags (`args`), sources to hostnames (`hostnames`, pure, shared with
//! `render`), the permissions it needs (`rbac`) and the sync engine (`sync`).

pub mod args;
pub mod hostnames;
pub mod rbac;
pub mod sources;
pub mod sync;
