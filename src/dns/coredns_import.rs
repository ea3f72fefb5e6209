//! The plugin-only snippet for `import /etc/coredns/custom/*.override`. (In progress.)

use std::collections::BTreeSet;

use super::ProxyFqdn;
use crate::hostname::Hostname;

/// The snippet text for the import ConfigMap key (the same rewrite rules as the Corefile block).
pub fn render(hosts: &BTreeSet<Hostname>, proxy: &ProxyFqdn) -> String {
    let _ = (hosts, proxy);
    todo!("issue 3: coredns-import snippet")
}
