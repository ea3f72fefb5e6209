//! docs/migration.md's flag tables stay honest: each table after a
//! `<!-- migration-flags: SUBCOMMAND -->` line may name, in its `ours: ...` columns, only flags
//! and environment variables that `ouroboros SUBCOMMAND --help` lists, and together the tables
//! of a subcommand list every flag and variable of the reference tool's (lexfrei/ouroboros at
//! da752ba: `internal/config/controller.go`, `internal/config/proxy.go`,
//! `internal/coredns/nodelocaldns.go`, `cmd/ouroboros/controller_cmd.go`).

use std::collections::BTreeSet;

use crate::common::{help, help_options};

const MARKER: &str = "<!-- migration-flags: ";

const REFERENCE_CONTROLLER_FLAGS: &[&str] = &[
    "--mode",
    "--kubeconfig",
    "--gateway-api",
    "--resync",
    "--ingress-class",
    "--gateway-class",
    "--cluster-domain",
    "--log-level",
    "--coredns-namespace",
    "--coredns-configmap",
    "--coredns-key",
    "--proxy-fqdn",
    "--proxy-service-name",
    "--proxy-service-namespace",
    "--coredns-import-namespace",
    "--coredns-import-configmap",
    "--coredns-import-key",
    "--etc-hosts",
    "--proxy-ip",
    "--external-dns-namespace",
    "--external-dns-record-ttl",
    "--external-dns-proxy-ip",
    "--external-dns-proxy-service",
    "--external-dns-annotation",
    "--external-dns-label",
    "--external-dns-output",
    "--external-dns-annotation-prefix",
];

const REFERENCE_CONTROLLER_ENVS: &[&str] = &[
    "OUROBOROS_CONTROLLER_MODE",
    "OUROBOROS_CONTROLLER_KUBECONFIG",
    "OUROBOROS_CONTROLLER_CLUSTER_DOMAIN",
    "OUROBOROS_CONTROLLER_LOG_LEVEL",
    "OUROBOROS_CONTROLLER_GATEWAY_API",
    "OUROBOROS_CONTROLLER_RESYNC",
    "OUROBOROS_CONTROLLER_COREDNS_NAMESPACE",
    "OUROBOROS_CONTROLLER_COREDNS_CONFIGMAP",
    "OUROBOROS_CONTROLLER_COREDNS_KEY",
    "OUROBOROS_CONTROLLER_PROXY_FQDN",
    "OUROBOROS_CONTROLLER_PROXY_SERVICE_NAME",
    "OUROBOROS_CONTROLLER_PROXY_SERVICE_NAMESPACE",
    "OUROBOROS_CONTROLLER_COREDNS_IMPORT_NAMESPACE",
    "OUROBOROS_CONTROLLER_COREDNS_IMPORT_CONFIGMAP",
    "OUROBOROS_CONTROLLER_COREDNS_IMPORT_KEY",
    "OUROBOROS_CONTROLLER_ETC_HOSTS",
    "OUROBOROS_CONTROLLER_PROXY_IP",
    "OUROBOROS_CONTROLLER_INGRESS_CLASS",
    "OUROBOROS_CONTROLLER_GATEWAY_CLASS",
    "OUROBOROS_CONTROLLER_EXTERNAL_DNS_NAMESPACE",
    "OUROBOROS_CONTROLLER_EXTERNAL_DNS_RECORD_TTL",
    "OUROBOROS_CONTROLLER_EXTERNAL_DNS_PROXY_IP",
    "OUROBOROS_CONTROLLER_EXTERNAL_DNS_PROXY_SERVICE",
    "OUROBOROS_CONTROLLER_EXTERNAL_DNS_OUTPUT",
    "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ANNOTATION_PREFIX",
    "OUROBOROS_INSTANCE",
    "OUROBOROS_NODE_LOCAL_DNS_NAMESPACE",
    "OUROBOROS_NODE_LOCAL_DNS_CONFIGMAP",
];

const REFERENCE_PROXY_FLAGS: &[&str] = &[
    "--listen-http",
    "--listen-https",
    "--listen-health",
    "--target-host",
    "--target-service-name",
    "--target-service-namespace",
    "--cluster-domain",
    "--target-http-port",
    "--target-https-port",
    "--dial-timeout",
    "--ready-timeout",
    "--shutdown-grace",
];

const REFERENCE_PROXY_ENVS: &[&str] = &[
    "OUROBOROS_PROXY_LISTEN_HTTP",
    "OUROBOROS_PROXY_LISTEN_HTTPS",
    "OUROBOROS_PROXY_LISTEN_HEALTH",
    "OUROBOROS_PROXY_TARGET_HOST",
    "OUROBOROS_PROXY_TARGET_SERVICE_NAME",
    "OUROBOROS_PROXY_TARGET_SERVICE_NAMESPACE",
    "OUROBOROS_PROXY_CLUSTER_DOMAIN",
    "OUROBOROS_PROXY_TARGET_HTTP_PORT",
    "OUROBOROS_PROXY_TARGET_HTTPS_PORT",
    "OUROBOROS_PROXY_DIAL_TIMEOUT",
    "OUROBOROS_PROXY_READY_TIMEOUT",
    "OUROBOROS_PROXY_SHUTDOWN_GRACE",
];

/// One flag table of the page: the subcommand its marker names, the header cells and the rows.
#[derive(Debug)]
struct Table {
    sub: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// The cells of the columns whose header starts with `prefix`, row by row.
    fn columns(&self, prefix: &str) -> Vec<Vec<&str>> {
        let idx: Vec<usize> = (0..self.header.len())
            .filter(|&i| self.header[i].starts_with(prefix))
            .collect();
        self.rows
            .iter()
            .map(|r| {
                idx.iter()
                    .filter_map(|&i| r.get(i).map(String::as_str))
                    .collect()
            })
            .collect()
    }
}

/// The cells of a Markdown table row; `\|` stays inside its cell.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

/// Every table that follows a marker line (blank lines between them allowed).
fn tables(doc: &str) -> Vec<Table> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix(MARKER) else {
            continue;
        };
        let sub = rest.trim_end_matches("-->").trim().to_string();
        let body: Vec<&str> = lines[i + 1..]
            .iter()
            .skip_while(|l| l.trim().is_empty())
            .take_while(|l| l.trim_start().starts_with('|'))
            .copied()
            .collect();
        assert!(
            body.len() >= 3,
            "docs/migration.md: no table after the marker on line {}",
            i + 1
        );
        out.push(Table {
            sub,
            header: cells(body[0]),
            // body[1] is the `| --- |` separator.
            rows: body[2..].iter().map(|l| cells(l)).collect(),
        });
    }
    out
}

/// The flags (`--name`) and variables (`OUROBOROS_NAME`) written in backticks in `cell`.
fn names_in(cell: &str) -> (Vec<String>, Vec<String>) {
    let mut flags = Vec::new();
    let mut envs = Vec::new();
    for span in cell.split('`').skip(1).step_by(2) {
        if let Some(rest) = span.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            flags.push(format!("--{name}"));
        } else if span.starts_with("OUROBOROS_") {
            let name: String = span
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            envs.push(name);
        }
    }
    (flags, envs)
}

fn doc_tables() -> Vec<Table> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/migration.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    tables(&doc)
}

#[test]
fn every_flag_and_variable_given_for_ours_is_in_the_binarys_help() {
    let tables = doc_tables();
    let subs: BTreeSet<&str> = tables.iter().map(|t| t.sub.as_str()).collect();
    assert_eq!(
        subs,
        BTreeSet::from(["controller", "proxy"]),
        "docs/migration.md: flag tables for the controller and the proxy"
    );
    let mut wrong = Vec::new();
    let mut checked = 0;
    for t in &tables {
        let (flags, envs) = help_options(&help(&[t.sub.as_str()]));
        let flag_cols = t.columns("ours: flag");
        assert!(
            flag_cols.iter().all(|r| !r.is_empty()),
            "{}: a table without an `ours: flag` column: {:?}",
            t.sub,
            t.header
        );
        for (row, (ours, flag_cells)) in t.columns("ours").iter().zip(&flag_cols).enumerate() {
            let named: Vec<String> = flag_cells.iter().flat_map(|c| names_in(c).0).collect();
            let envs_named: Vec<String> = flag_cells.iter().flat_map(|c| names_in(c).1).collect();
            if named.is_empty() && envs_named.is_empty() {
                wrong.push(format!("{} row {}: names no flag of ours", t.sub, row + 1));
            }
            for cell in ours {
                let (f, e) = names_in(cell);
                for f in f {
                    checked += 1;
                    if !flags.contains(&f) {
                        wrong.push(format!(
                            "{}: {f} is not in `ouroboros {} --help`",
                            t.sub, t.sub
                        ));
                    }
                }
                for e in e {
                    checked += 1;
                    if !envs.contains(&e) {
                        wrong.push(format!(
                            "{}: {e} is not in `ouroboros {} --help`",
                            t.sub, t.sub
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "docs/migration.md: {wrong:#?}");
    // The tables hold well over a hundred names of ours; a parser that found none would pass.
    assert!(
        checked > 100,
        "only {checked} names of ours found in the tables"
    );
}

#[test]
fn the_tables_list_every_flag_and_variable_of_the_reference_tool() {
    let tables = doc_tables();
    for (sub, want_flags, want_envs) in [
        (
            "controller",
            REFERENCE_CONTROLLER_FLAGS,
            REFERENCE_CONTROLLER_ENVS,
        ),
        ("proxy", REFERENCE_PROXY_FLAGS, REFERENCE_PROXY_ENVS),
    ] {
        let mut flags = BTreeSet::new();
        let mut envs = BTreeSet::new();
        for t in tables.iter().filter(|t| t.sub == sub) {
            for cell in t.columns("reference flag").concat() {
                flags.extend(names_in(cell).0);
            }
            for cell in t.columns("reference env").concat() {
                envs.extend(names_in(cell).1);
            }
        }
        let want: BTreeSet<String> = want_flags.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            flags, want,
            "{sub}: the reference tool's flags in docs/migration.md"
        );
        let want: BTreeSet<String> = want_envs.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            envs, want,
            "{sub}: the reference tool's variables in docs/migration.md"
        );
    }
}

#[test]
fn tables_cells_and_names_are_parsed() {
    let doc = "text `--not-a-row`\n\n<!-- migration-flags: proxy -->\n\n\
               | reference flag | ours: flag | ours: env var | notes |\n\
               | --- | --- | --- | --- |\n\
               | `--a` | `--b`, `--c-d VALUE` | `OUROBOROS_B=1` | `a\\|b` `--e` |\n\
               | none | `--f=true` | none | |\n\
               \nafter\n| not | a | table |\n";
    let t = tables(doc);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].sub, "proxy");
    assert_eq!(t[0].rows.len(), 2);
    assert_eq!(t[0].rows[0][3], "`a|b` `--e`");
    let ours: Vec<(Vec<String>, Vec<String>)> = t[0].columns("ours")[0]
        .iter()
        .map(|c| names_in(c))
        .collect();
    assert_eq!(ours[0], (vec!["--b".into(), "--c-d".into()], vec![]));
    assert_eq!(ours[1], (vec![], vec!["OUROBOROS_B".into()]));
    assert_eq!(names_in(&t[0].rows[1][1]).0, ["--f"]);
    assert_eq!(t[0].columns("reference flag")[1], ["none"]);
}
