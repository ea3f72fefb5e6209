//! One anchored regular expression that matches exactly a set of hostnames, and the few zones
//! that scope it: the `match` and zone arguments of the CoreDNS `template` pair.
//!
//! Written by hand because what matters here is specific to how CoreDNS uses the result, and no
//! crate builds it: the text goes into a Corefile twice (the A and the AAAA template), so 30,000
//! names must stay well inside the API server's 1 MiB ConfigMap limit; Go's `regexp` (RE2
//! syntax, which CoreDNS compiles it with) must match it in time linear in the query name with few
//! live threads; and it must be one Corefile token (no whitespace, quotes, braces or `#`).
//!
//! The shape is a minimised automaton over the names read label by label from the right:
//! - names become a tree of labels from the TLD down; a node that is itself a name makes its
//!   subtree optional: `(?:(?:api|www)\.)?app-1` matches `app-1`, `api.app-1` and `www.app-1`;
//! - sibling labels whose subtrees render the same are merged into one alternation of labels, so
//!   `app-1` ... `app-9999`, each with `www` and `api` below, become `(?:(?:api|www)\.)?app-(...)`;
//! - an alternation of labels is factored by common prefixes (a character trie, single characters
//!   folded into a class), so `app-1|app-12|app-2` becomes `app-(?:12?|2)`;
//! - a wildcard `*.base` is one LDH label, `[a-z0-9-]+`, exactly as a wildcard certificate covers
//!   it (`a.b.base` and `_acme-challenge.base` are not matched); exact siblings it covers are
//!   dropped.
//!
//! CoreDNS matches the lower-cased query name with its trailing dot, and hostnames reach here
//! validated (`Hostname`: lower-case LDH labels, optional leading `*.`), so nothing in a label
//! needs escaping outside the `\.` separators we write.

use std::collections::BTreeMap;

/// The pattern of one wildcard label (LDH, as `Hostname` allows).
pub(crate) const WILDCARD_LABEL: &str = "[a-z0-9-]+";

/// At most this many zones before they are coarsened to top-level domains. CoreDNS checks a
/// query against every zone of the template plugin, one label-wise comparison each, for every
/// query of the server block (cluster-internal lookups too), so the list is kept short; the regex
/// does the exact matching.
pub(crate) const MAX_ZONES: usize = 16;

/// The longest `match` pattern CoreDNS accepts: from 1.14.0 its template plugin refuses a
/// longer one, and with it the whole Corefile (docs/coredns-answers.md).
pub(crate) const MAX_PATTERN: usize = 10_000;

/// Nesting of prefix groups beyond which an alternation is written flat: Go's regexp parser
/// refuses expressions nested more than 1,000 deep (since Go 1.17.8), and label nesting adds to
/// this.
const MAX_PREFIX_DEPTH: usize = 32;

/// The zones for `names` (each `a.b.c` or `*.b.c`): the last two labels of each name, an
/// approximation of its registrable domain; above [`MAX_ZONES`], its top-level domain. Sorted,
/// distinct, none inside another.
pub(crate) fn zones<'a>(names: impl IntoIterator<Item = &'a str> + Clone) -> Vec<String> {
    let last = |name: &'a str, n: usize| -> &'a str {
        let base = name.strip_prefix("*.").unwrap_or(name);
        let mut start = base.len();
        for _ in 0..n {
            match base[..start].rfind('.') {
                Some(i) => start = i,
                None => return base,
            }
        }
        &base[start + 1..]
    };
    let mut zones: Vec<&str> = names.clone().into_iter().map(|n| last(n, 2)).collect();
    zones.sort_unstable();
    zones.dedup();
    if zones.len() > MAX_ZONES {
        zones = names.into_iter().map(|n| last(n, 1)).collect();
        zones.sort_unstable();
        zones.dedup();
    }
    // A zone inside another adds a comparison per query and nothing else.
    let inside = |z: &str, other: &str| {
        z.len() > other.len() && z.ends_with(other) && {
            z.as_bytes()[z.len() - other.len() - 1] == b'.'
        }
    };
    zones
        .iter()
        .filter(|z| !zones.iter().any(|o| inside(z, o)))
        .map(|z| z.to_string())
        .collect()
}

/// Patterns that together match exactly `names`, each at most [`MAX_PATTERN`] bytes: the set in
/// the order of its reversed labels (so neighbours share structure), halved until each half's
/// pattern fits. Empty for an empty set.
pub(crate) fn regexes<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<&str> = names.into_iter().collect();
    names.sort_by_cached_key(|n| n.rsplit('.').collect::<Vec<_>>());
    names.dedup();
    let mut out = Vec::new();
    split(&names, &mut out);
    out
}

fn split(names: &[&str], out: &mut Vec<String>) {
    let Some(r) = regex(names.iter().copied()) else {
        return;
    };
    if r.len() <= MAX_PATTERN || names.len() == 1 {
        out.push(r);
        return;
    }
    let (a, b) = names.split_at(names.len() / 2);
    split(a, out);
    split(b, out);
}

/// `^…\.$` matching exactly `names` (lower-cased, fully qualified, as CoreDNS presents a query
/// name). `None` for an empty set.
pub(crate) fn regex<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut root = Node::default();
    for name in names {
        let mut node = &mut root;
        for label in name.rsplit('.') {
            node = node.children.entry(label).or_default();
        }
        node.terminal = true;
    }
    let body = children(&root)?;
    Some(format!("^{}\\.$", body.concat()))
}

#[derive(Default)]
struct Node<'a> {
    children: BTreeMap<&'a str, Node<'a>>,
    /// The path to this node is one of the names.
    terminal: bool,
}

/// A piece of regex and how it binds, so groups are added only where needed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Frag {
    text: String,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One character, a class or a group: takes a quantifier as is.
    Atom,
    /// A sequence: can be concatenated as is.
    Seq,
    /// A top-level alternation: needs a group to be concatenated.
    Alt,
}

impl Frag {
    fn new(text: String, kind: Kind) -> Self {
        Self { text, kind }
    }

    fn alternation(alts: Vec<String>) -> Self {
        if alts.len() == 1 {
            let text = alts.into_iter().next().unwrap_or_default();
            let kind = if text.len() == 1 {
                Kind::Atom
            } else {
                Kind::Seq
            };
            return Self::new(text, kind);
        }
        Self::new(alts.join("|"), Kind::Alt)
    }

    /// The text to concatenate with others.
    fn concat(&self) -> String {
        match self.kind {
            Kind::Alt => format!("(?:{})", self.text),
            _ => self.text.clone(),
        }
    }

    /// This fragment made optional.
    fn optional(&self) -> Frag {
        let text = match self.kind {
            Kind::Atom => format!("{}?", self.text),
            _ => format!("(?:{})?", self.text),
        };
        Frag::new(text, Kind::Seq)
    }
}

/// The alternation of everything below `node` (each alternative ends with a child's label), or
/// `None` for a leaf.
fn children(node: &Node<'_>) -> Option<Frag> {
    if node.children.is_empty() {
        return None;
    }
    let wildcard = node.children.contains_key("*");
    // Children keyed by how their subtree renders: equal subtrees share one label alternation.
    let mut groups: BTreeMap<(Option<String>, bool), Vec<&str>> = BTreeMap::new();
    for (label, child) in &node.children {
        if *label == "*" {
            continue;
        }
        let below = children(child);
        if wildcard && below.is_none() {
            continue; // one label: the wildcard matches it already
        }
        groups
            .entry((below.map(|f| f.concat()), child.terminal))
            .or_default()
            .push(label);
    }
    let mut alts: Vec<String> = Vec::with_capacity(groups.len() + 1);
    if wildcard {
        alts.push(WILDCARD_LABEL.to_string());
    }
    for ((below, terminal), labels) in groups {
        let label = prefixes(&labels, 0).concat();
        alts.push(match below {
            None => label,
            Some(below) => {
                let sub = Frag::new(format!("{below}\\."), Kind::Seq);
                if terminal {
                    format!("{}{label}", sub.optional().text)
                } else {
                    format!("{}{label}", sub.text)
                }
            }
        });
    }
    Some(Frag::alternation(alts))
}

/// `strs` (sorted, distinct; `""` first if present) as an alternation factored by common
/// prefixes.
fn prefixes(strs: &[&str], depth: usize) -> Frag {
    if let [one] = strs {
        let kind = if one.len() == 1 {
            Kind::Atom
        } else {
            Kind::Seq
        };
        return Frag::new((*one).to_string(), kind);
    }
    let (optional, rest) = match strs.split_first() {
        Some((&"", rest)) => (true, rest),
        _ => (false, strs),
    };
    let mut alts = Vec::new();
    if depth >= MAX_PREFIX_DEPTH {
        alts.extend(rest.iter().map(|s| s.to_string()));
    } else {
        let mut singles = Vec::new();
        let mut i = 0;
        while i < rest.len() {
            let first = rest[i].as_bytes()[0];
            let run_len = rest[i..]
                .iter()
                .take_while(|s| s.as_bytes()[0] == first)
                .count();
            let run = &rest[i..i + run_len];
            i += run_len;
            if let [one] = run {
                if one.len() == 1 {
                    singles.push(first);
                    continue;
                }
            }
            // Sorted, so the first and last share the run's longest common prefix.
            let (a, b) = (run[0].as_bytes(), run[run.len() - 1].as_bytes());
            let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            let tails: Vec<&str> = run.iter().map(|s| &s[common..]).collect();
            let tail = prefixes(&tails, depth + 1);
            alts.push(format!("{}{}", &run[0][..common], tail.concat()));
        }
        match singles.as_slice() {
            [] => {}
            [c] => alts.push(char::from(*c).to_string()),
            _ if alts.is_empty() => {
                let body = Frag::new(class(&singles), Kind::Atom);
                return if optional { body.optional() } else { body };
            }
            _ => alts.push(class(&singles)),
        }
    }
    let body = Frag::alternation(alts);
    if optional {
        body.optional()
    } else {
        body
    }
}

/// A character class for sorted distinct LDH bytes, runs of three or more as ranges, `-` last
/// (where it is literal).
fn class(bytes: &[u8]) -> String {
    let mut out = String::from("[");
    let plain: Vec<u8> = bytes.iter().copied().filter(|&b| b != b'-').collect();
    let mut i = 0;
    while i < plain.len() {
        let mut j = i;
        while j + 1 < plain.len() && plain[j + 1] == plain[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            out.push(char::from(plain[i]));
            out.push('-');
            out.push(char::from(plain[j]));
        } else {
            for &b in &plain[i..=j] {
                out.push(char::from(b));
            }
        }
        i = j + 1;
    }
    if bytes.contains(&b'-') {
        out.push('-');
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn re(names: &[&str]) -> String {
        regex(names.iter().copied()).unwrap()
    }

    #[test]
    fn shapes() {
        for (names, want) in [
            (&["a.example.com"][..], r"^a\.example\.com\.$"),
            (
                &["a.example.com", "b.example.com"],
                r"^[ab]\.example\.com\.$",
            ),
            (
                &[
                    "app-1.example.com",
                    "app-12.example.com",
                    "app-2.example.com",
                ],
                r"^app-(?:12?|2)\.example\.com\.$",
            ),
            (
                &["shop.example.com", "example.com"],
                r"^(?:shop\.)?example\.com\.$",
            ),
            (
                &[
                    "app-1.example.com",
                    "www.app-1.example.com",
                    "api.app-1.example.com",
                    "app-2.example.com",
                    "www.app-2.example.com",
                    "api.app-2.example.com",
                ],
                r"^(?:(?:api|www)\.)?app-[12]\.example\.com\.$",
            ),
            (
                &[
                    "*.apps.example.org",
                    "x.apps.example.org",
                    "y.x.apps.example.org",
                ],
                r"^(?:[a-z0-9-]+|(?:y\.)?x)\.apps\.example\.org\.$",
            ),
            (
                &["a.example.com", "a.example.org"],
                r"^a\.example\.(?:com|org)\.$",
            ),
            (
                &["ab.example.com", "abc.example.com"],
                r"^abc?\.example\.com\.$",
            ),
            (
                &["a-1.x.io", "a-2.x.io", "a-3.x.io", "a.x.io"],
                r"^a(?:-[1-3])?\.x\.io\.$",
            ),
        ] {
            assert_eq!(re(names), want, "{names:?}");
        }
        assert_eq!(regex(std::iter::empty()), None);
    }

    #[test]
    fn classes() {
        assert_eq!(class(b"abc"), "[a-c]");
        assert_eq!(class(b"-09ab"), "[09ab-]");
        assert_eq!(class(b"0123xz"), "[0-3xz]");
    }

    #[test]
    fn zone_table() {
        for (names, want) in [
            (
                &["a.example.com", "b.c.example.com"][..],
                &["example.com"][..],
            ),
            (
                &["example.com", "*.apps.example.org"],
                &["example.com", "example.org"],
            ),
            (&["*.example.com"], &["example.com"]),
            (&["a.b.example.co.uk"], &["co.uk"]),
        ] {
            assert_eq!(zones(names.iter().copied()), want, "{names:?}");
        }
        let many: Vec<String> = (0..=MAX_ZONES)
            .map(|i| format!("shop.site-{i}.com"))
            .collect();
        let mut with_org = many.clone();
        with_org.push("a.example.org".into());
        assert_eq!(zones(with_org.iter().map(String::as_str)), ["com", "org"]);
        let fit: Vec<&str> = many[..MAX_ZONES].iter().map(String::as_str).collect();
        assert_eq!(zones(fit.iter().copied()).len(), MAX_ZONES);
    }

    fn label() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "a", "b", "ab", "abc", "a-1", "a-12", "1", "12", "ba", "x",
        ])
        .prop_map(String::from)
    }

    fn name() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(label(), 1..4),
            prop::sample::select(vec!["com", "org"]),
        )
            .prop_map(|(labels, tld)| format!("{}.{tld}", labels.join(".")))
    }

    proptest! {
        /// Against the `regex` crate (RE2 syntax, as Go's regexp): every name matches, and a
        /// probe matches exactly when it is a name or one label under a wildcard's base.
        #[test]
        fn matches_exactly_the_set(
            exact in prop::collection::vec(name(), 0..30),
            wild in prop::collection::vec(name(), 0..5),
            probes in prop::collection::vec(name(), 0..80),
        ) {
            let wild: Vec<String> = wild.iter().map(|b| format!("*.{b}")).collect();
            let names: Vec<&str> = exact.iter().chain(&wild).map(String::as_str).collect();
            prop_assume!(!names.is_empty());
            let text = regex(names.iter().copied()).unwrap();
            let r = ::regex::Regex::new(&text).unwrap();
            let member = |p: &str| {
                exact.iter().any(|e| e == p)
                    || wild.iter().any(|w| {
                        p.split_once('.').is_some_and(|(_, base)| Some(base) == w.strip_prefix("*."))
                    })
            };
            for p in exact.iter().chain(&probes) {
                prop_assert_eq!(r.is_match(&format!("{p}.")), member(p), "{} against {}", p, text);
            }
            for w in &wild {
                let base = w.strip_prefix("*.").unwrap();
                prop_assert!(r.is_match(&format!("any-label.{base}.")), "{}", text);
                prop_assert!(!r.is_match(&format!("_acme-challenge.{base}.")), "{}", text);
                let deep = format!("a.b.{base}");
                prop_assert!(!r.is_match(&format!("{deep}.")) || member(&deep), "{}", text);
            }
            // Not fully qualified, or with more after it: never.
            for p in &exact {
                prop_assert!(!r.is_match(p));
                let longer = format!("{p}.evil.com");
                prop_assert!(!r.is_match(&format!("{longer}.")) || member(&longer), "{}", text);
            }
        }
    }

    #[test]
    fn long_sets_split_into_patterns_coredns_accepts() {
        // Random-looking labels share little, so 3,000 names need several patterns.
        let names: Vec<String> = (0..3000u64)
            .map(|i| {
                format!(
                    "s{:x}.t{}.example.com",
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20,
                    i % 7
                )
            })
            .collect();
        let parts = regexes(names.iter().map(String::as_str));
        assert!(parts.len() > 1, "{}", parts.len());
        let compiled: Vec<::regex::Regex> = parts
            .iter()
            .map(|p| {
                assert!(p.len() <= MAX_PATTERN, "{}", p.len());
                ::regex::Regex::new(p).unwrap()
            })
            .collect();
        for n in &names {
            let q = format!("{n}.");
            assert_eq!(compiled.iter().filter(|r| r.is_match(&q)).count(), 1, "{n}");
        }
        assert!(!compiled.iter().any(|r| r.is_match("x.t1.example.com.")));
        assert_eq!(regexes(["a.example.com"]), [r"^a\.example\.com\.$"]);
        assert!(regexes(std::iter::empty()).is_empty());
    }

    #[test]
    fn deep_prefix_chains_stay_within_the_nesting_limit() {
        // Each name branches from the previous one at its last character: one more prefix
        // group per name without the flat fallback.
        let names: Vec<String> = (1..60)
            .map(|n| format!("{}b.example.com", "a".repeat(n)))
            .collect();
        let r = regex(names.iter().map(String::as_str)).unwrap();
        let depth = r
            .chars()
            .scan(0i32, |d, c| {
                *d += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                Some(*d)
            })
            .max()
            .unwrap();
        assert!(depth <= MAX_PREFIX_DEPTH as i32 + 2, "depth {depth}: {r}");
    }
}
