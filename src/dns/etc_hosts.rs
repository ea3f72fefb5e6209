//! The marked block in a hosts file. (In progress.)

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::hostname::Hostname;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub text: String,
    pub changed: bool,
    /// Wildcards cannot be expressed in a hosts file; the caller warns about each.
    pub skipped_wildcards: Vec<Hostname>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct HostsError {
    pub line: usize,
    pub reason: String,
}

/// Replaces (or inserts, or with an empty set removes) our block of `IP host` lines.
pub fn splice(text: &str, hosts: &BTreeSet<Hostname>, ips: &[IpAddr]) -> Result<Edit, HostsError> {
    let _ = (text, hosts, ips);
    todo!("issue 3: etc-hosts editor")
}
