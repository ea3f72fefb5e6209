//! The marked block in a hosts file: one `IP host` line per exact hostname and proxy IP
//! (hostname-major, IPs sorted IPv4 first and deduplicated). An existing block is replaced in
//! place; otherwise the block is appended at the end. Appending to a file without a final newline
//! adds a line ending before the block and none after it, which removal takes back, so the file
//! round-trips exactly.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::block::{self, Writer};
use crate::hostname::Hostname;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub text: String,
    pub changed: bool,
    /// Wildcards cannot be expressed in a hosts file; the caller warns about each.
    pub skipped_wildcards: Vec<Hostname>,
}

/// Why a hosts file cannot be edited. `line` is 1-based; 0 when no line is at fault (no proxy IP).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct HostsError {
    pub line: usize,
    pub reason: String,
}

/// Names and the addresses their lines give: one proxy target's hosts and that proxy's IPs.
#[derive(Clone, Copy, Debug)]
pub struct HostsGroup<'a> {
    pub hosts: &'a BTreeSet<Hostname>,
    pub ips: &'a [IpAddr],
}

/// Replaces (or inserts, or with an empty set removes) our block of `IP host` lines.
pub fn splice(text: &str, hosts: &BTreeSet<Hostname>, ips: &[IpAddr]) -> Result<Edit, HostsError> {
    splice_groups(text, &[HostsGroup { hosts, ips }])
}

/// [`splice`] with each group's names on its own proxy's addresses, group after group.
pub fn splice_groups(text: &str, groups: &[HostsGroup<'_>]) -> Result<Edit, HostsError> {
    let span = block::find(text, "hosts file").map_err(|e| HostsError {
        line: e.line,
        reason: e.reason,
    })?;
    let mut skipped_wildcards = Vec::new();
    // Each group's exact names with its addresses, sorted (IPv4 first) and deduplicated.
    let mut lines: Vec<(Vec<&Hostname>, Vec<String>)> = Vec::new();
    for g in groups {
        let (wild, exact): (Vec<&Hostname>, Vec<&Hostname>) =
            g.hosts.iter().partition(|h| h.is_wildcard());
        skipped_wildcards.extend(wild.into_iter().cloned());
        if exact.is_empty() {
            continue;
        }
        let mut ips = g.ips.to_vec();
        ips.sort();
        ips.dedup();
        if ips.is_empty() {
            return Err(HostsError {
                line: 0,
                reason: format!(
                    "no proxy IP to write for {} hostname(s); pass --proxy-ip (IPv4 and/or IPv6)",
                    exact.len()
                ),
            });
        }
        lines.push((exact, ips.iter().map(IpAddr::to_string).collect()));
    }

    let out = if lines.is_empty() {
        match &span {
            Some(s) => block::remove(text, s),
            None => text.to_owned(),
        }
    } else {
        let eol = match &span {
            Some(s) => block::eol(&block::remove(text, s), Some(s)),
            None => block::eol(text, None),
        };
        let (prefix, lead, trailing_eol, suffix) = match &span {
            Some(s) => (&text[..s.start], "", s.trailing_eol, &text[s.end..]),
            None if text.is_empty() || text.ends_with('\n') => (text, "", true, ""),
            None => (text, eol, false, ""),
        };
        let per_line = 48 + eol.len();
        let cap = lead.len()
            + suffix.len()
            + lines
                .iter()
                .flat_map(|(exact, ips)| {
                    exact
                        .iter()
                        .map(|h| ips.len() * (h.as_str().len() + per_line))
                })
                .sum::<usize>()
            + 128;
        let mut w = Writer::new(&[prefix, lead], "", eol, cap);
        for (exact, ips) in &lines {
            for h in exact {
                for ip in ips {
                    w.line(&[ip, " ", h.as_str()]);
                }
            }
        }
        w.finish(trailing_eol, suffix)
    };
    Ok(Edit {
        changed: out != text,
        text: out,
        skipped_wildcards,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{BEGIN_MARKER, END_MARKER};
    use crate::hostname::HostPolicy;

    fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        names.iter().map(|n| p.check(n).unwrap()).collect()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    const BASE: &str = "127.0.0.1 localhost\n::1 localhost ip6-localhost\n";

    #[test]
    fn appends_replaces_and_removes() {
        let e = splice(
            BASE,
            &hosts(&["b.example.com", "a.example.com", "*.example.org"]),
            &ips(&["fd00::5", "10.43.0.5", "10.43.0.5"]),
        )
        .unwrap();
        let want = format!(
            "{BASE}{BEGIN_MARKER}\n10.43.0.5 a.example.com\nfd00::5 a.example.com\n10.43.0.5 b.example.com\nfd00::5 b.example.com\n{END_MARKER}\n"
        );
        assert_eq!(e.text, want);
        assert!(e.changed);
        assert_eq!(
            e.skipped_wildcards,
            hosts(&["*.example.org"]).into_iter().collect::<Vec<_>>()
        );
        let again = splice(
            &e.text,
            &hosts(&["a.example.com", "b.example.com"]),
            &ips(&["10.43.0.5", "fd00::5"]),
        )
        .unwrap();
        assert_eq!(again.text, want);
        assert!(!again.changed);
        let gone = splice(&e.text, &BTreeSet::new(), &[]).unwrap();
        assert_eq!(gone.text, BASE);
        // Only wildcards: nothing to write, the block goes.
        let w = splice(&e.text, &hosts(&["*.example.org"]), &ips(&["10.0.0.1"])).unwrap();
        assert_eq!(w.text, BASE);
        assert_eq!(w.skipped_wildcards.len(), 1);
    }

    #[test]
    fn no_final_newline_and_crlf() {
        for (base, eol) in [
            ("127.0.0.1 localhost", "\n"),
            ("127.0.0.1 localhost\r\n::1 localhost", "\r\n"),
            ("", "\n"),
        ] {
            let e = splice(base, &hosts(&["a.example.com"]), &ips(&["10.0.0.1"])).unwrap();
            let lead = if base.is_empty() { "" } else { eol };
            let tail = if base.is_empty() { eol } else { "" };
            assert_eq!(
                e.text,
                format!(
                    "{base}{lead}{BEGIN_MARKER}{eol}10.0.0.1 a.example.com{eol}{END_MARKER}{tail}"
                )
            );
            let again = splice(&e.text, &hosts(&["a.example.com"]), &ips(&["10.0.0.1"])).unwrap();
            assert_eq!(again.text, e.text);
            assert_eq!(splice(&e.text, &BTreeSet::new(), &[]).unwrap().text, base);
        }
    }

    #[test]
    fn block_in_the_middle_stays_there() {
        let t = format!("a\n{BEGIN_MARKER}\n1.1.1.1 stale.example.com\n{END_MARKER}\nb\n");
        let e = splice(&t, &hosts(&["new.example.com"]), &ips(&["10.0.0.1"])).unwrap();
        assert_eq!(
            e.text,
            format!("a\n{BEGIN_MARKER}\n10.0.0.1 new.example.com\n{END_MARKER}\nb\n")
        );
    }

    #[test]
    fn errors() {
        let t = format!("a\n{BEGIN_MARKER}\n");
        assert_eq!(splice(&t, &BTreeSet::new(), &[]).unwrap_err().line, 2);
        let e = splice("a\n", &hosts(&["a.example.com"]), &[]).unwrap_err();
        assert_eq!(e.line, 0);
        assert!(e.reason.contains("--proxy-ip"));
    }
}
