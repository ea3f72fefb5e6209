//! The marked `rewrite` block inside the Corefile's root server block. (In progress.)

use std::collections::BTreeSet;

use super::ProxyFqdn;
use crate::hostname::Hostname;

/// What the Corefile tells us beyond the edit (for warnings and `doctor`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// The root server block has the `reload` plugin (otherwise CoreDNS needs a restart).
    pub has_reload: bool,
    /// The root server block already has `import /etc/coredns/custom/*.override`.
    pub imports_custom_override: bool,
}

/// The result of a splice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub text: String,
    /// `text` differs from the input.
    pub changed: bool,
    pub findings: Findings,
}

/// Why a Corefile cannot be edited. `line` is 1-based where the problem was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct CorefileError {
    pub line: usize,
    pub reason: String,
}

/// Replaces (or inserts, or with an empty set removes) our block. Text outside the markers is
/// preserved byte for byte.
pub fn splice(
    corefile: &str,
    hosts: &BTreeSet<Hostname>,
    proxy: &ProxyFqdn,
) -> Result<Edit, CorefileError> {
    let _ = (corefile, hosts, proxy);
    todo!("issue 3: coredns editor")
}
