//! Rules about the module graph, checked on the source text: the pure modules import no I/O,
//! the top-level modules import each other without a cycle, and nothing imports `cli` (which
//! dispatches to every subcommand). A crude reading of `crate::` paths, but it fails the build
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
    "controller/hostnames/",
    "doctor/checks/",
    "edge/backends.rs",
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
