//! The live controller: flags (`args`), sources to hostnames (`hostnames`, pure, shared with
//! `render`), and the permissions it needs (`rbac`).

pub mod args;
pub mod hostnames;
pub mod rbac;
