//! One anchored regular expression that matches exactly a set of hostnames, and the few zones
//! that scope it: the `match` and zone arguments of the CoreDNS `template` pair.
//!
//! Written by hand because what matters here is specific to how CoreDNS runs the result, and no
//! crate builds it: the text goes into a Corefile twice (the A and the AAAA template), so 30,000
//! names must stay well inside the API server's 1 MiB ConfigMap limit; Go's `regexp` (RE2
//! syntax, which CoreDNS compiles it with) runs a large pattern on its NFA, whose cost per
//! character grows with the number of alternatives still alive, so the pattern must be
//! deterministic as it is read; and it must be one Corefile token (no whitespace, quotes, braces
//! or `#`).
//!
//! The shape is the minimal deterministic automaton of the names, read left to right, written
//! back as a regex:
//! - the names (with their trailing dot and an end mark) make a character trie; states with the
//!   same remaining language are merged, so shared endings (`.example.com.`) exist once;
//! - a state with several transitions becomes an alternation that rejoins at the state's
//!   immediate post-dominator (where every path from it meets again), so the shared ending
//!   follows the group once: `app-(?:1|2)\.example\.com\.$`;
//! - transitions to the same state become a character class: `[12]`;
//! - every alternation's branches start with different characters, so at most one branch (plus
//!   any wildcard) stays alive while a name is read;
//! - a wildcard `*.base` is one LDH label, `[a-z0-9-]+`, exactly as a wildcard certificate
//!   covers it (`a.b.base` and `_acme-challenge.base` are not matched); exact names it covers
//!   are dropped.
//!
//! CoreDNS matches the lower-cased query name with its trailing dot, and hostnames reach here
//! validated (`Hostname`: lower-case LDH labels, optional leading `*.`), so nothing needs
//! escaping but the dots.

use std::collections::{BTreeMap, HashSet};

/// The pattern of one wildcard label (LDH, as `Hostname` allows).
pub(crate) const WILDCARD_LABEL: &str = "[a-z0-9-]+";

/// At most this many zones before they are coarsened to top-level domains. CoreDNS checks every
/// query of the server block (cluster-internal lookups too) against every zone of every
/// template, about 0.2 µs a zone (bench/coredns-match/README.md), and our two templates list
/// the zones twice; the regex does the exact matching, so few coarse zones cost least.
pub(crate) const MAX_ZONES: usize = 4;

/// The longest `match` pattern CoreDNS accepts: from 1.14.0 its template plugin refuses a
/// longer one, and with it the whole Corefile (docs/coredns-answers.md).
pub(crate) const MAX_PATTERN: usize = 10_000;

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
    // Compared label by label as read: no key vector per name.
    names.sort_unstable_by(|a, b| a.rsplit('.').cmp(b.rsplit('.')));
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
    // Halving renders the set once per level (log2 of the parts), but its cuts fall where the
    // pattern sizes balance. Cutting straight into as many equal runs as the length asks for
    // rendered 30,000 spread-out names 2.3x faster, yet gave 47 patterns and 398 KiB instead of
    // 30 and 373 KiB, and CoreDNS pays per pattern on every query: halving stays.
    let (a, b) = names.split_at(names.len() / 2);
    split(a, out);
    split(b, out);
}

/// `^…\.$` matching exactly `names` (lower-cased, fully qualified, as CoreDNS presents a query
/// name). `None` for an empty set.
pub(crate) fn regex<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let names: Vec<&str> = names.into_iter().collect();
    // Exact names one wildcard label covers add nothing.
    let bases: HashSet<&str> = names.iter().filter_map(|n| n.strip_prefix("*.")).collect();
    let mut kept: Vec<&str> = names
        .into_iter()
        .filter(|name| {
            name.starts_with("*.")
                || !name
                    .split_once('.')
                    .is_some_and(|(_, rest)| bases.contains(rest))
        })
        .collect();
    drop(bases);
    if kept.is_empty() {
        return None;
    }
    // The construction takes the names in the order of their tokens.
    kept.sort_unstable_by(|a, b| tokens(a).cmp(tokens(b)));
    kept.dedup();
    let dag = Dag::build(&kept);
    drop(kept);
    let mut out = String::from("^");
    dag.emit(dag.root, dag.sink, &mut out);
    Some(out)
}

/// A token: a byte of the name, or one of these two.
const WILD: u8 = 0;
const END: u8 = 1;

/// A name's tokens: a leading `*` as [`WILD`], the bytes, the trailing dot and [`END`].
fn tokens(name: &str) -> impl Iterator<Item = u8> + '_ {
    let (first, rest) = match name.strip_prefix('*') {
        Some(rest) => (Some(WILD), rest),
        None => (None, name),
    };
    first.into_iter().chain(rest.bytes()).chain([b'.', END])
}

/// A state number: 30,000 names make a few hundred thousand states, so half a `usize`.
type Id = u32;

/// One transition.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Edge {
    token: u8,
    to: Id,
}

/// The minimal automaton: states numbered so that every transition goes to a smaller number
/// (the sink, which every name ends in, is 0), with each state's immediate post-dominator.
///
/// Flat, because the per-state cost is what a large set pays: state `s`'s transitions, sorted
/// by token, are `edges[start[s]..start[s + 1]]`, all states' in one vector.
struct Dag {
    edges: Vec<Edge>,
    start: Vec<u32>,
    root: Id,
    sink: Id,
    /// The state every path from a state passes through first (`Id::MAX` for the sink).
    ipdom: Vec<Id>,
}

/// States of the automaton under construction, each held once: what merges a new state into an
/// equal one. Open addressing over state numbers, hashed from the transitions themselves, so no
/// transition list is stored twice (a map keyed by the lists held them twice).
struct Register {
    slots: Vec<Id>,
    len: usize,
}

const EMPTY: Id = Id::MAX;

fn hash(edges: &[Edge]) -> u64 {
    let mut h: u64 = 0;
    for e in edges {
        let x = u64::from(e.token) | (u64::from(e.to) << 8);
        h = (h.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h
}

impl Register {
    fn new() -> Self {
        Self {
            slots: vec![EMPTY; 1024],
            len: 0,
        }
    }

    /// The slot for a state with transitions `edges`: holding an equal state, or empty.
    fn find(&self, dag: &Dag, edges: &[Edge]) -> usize {
        let mask = self.slots.len() - 1;
        // The high bits of a multiplicative hash are the well-mixed ones.
        let mut i = (hash(edges) >> 32) as usize & mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY || dag.transitions(s) == edges {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The number of the state with transitions `edges`, added to `dag` if new.
    fn intern(&mut self, dag: &mut Dag, edges: &[Edge]) -> Id {
        let i = self.find(dag, edges);
        if self.slots[i] != EMPTY {
            return self.slots[i];
        }
        let id = Id::try_from(dag.start.len() - 1).expect("fewer than 2^32 states");
        dag.edges.extend_from_slice(edges);
        dag.start
            .push(u32::try_from(dag.edges.len()).expect("fewer than 2^32 transitions"));
        self.slots[i] = id;
        self.len += 1;
        // At most half full, so probes stay short.
        if self.len * 2 > self.slots.len() {
            let mut slots = vec![EMPTY; self.slots.len() * 2];
            let mask = slots.len() - 1;
            for s in std::mem::take(&mut self.slots)
                .into_iter()
                .filter(|&s| s != EMPTY)
            {
                let mut j = (hash(dag.transitions(s)) >> 32) as usize & mask;
                while slots[j] != EMPTY {
                    j = (j + 1) & mask;
                }
                slots[j] = s;
            }
            self.slots = slots;
        }
        id
    }
}

impl Dag {
    fn transitions(&self, s: Id) -> &[Edge] {
        let s = s as usize;
        &self.edges[self.start[s] as usize..self.start[s + 1] as usize]
    }

    /// The minimal automaton of `names` (sorted by [`tokens`], distinct), built the incremental
    /// way for sorted input: only the states along the last name read are not yet final. When
    /// the next name leaves that path, the states below the point where it leaves can get no
    /// more transitions, so each is merged into an equal state already built (same transitions,
    /// to states already merged: the same remaining language) or numbered as a new one. No
    /// character trie of all the names (one state per character, ~750,000 for 30,000 names) is
    /// ever held: only the minimal automaton and one name's path.
    fn build(names: &[&str]) -> Dag {
        let mut dag = Dag {
            edges: Vec::new(),
            start: vec![0],
            root: 0,
            sink: 0,
            ipdom: Vec::new(),
        };
        let mut register = Register::new();
        // path[d]: the transitions so far of the state reached by the last name's first d
        // tokens; the last transition of each but the deepest leads to the next (its target
        // is set when that one is merged).
        let mut path: Vec<Vec<Edge>> = vec![Vec::new()];
        let mut last: Vec<u8> = Vec::new();
        let mut next: Vec<u8> = Vec::new();
        // Merges the path's states below depth `keep`, deepest first.
        let fold = |path: &mut Vec<Vec<Edge>>, dag: &mut Dag, register: &mut Register, keep| {
            while path.len() > keep + 1 {
                let state = path.pop().expect("deeper than keep");
                let id = register.intern(dag, &state);
                let parent = path.last_mut().expect("keep + 1 states");
                parent.last_mut().expect("the edge to the state").to = id;
            }
        };
        for name in names {
            next.clear();
            next.extend(tokens(name));
            let common = last.iter().zip(&next).take_while(|(a, b)| a == b).count();
            fold(&mut path, &mut dag, &mut register, common);
            for &token in &next[common..] {
                path.last_mut()
                    .expect("the root at least")
                    .push(Edge { token, to: EMPTY });
                path.push(Vec::new());
            }
            std::mem::swap(&mut last, &mut next);
        }
        fold(&mut path, &mut dag, &mut register, 0);
        let root = path.pop().expect("the root");
        dag.root = register.intern(&mut dag, &root);
        drop(register);
        dag.edges.shrink_to_fit();
        dag.start.shrink_to_fit();
        // Children are numbered before their parents, so every transition goes down in
        // number and the post-dominators come out in one pass.
        let n = dag.start.len() - 1;
        let mut ipdom = vec![Id::MAX; n];
        let mut depth = vec![0u32; n];
        for s in 0..n {
            let mut targets = dag.transitions(s as Id).iter().map(|e| e.to);
            let Some(first) = targets.next() else {
                continue; // the sink
            };
            let p = targets.fold(first, |a, b| lca(&ipdom, &depth, a, b));
            ipdom[s] = p;
            depth[s] = depth[p as usize] + 1;
        }
        dag.sink = (0..n as Id)
            .find(|&s| dag.transitions(s).is_empty())
            .unwrap_or(0);
        dag.ipdom = ipdom;
        dag
    }

    /// Appends the regex of every path from `from` to `stop` (its post-dominator or the sink).
    fn emit(&self, from: Id, stop: Id, out: &mut String) {
        let mut at = from;
        while at != stop {
            let edges = self.transitions(at);
            if let [e] = edges {
                push_token(e.token, out);
                at = e.to;
                continue;
            }
            let join = self.ipdom[at as usize];
            // Transitions to the same state share one branch (a class for plain bytes).
            let mut by_target: BTreeMap<Id, Vec<u8>> = BTreeMap::new();
            for e in edges {
                by_target.entry(e.to).or_default().push(e.token);
            }
            let mut branches: Vec<String> = Vec::new();
            for (next, tokens) in by_target {
                let (special, plain): (Vec<u8>, Vec<u8>) =
                    tokens.into_iter().partition(|&t| t == WILD || t == END);
                let mut heads: Vec<String> = special
                    .into_iter()
                    .map(|t| {
                        let mut h = String::new();
                        push_token(t, &mut h);
                        h
                    })
                    .collect();
                match plain.as_slice() {
                    [] => {}
                    [one] => heads.push(token_text(*one).to_string()),
                    many => heads.push(class(many)),
                }
                let mut tail = String::new();
                self.emit(next, join, &mut tail);
                for head in heads {
                    branches.push(format!("{head}{tail}"));
                }
            }
            branches.sort();
            alternation(&branches, out);
            at = join;
        }
    }
}

/// Appends `branches` as one alternation, their common ending written once after it
/// (`1\\.|2\\.` is `[12]\\.`-like `(?:1|2)\\.`, and an empty branch makes the rest optional).
fn alternation(branches: &[String], out: &mut String) {
    if let [one] = branches {
        out.push_str(one);
        return;
    }
    let shortest = branches.iter().map(String::len).min().unwrap_or(0);
    let mut common = (0..shortest)
        .take_while(|&k| {
            let b = branches[0].as_bytes()[branches[0].len() - 1 - k];
            branches.iter().all(|x| x.as_bytes()[x.len() - 1 - k] == b)
        })
        .count();
    // Only where every branch splits into whole pieces, and not between a piece and its `?`.
    let tail = |common: usize| &branches[0][branches[0].len() - common..];
    while common > 0
        && (tail(common).starts_with(['?', '+', '*'])
            || !branches.iter().all(|b| whole(&b[..b.len() - common])))
    {
        common -= 1;
    }
    let mut heads: Vec<&str> = branches.iter().map(|b| &b[..b.len() - common]).collect();
    let optional = heads.iter().any(|h| h.is_empty());
    heads.retain(|h| !h.is_empty());
    heads.dedup();
    match (heads.as_slice(), optional) {
        ([one], false) => out.push_str(one),
        ([one], true) if atom(one) => {
            out.push_str(one);
            out.push('?');
        }
        _ => {
            out.push_str("(?:");
            out.push_str(&heads.join("|"));
            out.push(')');
            if optional {
                out.push('?');
            }
        }
    }
    out.push_str(&branches[0][branches[0].len() - common..]);
}

/// `s` is a sequence of complete pieces: groups and classes closed, no dangling escape.
fn whole(s: &str) -> bool {
    let (mut parens, mut class, mut escaped) = (0i32, false, false);
    for c in s.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => parens += 1,
            ')' if !class => parens -= 1,
            _ => {}
        }
        if parens < 0 {
            return false;
        }
    }
    parens == 0 && !class && !escaped
}

/// `s` takes a quantifier as is: one character, an escape, a class or one group.
fn atom(s: &str) -> bool {
    match s.as_bytes() {
        [_] | [b'\\', _] => true,
        [b'[', .., b']'] => !s[1..s.len() - 1].contains(']'),
        [b'(', .., b')'] => {
            whole(&s[1..s.len() - 1]) && {
                // The first group closes at the end, not earlier.
                let mut depth = 0;
                s.char_indices().all(|(i, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth > 0 || i == s.len() - 1
                })
            }
        }
        _ => false,
    }
}

/// The nearest common post-dominator of `a` and `b`.
fn lca(ipdom: &[Id], depth: &[u32], mut a: Id, mut b: Id) -> Id {
    while a != b {
        if depth[a as usize] >= depth[b as usize] {
            a = ipdom[a as usize];
        } else {
            b = ipdom[b as usize];
        }
    }
    a
}

fn token_text(t: u8) -> &'static str {
    match t {
        b'.' => "\\.",
        _ => {
            // A single LDH byte: one of a static table, so no allocation per token.
            const LDH: &str = "-0123456789abcdefghijklmnopqrstuvwxyz";
            LDH.find(char::from(t)).map_or("?", |i| &LDH[i..=i])
        }
    }
}

fn push_token(t: u8, out: &mut String) {
    match t {
        WILD => out.push_str(WILDCARD_LABEL),
        END => out.push('$'),
        _ => out.push_str(token_text(t)),
    }
}

/// A character class for sorted distinct name bytes: runs of three or more letters or digits as
/// ranges, then `\.` and `-` (last, where it is literal).
fn class(bytes: &[u8]) -> String {
    let mut out = String::from("[");
    let plain: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|&b| b.is_ascii_alphanumeric())
        .collect();
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
    if bytes.contains(&b'.') {
        out.push_str("\\.");
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
                r"^(?:ap(?:i\.ap)?|www\.ap)p-[12]\.example\.com\.$",
            ),
            (
                &[
                    "*.apps.example.org",
                    "x.apps.example.org",
                    "y.x.apps.example.org",
                ],
                r"^(?:[a-z0-9-]+|y\.x)\.apps\.example\.org\.$",
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

    /// A common ending is never cut between a piece and its `?` (found by the property test).
    #[test]
    fn common_endings_keep_quantifiers_whole() {
        let r = re(&["ab.a.org", "a-12.org", "ab.ab.org", "a-1.org"]);
        let compiled = ::regex::Regex::new(&r).unwrap();
        for n in ["ab.a.org.", "a-12.org.", "ab.ab.org.", "a-1.org."] {
            assert!(compiled.is_match(n), "{n} against {r}");
        }
        for n in ["a-1b.ab.org.", "ab.a2.org.", "a.org."] {
            assert!(!compiled.is_match(n), "{n} against {r}");
        }
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
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

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
    fn nesting_is_bounded_by_the_name_length() {
        // Each name branches from the previous one at its last character: one more group per
        // name. A group opens only where a state branches, at most once per character, so
        // names of at most 253 characters nest at most 253 deep (Go refuses 1,000).
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
        assert!(depth <= 60, "depth {depth}: {r}");
        let re = ::regex::Regex::new(&r).unwrap();
        assert!(names.iter().all(|n| re.is_match(&format!("{n}."))));
        assert!(!re.is_match("b.example.com."));
    }
}
