//! The plugin-only snippet for `import /etc/coredns/custom/*.override`: the same rules as the
//! Corefile block (`super::answer`), between the same marker lines, unindented, LF line endings. With no
//! hostnames it is the two marker lines only (comments, which CoreDNS imports as nothing), so the
//! ConfigMap key can stay in place.

use std::collections::BTreeSet;

use super::answer::{self, Answer, Group};
use super::block::Writer;
use crate::hostname::Hostname;

/// The snippet text for the import ConfigMap key (the same rules as the Corefile block).
pub fn render(hosts: &BTreeSet<Hostname>, answer: &Answer) -> String {
    render_groups(&[Group { hosts, answer }])
}

/// [`render`] with one group of rules per proxy target.
pub fn render_groups(groups: &[Group<'_>]) -> String {
    let mut w = Writer::new(&[], "", "\n", answer::size_hint(groups) + 96);
    answer::write(&mut w, groups, "    ");
    w.finish(true, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{ProxyFqdn, BEGIN_MARKER, DEFAULT_PROXY_FQDN, END_MARKER};
    use crate::hostname::HostPolicy;

    #[test]
    fn snippet() {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        let hosts: BTreeSet<Hostname> = ["b.example.com", "*.example.org", "A.example.com."]
            .iter()
            .map(|n| p.check(n).unwrap())
            .collect();
        let proxy = Answer::Rewrite(ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap());
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
