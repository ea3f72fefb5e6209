//! What the CoreDNS block answers for the hairpinned names, rendered as Corefile directives (the
//! lines between our markers, in the Corefile block, the import snippet and the node-local-dns
//! block alike).
//!
//! The default is a pair of `template` directives that answer only A and AAAA queries, with the
//! proxy Service's ClusterIPs:
//!
//! ```text
//! template IN A example.com {
//!     match ^(?:api\.)?shop\.example\.com\.$
//!     answer "{{ .Name }} 30 IN A 10.96.0.5"
//!     fallthrough
//! }
//! template IN AAAA example.com {
//!     match ^(?:api\.)?shop\.example\.com\.$
//!     fallthrough
//! }
//! ```
//!
//! Every other query type, and every name the regex does not match, falls through to the rest of
//! the server block (`forward`): SOA, NS, TXT, CAA and `_acme-challenge.` names keep their public
//! answers, which DNS-01 zone discovery needs. The AAAA template without an `answer` gives NODATA
//! for an IPv4-only proxy, so a public AAAA record cannot lead a dual-stack client around the
//! proxy. `template` parses the same from CoreDNS 1.7 on (each `match` pattern is kept within the
//! 10,000 bytes CoreDNS 1.14 accepts) and is compiled into node-local-dns from 1.15.13, so the
//! same text works in both (docs/coredns-answers.md has the sources).
//!
//! The opt-in alternative is the reference tool's `rewrite name` lines to the proxy Service's
//! name, for who wants a name target; its wildcard lines need CoreDNS 1.8.4 (`answer auto`).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use super::block::Writer;
use super::name_regex;
use super::ProxyFqdn;
use crate::hostname::Hostname;

/// TTL of the template answers, in seconds: the kubeadm Corefile's `kubernetes … ttl 30`.
pub const TTL: u32 = 30;

/// The proxy's addresses: never empty, sorted (IPv4 first), distinct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyAddrs(Vec<IpAddr>);

impl ProxyAddrs {
    /// `None` for an empty list.
    pub fn new(ips: &[IpAddr]) -> Option<Self> {
        let mut v = ips.to_vec();
        v.sort();
        v.dedup();
        (!v.is_empty()).then_some(Self(v))
    }

    pub fn as_slice(&self) -> &[IpAddr] {
        &self.0
    }

    fn of(&self, v6: bool) -> impl Iterator<Item = &IpAddr> {
        self.0.iter().filter(move |ip| ip.is_ipv6() == v6)
    }
}

impl fmt::Display for ProxyAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, ip) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{ip}")?;
        }
        Ok(())
    }
}

/// How the block answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The A/AAAA `template` pair with these addresses (the default).
    Template(ProxyAddrs),
    /// `rewrite name` lines to the proxy Service's FQDN (opt-in).
    Rewrite(ProxyFqdn),
}

impl Answer {
    /// The form's name, as `--coredns-answer` spells it.
    pub fn form(&self) -> &'static str {
        match self {
            Answer::Template(_) => "template",
            Answer::Rewrite(_) => "rewrite",
        }
    }
}

/// A CoreDNS version, for the oldest one a block parses on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `v1.8.4`, `1.8.4`, `1.11.3-eksbuild.1`; the numeric prefix of an image tag.
    pub fn parse(tag: &str) -> Option<Self> {
        let t = tag.trim().trim_start_matches('v');
        let mut parts = t.splitn(3, '.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            let digits: &str = &p[..p.bytes().take_while(u8::is_ascii_digit).count()];
            digits.parse().ok()
        };
        Some(Version(
            num(parts.next())?,
            num(parts.next())?,
            num(parts.next()).unwrap_or(0),
        ))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The oldest CoreDNS that parses the block for `hosts` in this form, and why.
pub fn oldest_coredns(hosts: &BTreeSet<Hostname>, answer: &Answer) -> (Version, &'static str) {
    match answer {
        Answer::Rewrite(_) if hosts.iter().any(Hostname::is_wildcard) => (
            Version(1, 8, 4),
            "its wildcard lines use `rewrite name regex … answer auto`, which CoreDNS parses \
             from 1.8.4 on",
        ),
        Answer::Rewrite(_) => (
            Version(1, 7, 0),
            "exact `rewrite name` lines parse on every supported CoreDNS",
        ),
        Answer::Template(_) => (
            Version(1, 7, 0),
            "the `template` pair parses on every supported CoreDNS",
        ),
    }
}

/// Names answered one way: one proxy target's hosts and that proxy's answer. A block holds one
/// group per target (a name is in one group only), each with its own rules.
#[derive(Clone, Copy, Debug)]
pub struct Group<'a> {
    pub hosts: &'a BTreeSet<Hostname>,
    pub answer: &'a Answer,
}

/// The groups a block was rendered from, owned (what the controller compares the live block
/// with to tell a revert).
pub type Rules = Vec<(BTreeSet<Hostname>, Answer)>;

/// [`Rules`] as the renderers take them.
pub fn groups(rules: &Rules) -> Vec<Group<'_>> {
    rules
        .iter()
        .map(|(hosts, answer)| Group { hosts, answer })
        .collect()
}

/// Bytes the rules for `groups` take at most per line of indentation and line ending, for
/// buffer sizing.
pub(crate) fn size_hint(groups: &[Group<'_>]) -> usize {
    groups
        .iter()
        .map(|g| {
            let names: usize = g.hosts.iter().map(|h| h.as_str().len() + 4).sum();
            match g.answer {
                Answer::Template(_) => 2 * names + 512,
                Answer::Rewrite(fqdn) => g.hosts.len() * (fqdn.as_str().len() + 80),
            }
        })
        .sum()
}

/// Writes the rules of each group in turn (nothing for an empty one). `unit` is one level of
/// indentation inside a directive's block.
///
/// With several groups, every group's exact names come before any group's wildcards: CoreDNS
/// answers from the first template (and applies the first rewrite) that matches, so a wildcard
/// of one target written first would take an exact name under it that another target owns
/// (docs/coredns-answers.md). Two wildcards never overlap (each covers one label).
pub(crate) fn write(w: &mut Writer<'_>, groups: &[Group<'_>], unit: &str) {
    let write_one = |w: &mut Writer<'_>, hosts: &BTreeSet<Hostname>, answer: &Answer| match answer {
        Answer::Template(addrs) => write_templates(w, hosts, addrs, unit),
        Answer::Rewrite(fqdn) => write_rewrites(w, hosts, fqdn),
    };
    // Groups without names write nothing, so one group with names is written as it is,
    // whatever empty groups come with it (the same text however the set was split).
    let groups: Vec<&Group<'_>> = groups.iter().filter(|g| !g.hosts.is_empty()).collect();
    if let [one] = groups[..] {
        return write_one(w, one.hosts, one.answer);
    }
    let split: Vec<(BTreeSet<Hostname>, BTreeSet<Hostname>)> = groups
        .iter()
        .map(|g| g.hosts.iter().cloned().partition(|h| !h.is_wildcard()))
        .collect();
    for (g, (exact, _)) in groups.iter().zip(&split) {
        write_one(w, exact, g.answer);
    }
    for (g, (_, wild)) in groups.iter().zip(&split) {
        write_one(w, wild, g.answer);
    }
}

fn write_templates(w: &mut Writer<'_>, hosts: &BTreeSet<Hostname>, addrs: &ProxyAddrs, unit: &str) {
    let names = hosts.iter().map(Hostname::as_str);
    let patterns = name_regex::regexes(names.clone());
    if patterns.is_empty() {
        return;
    }
    let patterns = patterns.join(" ");
    let zones = name_regex::zones(names).join(" ");
    for (qtype, v6) in [("A", false), ("AAAA", true)] {
        w.line(&["template IN ", qtype, " ", &zones, " {"]);
        w.line(&[unit, "match ", &patterns]);
        for ip in addrs.of(v6) {
            let ttl = TTL.to_string();
            let ip = ip.to_string();
            w.line(&[
                unit,
                "answer \"{{ .Name }} ",
                &ttl,
                " IN ",
                qtype,
                " ",
                &ip,
                "\"",
            ]);
        }
        w.line(&[unit, "fallthrough"]);
        w.line(&["}"]);
    }
}

/// One line per host, in the set's order: `rewrite name HOST PROXY` for an exact name (CoreDNS
/// maps the answer back to the name asked on every version), and for a wildcard
/// `rewrite name regex ^[a-z0-9-]+\.BASE\.$ PROXY answer auto` (one LDH label, as a wildcard
/// certificate covers; `answer auto` maps the proxy's name in the answer back).
fn write_rewrites(w: &mut Writer<'_>, hosts: &BTreeSet<Hostname>, proxy: &ProxyFqdn) {
    let mut escaped = String::new();
    for h in hosts {
        if h.is_wildcard() {
            escaped.clear();
            for (i, label) in h.base().split('.').enumerate() {
                if i > 0 {
                    escaped.push_str("\\.");
                }
                escaped.push_str(label);
            }
            w.line(&[
                "rewrite name regex ^",
                name_regex::WILDCARD_LABEL,
                "\\.",
                &escaped,
                "\\.$ ",
                proxy.as_str(),
                " answer auto",
            ]);
        } else {
            w.line(&["rewrite name ", h.as_str(), " ", proxy.as_str()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{BEGIN_MARKER, DEFAULT_PROXY_FQDN, END_MARKER};
    use crate::hostname::HostPolicy;

    fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        names.iter().map(|n| p.check(n).unwrap()).collect()
    }

    fn addrs(ips: &[&str]) -> Answer {
        let ips: Vec<IpAddr> = ips.iter().map(|s| s.parse().unwrap()).collect();
        Answer::Template(ProxyAddrs::new(&ips).unwrap())
    }

    fn render(names: &[&str], answer: &Answer) -> String {
        let mut w = Writer::new(&[], "", "\n", 0);
        let hosts = hosts(names);
        write(
            &mut w,
            &[Group {
                hosts: &hosts,
                answer,
            }],
            "  ",
        );
        w.finish(true, "")
    }

    #[test]
    fn several_targets_put_exact_names_before_wildcards() {
        let (default, other) = (addrs(&["10.0.0.1"]), addrs(&["10.0.0.2"]));
        let (wild, exact) = (
            hosts(&["*.example.com", "b.example.org"]),
            hosts(&["a.example.com"]),
        );
        let mut w = Writer::new(&[], "", "\n", 0);
        let groups = [
            Group {
                hosts: &wild,
                answer: &default,
            },
            Group {
                hosts: &exact,
                answer: &other,
            },
        ];
        write(&mut w, &groups, "  ");
        let text = w.finish(true, "");
        let matches: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with("match ") || l.contains(" IN A 10."))
            .map(str::trim)
            .collect();
        // The default target's exact name, the other target's exact name, then the wildcard
        // (each in the A template, then the AAAA one): a.example.com is answered by its own
        // target although *.example.com covers it.
        assert_eq!(
            matches,
            [
                r"match ^b\.example\.org\.$",
                r#"answer "{{ .Name }} 30 IN A 10.0.0.1""#,
                r"match ^b\.example\.org\.$",
                r"match ^a\.example\.com\.$",
                r#"answer "{{ .Name }} 30 IN A 10.0.0.2""#,
                r"match ^a\.example\.com\.$",
                r"match ^[a-z0-9-]+\.example\.com\.$",
                r#"answer "{{ .Name }} 30 IN A 10.0.0.1""#,
                r"match ^[a-z0-9-]+\.example\.com\.$",
            ],
            "{text}"
        );
    }

    #[test]
    fn template_pair_per_family() {
        let names = ["shop.example.com", "*.apps.example.org"];
        let re = r"^(?:[a-z0-9-]+\.apps\.example\.org|shop\.example\.com)\.$";
        let pair = |a: &str, aaaa: &str| {
            format!(
                "{BEGIN_MARKER}\ntemplate IN A example.com example.org {{\n  match {re}\n{a}  \
                 fallthrough\n}}\ntemplate IN AAAA example.com example.org {{\n  match \
                 {re}\n{aaaa}  fallthrough\n}}\n{END_MARKER}\n"
            )
        };
        let a = "  answer \"{{ .Name }} 30 IN A 10.96.0.5\"\n";
        let aaaa = "  answer \"{{ .Name }} 30 IN AAAA fd00::5\"\n";
        for (ips, want) in [
            (&["10.96.0.5"][..], pair(a, "")),
            (&["fd00::5", "10.96.0.5"], pair(a, aaaa)),
            (&["fd00::5"], pair("", aaaa)),
        ] {
            assert_eq!(render(&names, &addrs(ips)), want, "{ips:?}");
        }
        assert_eq!(
            render(&[], &addrs(&["10.96.0.5"])),
            format!("{BEGIN_MARKER}\n{END_MARKER}\n")
        );
    }

    #[test]
    fn rewrite_lines() {
        let fqdn = ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap();
        assert_eq!(
            render(
                &["b.example.com", "*.apps.example.org"],
                &Answer::Rewrite(fqdn)
            ),
            format!(
                "{BEGIN_MARKER}\nrewrite name regex ^[a-z0-9-]+\\.apps\\.example\\.org\\.$ \
                 {DEFAULT_PROXY_FQDN} answer auto\nrewrite name b.example.com \
                 {DEFAULT_PROXY_FQDN}\n{END_MARKER}\n"
            )
        );
    }

    #[test]
    fn oldest_coredns_per_form() {
        let fqdn = Answer::Rewrite(ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap());
        let ip = addrs(&["10.0.0.1"]);
        let (exact, wild) = (hosts(&["a.example.com"]), hosts(&["*.example.com"]));
        assert_eq!(oldest_coredns(&wild, &fqdn).0, Version(1, 8, 4));
        assert_eq!(oldest_coredns(&exact, &fqdn).0, Version(1, 7, 0));
        assert_eq!(oldest_coredns(&wild, &ip).0, Version(1, 7, 0));
        for (tag, want) in [
            ("1.8.3", Some(Version(1, 8, 3))),
            ("v1.11.3-eksbuild.1", Some(Version(1, 11, 3))),
            ("1.12", Some(Version(1, 12, 0))),
            ("latest", None),
        ] {
            assert_eq!(Version::parse(tag), want, "{tag}");
        }
        assert!(Version(1, 8, 3) < Version(1, 8, 4) && Version(1, 10, 0) > Version(1, 8, 4));
    }
}
