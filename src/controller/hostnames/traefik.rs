//! Traefik's IngressRoute and IngressRouteTCP (`traefik.io/v1alpha1`) as far as their hosts go,
//! and the reader of their `match` rules ([`rule_hosts`]): the literal names of `Host()`,
//! `HostHeader()` and `HostSNI()`, combined through `&&`, `||`, `!` and parentheses. A rule that
//! names hosts by a pattern (`HostRegexp`), excludes them (`!Host`) or does not read is reported,
//! never guessed. Pure: no I/O.
//!
//! Traefik publishes no Rust types for its CRDs, and a generated crate would bring every field
//! of every Traefik kind for the one field read here: `spec.routes[].match`. The struct below is
//! that field; serde skips the rest as it reads.
//!
//! The syntax is Traefik's (v3, and v2's, whose matchers take several arguments:
//! `Host(`a`, `b`)`): matchers `Name(args)` with backquoted or double-quoted string arguments.
//! Traefik's own parser is `github.com/traefik/traefik/v3/pkg/rules`; only the grammar is
//! learned from it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::first_of_each;
use crate::hostname::Rejection;

/// An IngressRoute: its routes' `match` rules.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IngressRoute {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: RoutesSpec,
}

/// An IngressRouteTCP: the same fields (`HostSNI()` in its rules).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IngressRouteTcp {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: RoutesSpec,
}

/// `spec.routes[]` of either kind.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RoutesSpec {
    #[serde(default)]
    pub routes: Vec<RouteRule>,
}

/// One route's `match`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RouteRule {
    #[serde(rename = "match", default)]
    pub rule: String,
}

impl RoutesSpec {
    /// The hosts of every route's rule.
    pub fn hosts(&self) -> RuleHosts {
        let mut all = RuleHosts::default();
        for r in &self.routes {
            let one = rule_hosts(&r.rule);
            all.names.extend(one.names);
            all.unread.extend(one.unread);
        }
        all.names = first_of_each(all.names);
        all
    }
}

/// What a rule says of its hosts: the names it matches, and the parts that name hosts in a way
/// not read (the text of the part, and why).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleHosts {
    pub names: Vec<String>,
    pub unread: Vec<(String, Rejection)>,
}

/// The hosts a `match` rule matches. An empty rule, or one without a host matcher
/// (`PathPrefix(`/`)`, `HostSNI(`*`)`), names none.
pub fn rule_hosts(rule: &str) -> RuleHosts {
    let whole = || RuleHosts {
        names: Vec::new(),
        unread: vec![(rule.trim().to_string(), Rejection::UnreadRule)],
    };
    if rule.trim().is_empty() {
        return RuleHosts::default();
    }
    let Some(tokens) = tokenize(rule) else {
        return whole();
    };
    let mut p = Parser {
        rule,
        tokens,
        at: 0,
        depth: 0,
    };
    let Some(found) = p.or() else {
        return whole();
    };
    if p.at != p.tokens.len() {
        return whole();
    }
    RuleHosts {
        names: first_of_each(found.names),
        unread: found.unread,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    Open,
    Close,
    Comma,
    And,
    Or,
    Not,
}

/// The tokens with their byte offsets (start, end) in the rule; `None` when a character is
/// none of the syntax's (an unterminated string, a lone `&`).
fn tokenize(rule: &str) -> Option<Vec<(Tok, usize, usize)>> {
    let b = rule.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let tok = match b[i] {
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'(' => Tok::Open,
            b')' => Tok::Close,
            b',' => Tok::Comma,
            b'!' => Tok::Not,
            b'&' if b.get(i + 1) == Some(&b'&') => {
                i += 1;
                Tok::And
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                i += 1;
                Tok::Or
            }
            q @ (b'`' | b'"') => {
                let len = rule[i + 1..].find(q as char)?;
                let s = &rule[i + 1..i + 1 + len];
                // A double-quoted string with an escape is Go syntax this does not decode.
                if q == b'"' && s.contains('\\') {
                    return None;
                }
                i += len + 1;
                Tok::Str(s.to_string())
            }
            c if c.is_ascii_alphabetic() => {
                while b.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) {
                    i += 1;
                }
                Tok::Ident(rule[start..=i].to_string())
            }
            _ => return None,
        };
        i += 1;
        out.push((tok, start, i));
    }
    Some(out)
}

/// What part of a rule matches: `names` (each a host it matches), `any` (it matches some
/// requests whatever their host), `unread` (parts naming hosts otherwise). A part with none of
/// them matches no request.
#[derive(Clone, Debug, Default)]
struct Found {
    names: Vec<String>,
    any: bool,
    unread: Vec<(String, Rejection)>,
}

impl Found {
    /// No host constraint at all (`PathPrefix(...)`).
    fn any_host(&self) -> bool {
        self.any && self.names.is_empty() && self.unread.is_empty()
    }
}

/// Matchers that do not look at the host: they leave it unconstrained.
const HOSTLESS: [&str; 12] = [
    "Path",
    "PathPrefix",
    "PathRegexp",
    "Method",
    "Header",
    "HeaderRegexp",
    "Headers",
    "HeadersRegexp",
    "Query",
    "QueryRegexp",
    "ClientIP",
    "ALPN",
];

/// Recursive descent: `or := and ('||' and)*`, `and := unary ('&&' unary)*`,
/// `unary := '!' unary | '(' or ')' | Name '(' [string (',' string)*] ')'`. `None`: not this
/// grammar.
struct Parser<'r> {
    rule: &'r str,
    tokens: Vec<(Tok, usize, usize)>,
    at: usize,
    /// How many `(` and `!` enclose the current token.
    depth: usize,
}

/// The deepest nesting of `(` and `!` read. The rule is tenant input: a million `(` would
/// otherwise recurse a million frames deep and overflow the controller's stack.
const MAX_DEPTH: usize = 64;

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|t| &t.0)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// The rule's text from token `from` to the last one read.
    fn text(&self, from: usize) -> String {
        let start = self.tokens[from].1;
        let end = self.tokens[self.at - 1].2;
        self.rule[start..end].to_string()
    }

    fn or(&mut self) -> Option<Found> {
        let mut acc = self.and()?;
        while self.eat(&Tok::Or) {
            let next = self.and()?;
            acc.names.extend(next.names);
            acc.any |= next.any;
            acc.unread.extend(next.unread);
        }
        Some(acc)
    }

    fn and(&mut self) -> Option<Found> {
        let from = self.at;
        let mut acc = self.unary()?;
        while self.eat(&Tok::And) {
            let next = self.unary()?;
            acc = if acc.any_host() {
                next
            } else if next.any_host() {
                acc
            } else if acc.unread.is_empty() && next.unread.is_empty() {
                // A host both sides match; a side that also matches any host lets the other's
                // names through. Looked up in a set: both lists are tenant input.
                let other: std::collections::HashSet<&String> = next.names.iter().collect();
                let mut names: Vec<String> = acc
                    .names
                    .iter()
                    .filter(|n| next.any || other.contains(n))
                    .cloned()
                    .collect();
                if acc.any {
                    names.extend(next.names.iter().cloned());
                }
                Found {
                    names,
                    any: acc.any && next.any,
                    unread: Vec::new(),
                }
            } else {
                // Which of the named hosts the unread part lets through is not known.
                let why = acc.unread.iter().chain(&next.unread).next().map(|u| u.1);
                Found {
                    names: Vec::new(),
                    any: false,
                    unread: vec![(self.text(from), why.unwrap_or(Rejection::UnreadRule))],
                }
            };
        }
        Some(acc)
    }

    fn unary(&mut self) -> Option<Found> {
        self.depth += 1;
        let found = self.unary_nested();
        self.depth -= 1;
        found
    }

    fn unary_nested(&mut self) -> Option<Found> {
        if self.depth > MAX_DEPTH {
            return None;
        }
        let from = self.at;
        if self.eat(&Tok::Not) {
            let inner = self.unary()?;
            if inner.names.is_empty() && inner.unread.is_empty() {
                // `!PathPrefix(...)` still matches any host; so does `!` of what matches none.
                return Some(Found {
                    any: true,
                    ..Found::default()
                });
            }
            return Some(Found {
                unread: vec![(self.text(from), Rejection::Negated)],
                ..Found::default()
            });
        }
        if self.eat(&Tok::Open) {
            let inner = self.or()?;
            return self.eat(&Tok::Close).then_some(inner);
        }
        let Some(Tok::Ident(name)) = self.peek().cloned() else {
            return None;
        };
        self.at += 1;
        if !self.eat(&Tok::Open) {
            return None;
        }
        let mut args = Vec::new();
        if !self.eat(&Tok::Close) {
            loop {
                match self.peek().cloned() {
                    Some(Tok::Str(s)) => args.push(s),
                    _ => return None,
                }
                self.at += 1;
                if self.eat(&Tok::Close) {
                    break;
                }
                if !self.eat(&Tok::Comma) {
                    return None;
                }
            }
        }
        let unread = |why| Found {
            unread: vec![(self.text(from), why)],
            ..Found::default()
        };
        Some(match name.as_str() {
            "Host" | "HostHeader" | "HostSNI" if args.is_empty() => unread(Rejection::UnreadRule),
            // `HostSNI(`*`)`: any host, or none (plain TCP).
            "HostSNI" if args.iter().any(|a| a == "*") => Found {
                any: true,
                ..Found::default()
            },
            "Host" | "HostHeader" | "HostSNI" => Found {
                names: args.iter().map(|a| a.trim().to_ascii_lowercase()).collect(),
                ..Found::default()
            },
            "HostRegexp" | "HostSNIRegexp" => unread(Rejection::Pattern),
            n if HOSTLESS.contains(&n) => Found {
                any: true,
                ..Found::default()
            },
            _ => unread(Rejection::UnreadRule),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Rejection::*;

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases, one rule and what is read of it each"
    )]
    fn rules() {
        type Case = (
            &'static str,
            &'static [&'static str],
            &'static [(&'static str, Rejection)],
        );
        let table: &[Case] = &[
            ("Host(`a.example.com`)", &["a.example.com"], &[]),
            ("Host(\"a.example.com\")", &["a.example.com"], &[]),
            ("Host(`A.Example.COM`)", &["a.example.com"], &[]),
            // v2: several arguments.
            (
                "Host(`a.example.com`, `b.example.com`)",
                &["a.example.com", "b.example.com"],
                &[],
            ),
            (
                "Host(`a.example.com`) || Host(`b.example.com`)",
                &["a.example.com", "b.example.com"],
                &[],
            ),
            ("HostHeader(`a.example.com`)", &["a.example.com"], &[]),
            (
                "Host(`a.example.com`) && PathPrefix(`/api`)",
                &["a.example.com"],
                &[],
            ),
            (
                "PathPrefix(`/api`) && (Host(`a.example.com`) || Host(`b.example.com`))",
                &["a.example.com", "b.example.com"],
                &[],
            ),
            (
                "(Host(`a.example.com`) || PathPrefix(`/x`)) && Host(`b.example.com`)",
                &["b.example.com"],
                &[],
            ),
            // A request has one host: both at once is none.
            ("Host(`a.example.com`) && Host(`b.example.com`)", &[], &[]),
            (
                "Host(`a.example.com`) && Host(`a.example.com`)",
                &["a.example.com"],
                &[],
            ),
            ("HostSNI(`x.example.com`)", &["x.example.com"], &[]),
            ("HostSNI(`*`)", &[], &[]),
            ("PathPrefix(`/`)", &[], &[]),
            ("", &[], &[]),
            (
                "Host(`a.example.com`) && !PathPrefix(`/admin`)",
                &["a.example.com"],
                &[],
            ),
            (
                "Host(`a.example.com`) || HostRegexp(`^.+\\.example\\.org$`)",
                &["a.example.com"],
                &[("HostRegexp(`^.+\\.example\\.org$`)", Pattern)],
            ),
            (
                "HostRegexp(`{sub:[a-z]+}.example.com`)",
                &[],
                &[("HostRegexp(`{sub:[a-z]+}.example.com`)", Pattern)],
            ),
            (
                "HostSNIRegexp(`^.+\\.example\\.com$`)",
                &[],
                &[("HostSNIRegexp(`^.+\\.example\\.com$`)", Pattern)],
            ),
            (
                "Host(`a.example.com`) && HostRegexp(`^a`)",
                &[],
                &[("Host(`a.example.com`) && HostRegexp(`^a`)", Pattern)],
            ),
            (
                "!Host(`a.example.com`)",
                &[],
                &[("!Host(`a.example.com`)", Negated)],
            ),
            (
                "PathPrefix(`/x`) && !(Host(`a.example.com`))",
                &[],
                &[("!(Host(`a.example.com`))", Negated)],
            ),
            // Not this grammar: the whole rule is reported.
            (
                "Host(a.example.com)",
                &[],
                &[("Host(a.example.com)", UnreadRule)],
            ),
            (
                "Host(`a.example.com`",
                &[],
                &[("Host(`a.example.com`", UnreadRule)],
            ),
            (
                "Host(`a.example.com`))",
                &[],
                &[("Host(`a.example.com`))", UnreadRule)],
            ),
            (
                "Host(`a.example.com`) &",
                &[],
                &[("Host(`a.example.com`) &", UnreadRule)],
            ),
            (
                "Host(`a.example.com) ",
                &[],
                &[("Host(`a.example.com)", UnreadRule)],
            ),
            (
                "Host(\"a\\x2e.com\")",
                &[],
                &[("Host(\"a\\x2e.com\")", UnreadRule)],
            ),
            ("Host()", &[], &[("Host()", UnreadRule)]),
            // Nested deeper than read: reported, and no stack overflow.
            (
                "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((Host(`a`))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
                &[],
                &[("((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((Host(`a`))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))", UnreadRule)],
            ),
            (
                "Host(`a.example.com`) || Fancy(`b`)",
                &["a.example.com"],
                &[("Fancy(`b`)", UnreadRule)],
            ),
        ];
        for (rule, names, unread) in table {
            let got = rule_hosts(rule);
            let want = RuleHosts {
                names: names.iter().map(|s| s.to_string()).collect(),
                unread: unread.iter().map(|(s, r)| (s.to_string(), *r)).collect(),
            };
            assert_eq!(got, want, "{rule}");
        }
    }

    #[test]
    fn hostile_nesting_is_reported_not_recursed() {
        for rule in ["(".repeat(1_000_000), "!".repeat(1_000_000)] {
            let h = rule_hosts(&rule);
            assert!(h.names.is_empty());
            assert_eq!(h.unread.len(), 1);
            assert_eq!(h.unread[0].1, UnreadRule);
        }
        let ok = format!("{}Host(`a.example.com`){}", "(".repeat(60), ")".repeat(60));
        assert_eq!(rule_hosts(&ok).names, ["a.example.com"]);
        // 200,000 names each side of `&&`, each twice: read in linear time (a search of one
        // list for each name of the other would be 4 * 10^10 comparisons).
        let many = |p: &str| {
            (0..200_000)
                .map(|i| format!("`{p}{}.example.com`", i % 100_000))
                .collect::<Vec<_>>()
                .join(",")
        };
        let rule = format!("Host({}) && Host({})", many("a"), many("a"));
        let started = std::time::Instant::now();
        assert_eq!(rule_hosts(&rule).names.len(), 100_000);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn an_objects_routes_together() {
        let spec: RoutesSpec = serde_json::from_value(serde_json::json!({
            "entryPoints": ["websecure"],
            "routes": [
                {"match": "Host(`a.example.com`)", "kind": "Rule", "services": [{"name": "s", "port": 80}]},
                {"match": "Host(`a.example.com`) && PathPrefix(`/b`)"},
                {"match": "HostRegexp(`x`)"}
            ]
        }))
        .unwrap();
        let h = spec.hosts();
        assert_eq!(h.names, ["a.example.com"]);
        assert_eq!(h.unread, [("HostRegexp(`x`)".to_string(), Pattern)]);
    }
}
