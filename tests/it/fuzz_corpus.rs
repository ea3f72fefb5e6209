//! The fuzz targets' property checks (`ouroboros::fuzzing`) over their committed seed corpora in
//! `fuzz/corpus/<target>/`, on stable and without libFuzzer, so every `cargo test` exercises the
//! seeds (and any crash reproducer committed there as a regression seed). Seeds are the files
//! with an extension; the SHA-1-named inputs a local fuzzing run adds are not read.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use ouroboros::fuzzing::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some())
        .collect();
    seeds.sort();
    seeds
}

fn run(target: &str) {
    let (_, check) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target {target} in ouroboros::fuzzing::TARGETS"));
    let seeds = seeds(target);
    assert!(
        seeds.len() >= 3,
        "fuzz/corpus/{target}/ has {} seeds",
        seeds.len()
    );
    let mut failed = Vec::new();
    for seed in &seeds {
        let data = std::fs::read(seed).unwrap();
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(seed.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: properties fail for {failed:?}"
    );
}

#[test]
fn proxy_header_seeds() {
    run("proxy_header");
}

#[test]
fn corefile_seeds() {
    run("corefile");
}

#[test]
fn etc_hosts_seeds() {
    run("etc_hosts");
}

#[test]
fn manifest_seeds() {
    run("manifest");
}

/// Every check has a fuzz target and a corpus, and every fuzz target a check and a test above.
#[test]
fn targets_match_the_fuzz_crate() {
    let mut files: Vec<String> = std::fs::read_dir(fuzz_dir().join("fuzz_targets"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut names: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(
        files, names,
        "fuzz/fuzz_targets/ vs ouroboros::fuzzing::TARGETS"
    );

    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let this =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file!())).unwrap();
    for name in &names {
        assert!(
            manifest.contains(&format!(
                "name = \"{name}\"\npath = \"fuzz_targets/{name}.rs\""
            )),
            "fuzz/Cargo.toml has no [[bin]] for {name}"
        );
        assert!(
            this.contains(&format!("run(\"{name}\");")),
            "tests/it/fuzz_corpus.rs does not run {name}"
        );
    }
}
