//! The repository paths the documentation names exist: a file moved or split by a refactor
//! leaves the docs pointing at nothing, and no other test reads them. Scanned: README.md,
//! docs/*.md, docs/cli/*.md and bench/**/README.md (CHANGELOG.md is history, and keeps the
//! names things had).

use std::path::{Path, PathBuf};

/// The top-level folders whose paths are checked.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "deploy/",
    ".ci/",
    "bench/",
    "charts/",
    "e2e/",
    "examples/",
    "fuzz/",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The documents scanned, relative to the repository.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    for dir in ["docs", "docs/cli"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(root()).unwrap().to_path_buf());
            }
        }
    }
    let mut dirs = vec![PathBuf::from("bench")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(root().join(&d)).unwrap() {
            let e = e.unwrap();
            let rel = d.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                dirs.push(rel);
            } else if e.file_name() == "README.md" {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./*{},-".contains(c)
}

/// The repository paths a line names: a word beginning with one of ROOTS (not inside a URL or
/// another path) that names a file (its last part has an extension), a folder (a trailing `/`)
/// or a glob, `src/` ones being Rust files or folders. `kubectl logs deploy/NAME` names no
/// file; `{a,b}` stands for both.
fn paths_in(line: &str) -> Vec<String> {
    let mut out = vec![];
    for (i, _) in line.char_indices() {
        let before = line[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_./-".contains(c)) {
            continue;
        }
        let rest = &line[i..];
        if !ROOTS.iter().any(|r| rest.starts_with(r)) {
            continue;
        }
        let end = rest.find(|c| !path_char(c)).unwrap_or(rest.len());
        let word = rest[..end].trim_end_matches(['.', ',']);
        let last = word.trim_end_matches('/').rsplit('/').next().unwrap();
        let dir = word.ends_with('/');
        let file = last.contains('.');
        let named = if word.starts_with("src/") {
            dir || word.ends_with(".rs") || word.contains('*')
        } else {
            dir || file || word.contains('*')
        };
        if named {
            out.extend(expand_braces(word));
        }
    }
    out
}

/// `a{b,c}d{e,f}` as its four words.
fn expand_braces(word: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (word.find('{'), word.find('}')) else {
        return vec![word.to_string()];
    };
    if close < open {
        return vec![word.to_string()];
    }
    word[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &word[..open], &word[close + 1..])))
        .collect()
}

/// Whether a path names something in the repository: a glob, something its folder before the
/// first `*` holds; a folder .gitignore lists (`/bench/results/`: made when the benchmarks
/// run), anything in it.
fn exists(path: &str, ignored: &[String]) -> bool {
    if ignored.iter().any(|d| path.starts_with(d.as_str())) {
        return true;
    }
    match path.find('*') {
        Some(star) => root()
            .join(&path[..path[..star].rfind('/').map_or(0, |s| s + 1)])
            .is_dir(),
        None => root().join(path).exists(),
    }
}

/// The folders .gitignore lists from the top (`/name/`): made by builds and runs, not kept.
fn ignored_folders() -> Vec<String> {
    std::fs::read_to_string(root().join(".gitignore"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix('/')?.strip_suffix('/'))
        .map(|d| format!("{d}/"))
        .collect()
}

#[test]
fn every_path_the_docs_name_exists() {
    let ignored = ignored_folders();
    let mut missing = vec![];
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(root().join(&doc)).unwrap();
        for (n, line) in text.lines().enumerate() {
            for p in paths_in(line) {
                checked += 1;
                if !exists(&p, &ignored) {
                    missing.push(format!("{}:{}: {p}", doc.display(), n + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name paths that do not exist (moved? name the new place):\n{}",
        missing.join("\n")
    );
    assert!(checked > 100, "only {checked} paths found in the docs");
}

#[test]
fn paths_are_read_from_prose_code_and_globs() {
    let line = "`src/dns/write/apply.rs`, see tests/fixtures/doctor/{healthy,broken}.{txt,json}. \
        kubectl -n x logs deploy/ouroboros-controller; https://github.com/a/b/src/x.rs; \
        Go's src/regexp/regexp.go and src/relay/ and bench/results/*.json; ../tests/x.rs";
    assert_eq!(
        paths_in(line),
        [
            "src/dns/write/apply.rs",
            "tests/fixtures/doctor/healthy.txt",
            "tests/fixtures/doctor/healthy.json",
            "tests/fixtures/doctor/broken.txt",
            "tests/fixtures/doctor/broken.json",
            "src/relay/",
            "bench/results/*.json",
        ]
    );
    let ignored = ["bench/results/".to_string()];
    assert!(exists("bench/results/proxy-1.json", &ignored));
    assert!(exists("tests/fixtures/*", &ignored));
    assert!(!exists("src/nothing/*.rs", &ignored));
    assert!(!exists("src/dns/apply.rs", &ignored));
}
