//! Which names may be hairpinned. Hostnames come from tenant-controlled objects and end up in
//! cluster-wide DNS configuration, so every name passes through [`HostPolicy::check`] and only a
//! validated [`Hostname`] can reach an editor.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// A validated, normalised hostname: lowercase RFC 1123, no trailing dot, at least two labels,
/// optionally a `*.` wildcard in the leftmost label. It cannot hold whitespace, braces, quotes or
/// control characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hostname(String);

impl Hostname {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `*.example.com`
    pub fn is_wildcard(&self) -> bool {
        self.0.starts_with("*.")
    }

    /// The name under the wildcard (`example.com` for `*.example.com`), or the name itself.
    pub fn base(&self) -> &str {
        self.0.strip_prefix("*.").unwrap_or(&self.0)
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Hostname {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A name as written in an object (maybe refused: any bytes), for a log field. In text logs:
/// control characters escaped, so a newline cannot forge a log line, and quoted only when it is
/// empty or holds a space or a quote, where the text format would otherwise misread it. In JSON
/// logs, which escape every string value themselves: the name as it is, so that a parser reads
/// back the object's bytes rather than a quoted, escaped copy of them.
pub struct LogName<'a>(pub &'a str);

/// Whether logs are JSON: set once by `telemetry::init` before the first line is logged. A
/// process-wide flag because a log field's `Display` cannot see the formatter it writes to.
static JSON_LOGS: AtomicBool = AtomicBool::new(false);

/// Tells [`LogName`] that log lines are JSON (`--log-format json`).
pub fn log_names_in_json() {
    JSON_LOGS.store(true, Ordering::Relaxed);
}

impl fmt::Display for LogName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_log_name(f, self.0, JSON_LOGS.load(Ordering::Relaxed))
    }
}

fn write_log_name(f: &mut impl fmt::Write, name: &str, json: bool) -> fmt::Result {
    if json {
        f.write_str(name)
    } else if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '"') {
        write!(f, "{name:?}")
    } else {
        write!(f, "{}", name.escape_debug())
    }
}

/// Why a name was refused. `as_str` is a stable token used in logs, Events and metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rejection {
    Empty,
    TooLong,
    InvalidCharacter,
    BadLabel,
    BadWildcard,
    WildcardTld,
    SingleLabel,
    IpLiteral,
    ClusterDomain,
    InternalZone,
    NotAllowed,
    Denied,
    /// A routing rule matches hosts by a regular expression (Traefik `HostRegexp`,
    /// `HostSNIRegexp`), not by name.
    Pattern,
    /// A routing rule excludes hosts (Traefik `!Host(...)`).
    Negated,
    /// A routing rule is no expression ouroboros reads (unbalanced, an unknown matcher, a
    /// `Host()` argument that is not a quoted literal).
    UnreadRule,
}

impl Rejection {
    pub const ALL: [Rejection; 15] = [
        Rejection::Empty,
        Rejection::TooLong,
        Rejection::InvalidCharacter,
        Rejection::BadLabel,
        Rejection::BadWildcard,
        Rejection::WildcardTld,
        Rejection::SingleLabel,
        Rejection::IpLiteral,
        Rejection::ClusterDomain,
        Rejection::InternalZone,
        Rejection::NotAllowed,
        Rejection::Denied,
        Rejection::Pattern,
        Rejection::Negated,
        Rejection::UnreadRule,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Empty => "empty",
            Rejection::TooLong => "too-long",
            Rejection::InvalidCharacter => "invalid-character",
            Rejection::BadLabel => "bad-label",
            Rejection::BadWildcard => "bad-wildcard",
            Rejection::WildcardTld => "wildcard-tld",
            Rejection::SingleLabel => "single-label",
            Rejection::IpLiteral => "ip-literal",
            Rejection::ClusterDomain => "cluster-domain",
            Rejection::InternalZone => "internal-zone",
            Rejection::NotAllowed => "not-in-allow-list",
            Rejection::Denied => "denied",
            Rejection::Pattern => "pattern",
            Rejection::Negated => "negated",
            Rejection::UnreadRule => "unread-rule",
        }
    }

    /// A sentence for humans (logs, Events, doctor).
    pub fn explain(self) -> &'static str {
        match self {
            Rejection::Empty => "the name is empty",
            Rejection::TooLong => "the name is longer than 253 characters",
            Rejection::InvalidCharacter => {
                "the name contains a character other than a-z, 0-9, '-' and '.'"
            }
            Rejection::BadLabel => {
                "a label is empty, longer than 63 characters, or starts or ends with '-'"
            }
            Rejection::BadWildcard => {
                "a wildcard is only allowed as the whole leftmost label ('*.')"
            }
            Rejection::WildcardTld => {
                "a wildcard directly under a top-level domain ('*.com') would hairpin every \
                 name of that domain"
            }
            Rejection::SingleLabel => "single-label names are not hairpinned",
            Rejection::IpLiteral => "the name is an IP address or ends in a numeric label",
            Rejection::ClusterDomain => "the name is inside the cluster domain",
            Rejection::InternalZone => {
                "the name is in an internal zone (localhost, svc, in-addr.arpa, ip6.arpa)"
            }
            Rejection::NotAllowed => "the name is not under any --allow-domain suffix",
            Rejection::Denied => "the name is under a --deny-domain suffix",
            Rejection::Pattern => {
                "the rule matches hosts by a regular expression, not by name: the names it \
                 covers are not guessed; name them with Host()/HostSNI() to hairpin them"
            }
            Rejection::Negated => {
                "the rule matches every host but some (a negated Host()): the names it covers \
                 are not guessed; name them with Host()/HostSNI() to hairpin them"
            }
            Rejection::UnreadRule => {
                "the rule is no match expression ouroboros reads (unbalanced, an unknown \
                 matcher, or a Host() argument that is not a quoted name): no name is taken from it"
            }
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Zones that never leave the cluster or the host, whatever the cluster domain is.
const INTERNAL_ZONES: [&str; 4] = ["localhost", "svc", "in-addr.arpa", "ip6.arpa"];

/// What may be hairpinned: the cluster domain is always excluded; allow/deny suffixes narrow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPolicy {
    cluster_domain: String,
    allow: Vec<String>,
    deny: Vec<String>,
}

impl HostPolicy {
    /// Suffixes are normalised (lowercase, no leading `*.`/`.`, no trailing dot).
    pub fn new(cluster_domain: &str, allow: &[String], deny: &[String]) -> Self {
        Self {
            cluster_domain: normalise_suffix(cluster_domain),
            allow: allow
                .iter()
                .map(|s| normalise_suffix(s))
                .filter(|s| !s.is_empty())
                .collect(),
            deny: deny
                .iter()
                .map(|s| normalise_suffix(s))
                .filter(|s| !s.is_empty())
                .collect(),
        }
    }

    pub fn cluster_domain(&self) -> &str {
        &self.cluster_domain
    }

    /// Validates and normalises one raw name from an object.
    pub fn check(&self, raw: &str) -> Result<Hostname, Rejection> {
        let name = syntax(raw)?;
        let base = name.strip_prefix("*.").unwrap_or(&name);
        if !self.cluster_domain.is_empty() && under(base, &self.cluster_domain) {
            return Err(Rejection::ClusterDomain);
        }
        if INTERNAL_ZONES.iter().any(|z| under(base, z)) {
            return Err(Rejection::InternalZone);
        }
        if self.deny.iter().any(|d| under(base, d)) {
            return Err(Rejection::Denied);
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|a| under(base, a)) {
            return Err(Rejection::NotAllowed);
        }
        Ok(Hostname(name))
    }
}

fn normalise_suffix(s: &str) -> String {
    let s = s.trim().trim_end_matches('.');
    let s = s.strip_prefix("*.").unwrap_or(s);
    s.trim_start_matches('.').to_ascii_lowercase()
}

/// `name` equals `suffix` or ends with `.suffix`.
fn under(name: &str, suffix: &str) -> bool {
    name == suffix
        || (name.len() > suffix.len()
            && name.ends_with(suffix)
            && name.as_bytes()[name.len() - suffix.len() - 1] == b'.')
}

/// RFC 1123 syntax, wildcard and IP-literal rules; returns the normalised name.
fn syntax(raw: &str) -> Result<String, Rejection> {
    if raw.is_empty() {
        return Err(Rejection::Empty);
    }
    // Check characters before normalising so nothing hostile is ever lowercased into shape.
    if !raw
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'*')
    {
        return Err(Rejection::InvalidCharacter);
    }
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    if name.is_empty() {
        return Err(Rejection::Empty);
    }
    if name.len() > 253 {
        return Err(Rejection::TooLong);
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(Rejection::IpLiteral);
    }
    let (wildcard, base) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name.as_str()),
    };
    if base.contains('*') {
        return Err(Rejection::BadWildcard);
    }
    let labels: Vec<&str> = base.split('.').collect();
    for label in &labels {
        if label.is_empty() || label.len() > 63 || label.starts_with('-') || label.ends_with('-') {
            return Err(Rejection::BadLabel);
        }
    }
    if labels.len() < 2 && !wildcard {
        return Err(Rejection::SingleLabel);
    }
    // `*.com` would hairpin a whole TLD.
    if wildcard && labels.len() < 2 {
        return Err(Rejection::WildcardTld);
    }
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(Rejection::IpLiteral);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_names_are_escaped_and_quoted_only_where_text_would_misread_them() {
        for (raw, shown) in [
            ("shop.example.com", "shop.example.com"),
            ("shop_admin.example.com", "shop_admin.example.com"),
            ("brace.example.com}", "brace.example.com}"),
            ("nul\0byte.example.com", "nul\\0byte.example.com"),
            (
                "newline.example.com\nrewrite",
                "\"newline.example.com\\nrewrite\"",
            ),
            ("space inside.example.com", "\"space inside.example.com\""),
            ("\"quoted\"", "\"\\\"quoted\\\"\""),
            ("", "\"\""),
        ] {
            let mut text = String::new();
            write_log_name(&mut text, raw, false).unwrap();
            assert_eq!(text, shown, "{raw:?}");
            let mut json = String::new();
            write_log_name(&mut json, raw, true).unwrap();
            assert_eq!(json, raw, "JSON escapes by itself");
        }
    }

    fn policy() -> HostPolicy {
        HostPolicy::new("cluster.local", &[], &[])
    }

    #[test]
    fn accepts_and_normalises() {
        for (raw, want) in [
            ("example.com", "example.com"),
            ("Foo.Example.COM", "foo.example.com"),
            ("foo.example.com.", "foo.example.com"),
            ("*.example.com", "*.example.com"),
            ("*.Example.com.", "*.example.com"),
            ("a-b.c0.example", "a-b.c0.example"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("123.example.com", "123.example.com"),
            ("cluster.local.example.com", "cluster.local.example.com"),
            ("mycluster.local", "mycluster.local"),
        ] {
            let h = policy()
                .check(raw)
                .unwrap_or_else(|e| panic!("{raw:?}: {e}"));
            assert_eq!(h.as_str(), want, "{raw:?}");
        }
        let long_label = "a".repeat(63);
        assert!(policy().check(&format!("{long_label}.example.com")).is_ok());
        let max = format!("{0}.{0}.{0}.{1}.com", "a".repeat(63), "b".repeat(57));
        assert_eq!(max.len(), 253);
        assert!(policy().check(&max).is_ok());
    }

    #[test]
    fn rejects() {
        use Rejection::*;
        let too_long = format!("{0}.{0}.{0}.{1}.com", "a".repeat(63), "b".repeat(58));
        let long_label = format!("{}.example.com", "a".repeat(64));
        for (raw, want) in [
            ("", Empty),
            (".", Empty),
            (too_long.as_str(), TooLong),
            (long_label.as_str(), BadLabel),
            ("foo bar.example.com", InvalidCharacter),
            ("foo.example.com\n", InvalidCharacter),
            ("foo.example.com}\nrewrite name x y", InvalidCharacter),
            ("foo{.example.com", InvalidCharacter),
            ("\"foo\".example.com", InvalidCharacter),
            ("foo_bar.example.com", InvalidCharacter),
            ("foo/.example.com", InvalidCharacter),
            ("ex\u{e4}mple.com", InvalidCharacter),
            ("foo\0.example.com", InvalidCharacter),
            ("foo..example.com", BadLabel),
            (".example.com", BadLabel),
            ("-foo.example.com", BadLabel),
            ("foo-.example.com", BadLabel),
            ("example.com..", BadLabel),
            ("foo.*.example.com", BadWildcard),
            ("*foo.example.com", BadWildcard),
            ("**.example.com", BadWildcard),
            ("*.com", WildcardTld),
            ("*", BadWildcard),
            ("localhost", SingleLabel),
            ("intranet", SingleLabel),
            ("10.0.0.1", IpLiteral),
            ("::1", InvalidCharacter),
            ("1.2.3.4.", IpLiteral),
            ("example.123", IpLiteral),
            ("kubernetes.default.svc.cluster.local", ClusterDomain),
            ("cluster.local", ClusterDomain),
            ("*.svc.cluster.local", ClusterDomain),
            ("foo.svc", InternalZone),
            ("foo.localhost", InternalZone),
            ("1.0.0.10.in-addr.arpa", InternalZone),
            ("b.a.ip6.arpa", InternalZone),
        ] {
            assert_eq!(policy().check(raw), Err(want), "{raw:?}");
        }
    }

    #[test]
    fn allow_and_deny() {
        let p = HostPolicy::new(
            "corp.internal.",
            &["Example.com.".into(), "*.example.org".into()],
            &["secret.example.com".into()],
        );
        assert!(p.check("example.com").is_ok());
        assert!(p.check("a.example.com").is_ok());
        assert!(p.check("*.example.org").is_ok());
        assert_eq!(p.check("badexample.com"), Err(Rejection::NotAllowed));
        assert_eq!(p.check("example.net"), Err(Rejection::NotAllowed));
        assert_eq!(p.check("secret.example.com"), Err(Rejection::Denied));
        assert_eq!(p.check("*.secret.example.com"), Err(Rejection::Denied));
        assert_eq!(p.check("x.corp.internal"), Err(Rejection::ClusterDomain));
        assert!(p.check("x.cluster.local").is_err()); // not allowed anyway
        let open = HostPolicy::new("corp.internal", &[], &[]);
        assert!(open.check("x.cluster.local").is_ok());
    }

    #[test]
    fn wildcard_parts() {
        let h = policy().check("*.example.com").unwrap();
        assert!(h.is_wildcard());
        assert_eq!(h.base(), "example.com");
        let h = policy().check("www.example.com").unwrap();
        assert!(!h.is_wildcard());
        assert_eq!(h.base(), "www.example.com");
    }

    #[test]
    fn reasons_have_distinct_tokens() {
        let mut tokens: Vec<_> = Rejection::ALL.iter().map(|r| r.as_str()).collect();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), Rejection::ALL.len());
    }
}
