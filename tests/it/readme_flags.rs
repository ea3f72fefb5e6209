//! Every flag and environment variable a subcommand's `--help` lists is documented in the
//! flag tables of the subcommand reference (README.md and docs/cli/*.md), so a new option cannot ship undocumented. Flag names repeat across
//! subcommands (`--threads`); their env vars (`OUROBOROS_EDGE_THREADS`) do not, so those pin
//! each option to its own subcommand's table.

use crate::common::{help, help_options as options};

const SUBCOMMANDS: &[&[&str]] = &[
    &["proxy"],
    &["edge"],
    &["controller"],
    &["cleanup"],
    &["doctor"],
    &["render"],
    &["render", "coredns"],
    &["render", "coredns-import"],
    &["render", "etc-hosts"],
    &["render", "external-dns"],
    &["whoami"],
];

#[test]
fn every_flag_and_env_var_is_in_the_readme() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for e in std::fs::read_dir(root.join("docs/cli")).unwrap() {
        readme.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    let mut missing = Vec::new();
    for sub in SUBCOMMANDS {
        let help = help(sub);
        let sub = sub.join(" ");
        let (flags, envs) = options(&help);
        // Every subcommand has at least the global --log-format and --log-level.
        assert!(
            flags.len() >= 2,
            "{sub}: no options parsed from --help:\n{help}"
        );
        for f in flags {
            // Tables write the flag in backticks, alone or with its value name.
            if !readme.contains(&format!("`{f}`")) && !readme.contains(&format!("`{f} ")) {
                missing.push(format!("{sub} {f}"));
            }
        }
        for e in envs {
            if !readme.contains(&format!("`{e}`")) {
                missing.push(format!("{sub} {e}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in README.md or docs/cli/: {missing:#?}"
    );
}

#[test]
fn option_lines_are_told_from_prose() {
    let help = "Usage: x\n\n  -l, --listen <ADDR>\n          Bind here; see --other-flag in prose\n          [env: OUROBOROS_X_LISTEN=]\n      --threads <N>\n          [env: OUROBOROS_X_THREADS=]\n  -h, --help\n";
    let (flags, envs) = options(help);
    assert_eq!(flags, ["--listen", "--threads"]);
    assert_eq!(envs, ["OUROBOROS_X_LISTEN", "OUROBOROS_X_THREADS"]);
}

/// `ouroboros --help` lists the subcommands in the order of the README's table, so the two
/// front doors read alike.
#[test]
fn subcommands_are_listed_in_the_readmes_order() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let table: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| subcommand | what it does |"))
        .skip(2)
        .map_while(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name))
        .collect();
    let top = help(&[]);
    let listed: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .map_while(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert_eq!(listed, table, "{top}");
}

/// Each subcommand's help lists its own options first; the global `--log-*` ones come last,
/// under a heading of their own.
#[test]
fn global_options_come_last_under_their_own_heading() {
    for sub in SUBCOMMANDS {
        let help = help(sub);
        let global = help
            .find("\nGlobal options:\n")
            .unwrap_or_else(|| panic!("{sub:?}: no Global options heading:\n{help}"));
        for flag in ["--log-format", "--log-level"] {
            assert!(
                help.find(flag).is_some_and(|at| at > global),
                "{sub:?}: {flag} is not under Global options:\n{help}"
            );
        }
    }
}
