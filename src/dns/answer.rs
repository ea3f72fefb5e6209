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
//! For large sets the opt-in `view` form scales where the pair cannot: each name costs its
//! length and four bytes, and CoreDNS looks it up in a set instead of running patterns. It is
//! one server block per top-level domain of the names, put before the root block, whose `view`
//! lets through only A and AAAA queries for the hairpinned names:
//!
//! ```text
//! com:53 {
//!     view ouroboros {
//!         expr type() in ['A','AAAA'] && (name() in ['shop.example.com.'] || name() matches '^[a-z0-9-]+[.]apps[.]example[.]com[.]$')
//!     }
//!     template IN A {
//!         answer "{{ .Name }} 30 IN A 10.96.0.5"
//!     }
//!     template IN AAAA
//! }
//! ```
//!
//! CoreDNS routes a query to the server block of the longest matching zone whose `view` passes
//! (core/dnsserver/server.go walks the name's labels, and a filtered block shares its zone with
//! others), so every other query (another type, a name not in the set, a name under no listed
//! top-level domain, in-cluster names included) goes on to the root block exactly as without
//! ours; `expr` compiles a literal string list after `in` to a set. Needs CoreDNS 1.10 (`view`);
//! node-local-dns does not compile `view` in, so its block keeps the pair.
//!
//! The opt-in alternative is the reference tool's `rewrite name` lines to the proxy Service's
//! name, for who wants a name target; its wildcard lines need CoreDNS 1.8.4 (`answer auto`).

use std::collections::{BTreeMap, BTreeSet};
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
    /// Server blocks of their own, one per top-level domain, whose `view` passes only A/AAAA
    /// queries for the hairpinned names to a `template` pair with these addresses (opt-in, for
    /// large sets). Where a block can only hold plugin lines (the import snippet,
    /// node-local-dns), it is written as the [`Answer::Template`] pair.
    View(ProxyAddrs),
    /// `rewrite name` lines to the proxy Service's FQDN (opt-in).
    Rewrite(ProxyFqdn),
}

impl Answer {
    /// The form's name, as `--coredns-answer` spells it.
    pub fn form(&self) -> &'static str {
        match self {
            Answer::Template(_) => "template",
            Answer::View(_) => "view",
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
        Answer::View(_) => (
            Version(1, 10, 0),
            "its server blocks use the `view` plugin, which CoreDNS has from 1.10.0",
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
                Answer::View(_) => names + 4096,
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
        Answer::Template(addrs) | Answer::View(addrs) => write_templates(w, hosts, addrs, unit),
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
            answer_line(w, &[unit], qtype, ip);
        }
        w.line(&[unit, "fallthrough"]);
        w.line(&["}"]);
    }
}

/// A template's `answer "{{ .Name }} TTL IN TYPE IP"` line, after `indent`.
fn answer_line(w: &mut Writer<'_>, indent: &[&str], qtype: &str, ip: &IpAddr) {
    let (ttl, ip) = (TTL.to_string(), ip.to_string());
    let mut parts = indent.to_vec();
    parts.extend(["answer \"{{ .Name }} ", &ttl, " IN ", qtype, " ", &ip, "\""]);
    w.line(&parts);
}

/// Where the `view` form's server blocks listen: as the root block does.
pub(crate) struct Listen<'a> {
    /// The root block's ports: each block is keyed `TLD:PORT` for each.
    pub ports: Vec<&'a str>,
    /// The root block's directive lines that say where it listens and what it reports (`bind`,
    /// `prometheus`), copied into each block.
    pub copied: Vec<&'a str>,
}

/// The server blocks of the `view` form (see the module doc), for the groups whose answer is
/// [`Answer::View`] (others write nothing here): one block per top-level domain and group.
///
/// With several groups, every group's exact names come before any group's wildcards, as in the
/// pair: CoreDNS takes the first block whose `view` passes, and a wildcard of one target must not
/// take an exact name another owns.
pub(crate) fn write_views(
    w: &mut Writer<'_>,
    groups: &[Group<'_>],
    listen: &Listen<'_>,
    unit: &str,
) {
    // (group, top-level domain) -> (exact names, wildcards), in the order the blocks are written.
    type Names<'a> = (Vec<&'a str>, Vec<&'a str>);
    let views: Vec<(&ProxyAddrs, BTreeMap<&str, Names<'_>>)> = groups
        .iter()
        .filter_map(|g| match g.answer {
            Answer::View(addrs) if !g.hosts.is_empty() => {
                let mut by_tld: BTreeMap<&str, Names<'_>> = BTreeMap::new();
                for h in g.hosts {
                    let tld = h.base().rsplit('.').next().unwrap_or(h.base());
                    let entry = by_tld.entry(tld).or_default();
                    if h.is_wildcard() {
                        entry.1.push(h.as_str());
                    } else {
                        entry.0.push(h.as_str());
                    }
                }
                Some((addrs, by_tld))
            }
            _ => None,
        })
        .collect();
    let tlds: BTreeSet<&str> = views
        .iter()
        .flat_map(|(_, by_tld)| by_tld.keys().copied())
        .collect();
    let one = views.len() == 1;
    for tld in tlds {
        let mut blocks: Vec<(&ProxyAddrs, &[&str], &[&str])> = Vec::new();
        for (addrs, by_tld) in &views {
            if let Some((exact, wild)) = by_tld.get(tld) {
                blocks.push((addrs, exact, if one { wild } else { &[] }));
            }
        }
        if !one {
            for (addrs, by_tld) in &views {
                if let Some((_, wild)) = by_tld.get(tld) {
                    blocks.push((addrs, &[], wild));
                }
            }
        }
        for (addrs, exact, wild) in blocks {
            if exact.is_empty() && wild.is_empty() {
                continue;
            }
            write_view(w, tld, listen, addrs, exact, wild, unit);
        }
    }
}

/// One server block of the `view` form.
fn write_view(
    w: &mut Writer<'_>,
    tld: &str,
    listen: &Listen<'_>,
    addrs: &ProxyAddrs,
    exact: &[&str],
    wild: &[&str],
    unit: &str,
) {
    let keys: Vec<String> = listen.ports.iter().map(|p| format!("{tld}:{p}")).collect();
    w.line(&[&keys.join(" "), " {"]);
    for line in &listen.copied {
        w.line(&[unit, line]);
    }
    w.line(&[unit, "view ouroboros {"]);
    w.line(&[unit, unit, "expr ", &view_expr(exact, wild)]);
    w.line(&[unit, "}"]);
    for (qtype, v6) in [("A", false), ("AAAA", true)] {
        let mut ips = addrs.of(v6).peekable();
        if ips.peek().is_none() {
            // No answer: NODATA, as the pair gives an IPv4-only proxy's AAAA.
            w.line(&[unit, "template IN ", qtype]);
            continue;
        }
        w.line(&[unit, "template IN ", qtype, " {"]);
        for ip in ips {
            answer_line(w, &[unit, unit], qtype, ip);
        }
        w.line(&[unit, "}"]);
    }
    w.line(&["}"]);
}

/// The `view` expression: an A or AAAA query for one of `exact` or a name one of `wild` covers.
/// One Corefile token per list (no whitespace), single-quoted strings (the Corefile's lexer
/// leaves `'` alone) and `[.]` for a literal dot in the pattern (an `expr` string has no `\.`
/// escape). Hostnames are validated lower-case LDH labels, so nothing else needs quoting.
fn view_expr(exact: &[&str], wild: &[&str]) -> String {
    let mut alternatives = Vec::new();
    if !exact.is_empty() {
        let mut set = String::with_capacity(exact.iter().map(|n| n.len() + 4).sum::<usize>() + 12);
        set.push_str("name() in [");
        for (i, n) in exact.iter().enumerate() {
            if i > 0 {
                set.push(',');
            }
            set.push('\'');
            set.push_str(n);
            set.push_str(".'");
        }
        set.push(']');
        alternatives.push(set);
    }
    if let Some(re) = name_regex::regex(wild.iter().copied()) {
        alternatives.push(format!("name() matches '{}'", re.replace("\\.", "[.]")));
    }
    match &alternatives[..] {
        [one] => format!("type() in ['A','AAAA'] && {one}"),
        _ => format!("type() in ['A','AAAA'] && ({})", alternatives.join(" || ")),
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

    fn views(groups: &[Group<'_>], ports: &[&str], copied: &[&str]) -> String {
        let mut w = Writer::new(&[], "", "\n", 0);
        let listen = Listen {
            ports: ports.to_vec(),
            copied: copied.to_vec(),
        };
        write_views(&mut w, groups, &listen, "  ");
        w.finish(true, "")
    }

    fn view_addrs(ips: &[&str]) -> Answer {
        let Answer::Template(a) = addrs(ips) else {
            unreachable!()
        };
        Answer::View(a)
    }

    #[test]
    fn view_expressions() {
        let cases: &[(&[&str], &[&str], &str)] = &[
            (
                &["a.example.com", "b.example.com"],
                &[],
                "type() in ['A','AAAA'] && name() in ['a.example.com.','b.example.com.']",
            ),
            (
                &[],
                &["*.apps.example.com"],
                "type() in ['A','AAAA'] && name() matches '^[a-z0-9-]+[.]apps[.]example[.]com[.]$'",
            ),
            (
                &["a.example.com"],
                &["*.apps.example.com", "*.b.example.com"],
                "type() in ['A','AAAA'] && (name() in ['a.example.com.'] || name() matches \
                 '^[a-z0-9-]+[.](?:apps|b)[.]example[.]com[.]$')",
            ),
        ];
        for (exact, wild, want) in cases {
            let got = view_expr(exact, wild);
            assert_eq!(got, *want);
            // One token for the Corefile's lexer per list, and nothing `expr` would unescape.
            assert!(!got.contains('\\') && !got.contains('"'), "{got}");
        }
    }

    #[test]
    fn one_view_block_per_top_level_domain_keyed_on_the_root_ports() {
        let hosts = hosts(&["b.example.com", "a.example.org", "*.apps.example.com"]);
        let v4 = view_addrs(&["10.0.0.1"]);
        let text = views(
            &[Group {
                hosts: &hosts,
                answer: &v4,
            }],
            &["53"],
            &["bind 10.0.0.10"],
        );
        let want = format!(
            "{BEGIN_MARKER}\n\
             com:53 {{\n  bind 10.0.0.10\n  view ouroboros {{\n    expr type() in ['A','AAAA'] && (name() in ['b.example.com.'] || name() matches '^[a-z0-9-]+[.]apps[.]example[.]com[.]$')\n  }}\n  template IN A {{\n    answer \"{{{{ .Name }}}} 30 IN A 10.0.0.1\"\n  }}\n  template IN AAAA\n}}\n\
             org:53 {{\n  bind 10.0.0.10\n  view ouroboros {{\n    expr type() in ['A','AAAA'] && name() in ['a.example.org.']\n  }}\n  template IN A {{\n    answer \"{{{{ .Name }}}} 30 IN A 10.0.0.1\"\n  }}\n  template IN AAAA\n}}\n\
             {END_MARKER}\n"
        );
        assert_eq!(text, want);
        // Dual-stack: the AAAA template answers; two ports: two keys per block.
        let dual = view_addrs(&["10.0.0.1", "fd00::1"]);
        let one = crate::dns::answer::tests::hosts(&["a.example.org"]);
        let text = views(
            &[Group {
                hosts: &one,
                answer: &dual,
            }],
            &["53", "5353"],
            &[],
        );
        assert!(text.contains("org:53 org:5353 {\n"), "{text}");
        assert!(
            text.contains(
                "  template IN AAAA {\n    answer \"{{ .Name }} 30 IN AAAA fd00::1\"\n  }\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn several_view_targets_put_exact_names_before_wildcards() {
        let (default, other) = (view_addrs(&["10.0.0.1"]), view_addrs(&["10.0.0.2"]));
        let (wild, exact) = (hosts(&["*.example.com"]), hosts(&["a.example.com"]));
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
        let text = views(&groups, &["53"], &[]);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("expr ") || l.contains(" IN A 10."))
            .map(str::trim)
            .collect();
        assert_eq!(
            lines,
            [
                "expr type() in ['A','AAAA'] && name() in ['a.example.com.']",
                r#"answer "{{ .Name }} 30 IN A 10.0.0.2""#,
                "expr type() in ['A','AAAA'] && name() matches '^[a-z0-9-]+[.]example[.]com[.]$'",
                r#"answer "{{ .Name }} 30 IN A 10.0.0.1""#,
            ],
            "{text}"
        );
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
