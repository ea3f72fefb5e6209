//! Rules about the module graph, checked on the source text: the pure modules import no I/O,
//! the top-level modules import each other without a cycle, nor do sibling modules anywhere
//! below them, and nothing imports `cli` (which dispatches to every subcommand). A crude reading of `crate::` paths, but it fails the build
//! the moment a rule is broken, which review alone does not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules that take data and return data.
const PURE: &[&str] = &[
    "dns_name.rs",
    "hostname.rs",
    "proxy_protocol/",
    "dns/mod.rs",
    "dns/answer.rs",
    "dns/block.rs",
    "dns/corefile.rs",
    "dns/coredns_import.rs",
    "dns/etc_hosts.rs",
    "dns/external.rs",
    "dns/name_regex.rs",
    "dns/write/plan.rs",
    "dns/write/replace.rs",
    "controller/hostnames/",
    "doctor/checks/",
    "edge/backends.rs",
    "edge/balance/maglev.rs",
    "whoami/http.rs",
    "whoami/report.rs",
    "manifests/documents.rs",
    "manifests/objects.rs",
];

/// Paths that do I/O.
const IO: &[&str] = &[
    "kube::Api",
    "kube::Client",
    "kube::{Api",
    "kube::{Client",
    "tokio::net",
    "tokio::fs",
    "std::fs",
    "std::net::Tcp",
    "std::process::Command",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's code before its unit tests, without line comments.
fn code(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap();
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn sources() -> Vec<(String, String)> {
    let mut v = Vec::new();
    files(&src(), &mut v);
    v.sort();
    v.iter()
        .map(|p| {
            let rel = p
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, code(p))
        })
        .collect()
}

#[test]
fn pure_modules_import_no_io() {
    let mut broken = Vec::new();
    for (rel, code) in sources() {
        if !PURE
            .iter()
            .any(|m| rel == *m || (m.ends_with('/') && rel.starts_with(m)))
        {
            continue;
        }
        for io in IO {
            if code.contains(io) {
                broken.push(format!("{rel}: {io}"));
            }
        }
    }
    assert!(broken.is_empty(), "pure modules doing I/O: {broken:?}");
}

#[test]
fn top_level_modules_form_no_cycle_and_none_imports_cli() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, code) in sources() {
        let top = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        if top == "main" || top == "lib" || top == "module_rules" {
            continue;
        }
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != top {
                edges.entry(top.clone()).or_default().insert(name);
            }
        }
    }
    let importers: Vec<&String> = edges
        .iter()
        .filter(|(_, to)| to.contains("cli"))
        .map(|(from, _)| from)
        .collect();
    assert!(importers.is_empty(), "cli is imported by {importers:?}");
    // Depth-first search for a back edge.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(true) => {
                let at = path.iter().position(|p| p == n).unwrap();
                let mut cycle = path[at..].to_vec();
                cycle.push(n.to_string());
                return Some(cycle);
            }
            Some(false) => return None,
            None => {}
        }
        state.insert(n.to_string(), true);
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), false);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if let Some(cycle) = visit(n, &edges, &mut state, &mut Vec::new()) {
            panic!("module cycle: {}", cycle.join(" -> "));
        }
    }
}

/// A file's module path: `dns/write/apply.rs` -> `dns::write::apply`, `dns/mod.rs` -> `dns`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    let last = parts.pop().unwrap();
    let last = last.trim_end_matches(".rs");
    if last != "mod" && last != "lib" && last != "main" {
        parts.push(last.to_string());
    }
    parts
}

/// The module paths a file names through `crate::` and `super::`, brace groups expanded one
/// level (`super::{a, b::C}` names `a` and `b`). Not a Rust parser: enough for `use` lines and
/// qualified paths as this crate writes them.
fn referenced(module: &[String], code: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        // Bytes, not `&code[i..]`: `i` steps through multi-byte characters in comments too.
        let rest = &bytes[i..];
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let (mut base, mut j) = if starts_word && rest.starts_with(b"crate::") {
            (Vec::new(), i + 7)
        } else if starts_word && rest.starts_with(b"super::") {
            // `super` of a `foo.rs` or `foo/mod.rs` module is its parent either way.
            let mut base = module.to_vec();
            let mut j = i;
            while code[j..].starts_with("super::") {
                base.pop();
                j += 7;
            }
            (base, j)
        } else {
            i += 1;
            continue;
        };
        loop {
            if code[j..].starts_with('{') {
                let end = code[j..].find('}').map_or(code.len(), |e| j + e);
                for item in code[j + 1..end].split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        let mut p = base.clone();
                        p.push(name);
                        out.push(p);
                    }
                }
                j = end;
                break;
            }
            let name = ident(&code[j..]);
            if name.is_empty() {
                break;
            }
            j += name.len();
            base.push(name);
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        out.push(base);
        i = j.max(i + 1);
    }
    out
}

/// No two sibling modules (children of the same module, at any depth) import each other in a
/// cycle: the rule the top-level check applies to the crate root, applied inside every module
/// (e.g. `dns::write`'s `sink` and its writers). A parent and its own children may refer to
/// each other (re-exports, shared helpers); that is not a sibling edge.
#[test]
fn sibling_modules_form_no_cycle() {
    let files = sources();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(rel, _)| module_of(rel)).collect();
    // parent module -> (child -> children it imports)
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (rel, code) in &files {
        if rel == "module_rules.rs" {
            continue;
        }
        let from = module_of(rel);
        for path in referenced(&from, code) {
            // The longest prefix of the path that is a module of this crate.
            let Some(to) = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            // One is the other's ancestor: parent/child, not siblings.
            if common == from.len() || common == to.len() {
                continue;
            }
            graphs
                .entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .insert(to[common].clone());
        }
    }
    for (parent, edges) in &graphs {
        let mut done = BTreeSet::new();
        for start in edges.keys() {
            // Iterative DFS with an explicit path, reporting the first cycle found.
            let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
            while let Some((n, path)) = stack.pop() {
                for m in edges.get(&n).into_iter().flatten() {
                    if m == start {
                        let mut cycle = path.clone();
                        cycle.push(m.clone());
                        panic!(
                            "modules under `crate::{}` import each other in a cycle: {}",
                            parent.join("::"),
                            cycle.join(" -> ")
                        );
                    }
                    if !path.contains(m) && !done.contains(m) {
                        let mut p = path.clone();
                        p.push(m.clone());
                        stack.push((m.clone(), p));
                    }
                }
            }
            done.insert(start.clone());
        }
    }
}

#[test]
fn module_references_are_read() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let got = referenced(
        &m("dns::write::apply"),
        "use super::{sink::Sink, error};\nuse crate::dns::corefile;\nlet x = super::super::hostname::Hostname::new();",
    );
    assert_eq!(
        got,
        [
            m("dns::write::sink"),
            m("dns::write::error"),
            m("dns::write"),
            m("dns::corefile"),
            m("dns::hostname::Hostname::new"),
        ]
    );
    assert_eq!(module_of("dns/write/mod.rs"), m("dns::write"));
    assert_eq!(module_of("dns/write/apply.rs"), m("dns::write::apply"));
    assert_eq!(module_of("lib.rs"), Vec::<String>::new());
}
