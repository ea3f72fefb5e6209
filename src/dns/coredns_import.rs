//! The plugin-only snippet for `import /etc/coredns/custom/*.override`: the same rewrite rules as
//! the Corefile block, between the same marker lines, unindented, LF line endings. With no
//! hostnames it is the two marker lines only (comments, which CoreDNS imports as nothing), so the
//! ConfigMap key can stay in place.

use std::collections::BTreeSet;

use super::block::Writer;
use super::corefile::write_rules;
use super::ProxyFqdn;
use crate::hostname::Hostname;

/// The snippet text for the import ConfigMap key (the same rewrite rules as the Corefile block).
pub fn render(hosts: &BTreeSet<Hostname>, proxy: &ProxyFqdn) -> String {
    let mut w = Writer::new(
        &[],
        "",
        "\n",
        hosts.len() * (proxy.as_str().len() + 80) + 96,
    );
    write_rules(&mut w, hosts, proxy);
    w.finish(true, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{BEGIN_MARKER, DEFAULT_PROXY_FQDN, END_MARKER};
    use crate::hostname::HostPolicy;

    #[test]
    fn snippet() {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        let hosts: BTreeSet<Hostname> = ["b.example.com", "*.example.org", "A.example.com."]
            .iter()
            .map(|n| p.check(n).unwrap())
            .collect();
        let proxy = ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap();
        assert_eq!(
            render(&hosts, &proxy),
            format!(
                "{BEGIN_MARKER}\n\
                 rewrite name regex ^[a-z0-9-]+\\.example\\.org\\.$ {DEFAULT_PROXY_FQDN} answer auto\n\
                 rewrite name a.example.com {DEFAULT_PROXY_FQDN}\n\
                 rewrite name b.example.com {DEFAULT_PROXY_FQDN}\n\
                 {END_MARKER}\n"
            )
        );
        assert_eq!(
            render(&BTreeSet::new(), &proxy),
            format!("{BEGIN_MARKER}\n{END_MARKER}\n")
        );
    }
}
